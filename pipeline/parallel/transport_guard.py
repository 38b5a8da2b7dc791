"""The server side of the bus's connection authentication: :class:`TransportGuard` configures a node's PULL
socket, answers its ZAP requests, watches the handshakes and bounds what each connection can make ZeroMQ hold
(the mechanisms and the bounds are described in :mod:`pipeline.parallel.transport_auth`)."""
from __future__ import annotations

import hmac
import itertools
import os
import socket as _socket
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Mapping, Optional, Tuple

import zmq
from zmq.utils import z85
from zmq.utils.monitor import parse_monitor_message

from .bus_credentials import USER, keypair, plain_password
from .conn_watch import Conn, counters, peer_still_there, watchable
from .wire import WIRE_MAX

__all__ = ['TransportGuard', 'MAX_PENDING', 'ZAP_ENDPOINT']

ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_GREETING = 64  # a ZMTP 3 greeting
_BEFORE_ZAP = {"plain": _GREETING, "curve": _GREETING + 170}  # bytes a server sent when it awaits the ZAP reply
_LINK_WAIT = 1.0  # s the guard waits for the connection it answered to move on (see ``_link``)
_TICK = 0.02  # s between two looks at the connections' byte counts
_PAIR_WAIT = 0.5  # s a close seen before its refusal event waits for that event (then it was a close alone)
MAX_PENDING = 64  # connections still in their handshake, at most (the newest beyond are cut)


class TransportGuard:
    """The server side: configures the PULL socket, answers ZAP requests, watches handshakes and bounds what
    each connection can make ZeroMQ hold.

    Runs on its own thread (``run``), which owns the ZAP and monitor sockets. ``on_refused(address, why,
    wrong_key)`` is called on that thread when a connection is refused, ``on_cut(address, why)`` when one
    that passed the handshake is closed for holding too much, ``on_closed(address, why)`` when ZeroMQ closed
    one that passed the handshake while its peer had not (see below); all only log: the guard counts in
    ``stats`` (``refused_connections``: every connection that closed without passing the handshake, once;
    ``cut_connections``; ``closed_connections``).

    The bound (``max_peer_bytes``, Linux TCP): every connection is watched through a duplicate of its
    descriptor (the ``ACCEPTED`` monitor event carries it); the kernel counts the bytes it received and
    ZeroMQ read. Each connection that passes the handshake gets its own ZAP user id, and the reader adds the
    wire size of every frame it reads to ``delivered[user id]``; so what ZeroMQ holds for a connection, read
    from it but not yet handed over (queued messages, the unfinished frame or multipart message), is the
    difference. A connection holding more than ``max_peer_bytes`` is shut down (ZeroMQ then drops what it
    held). Genuine peers never come near: their messages are at most ``WIRE_MAX`` bytes and the socket's
    receive queue holds at most ``max_peer_bytes // WIRE_MAX - 3`` of them (``ZmqRouter`` sets RCVHWM so).
    A user id is tied to its connection by the one visible effect of the ZAP reply: the guard answers one
    request at a time, and the connection that was waiting for it (the server had sent exactly its greeting,
    plus WELCOME under CURVE) is the one that then sends more. A connection that cannot be tied so is shut
    down ``_LINK_WAIT`` s after its handshake, and one still in its handshake after ``handshake_timeout`` + 1 s
    (or beyond ``MAX_PENDING`` such connections) too.

    A frame over ``WIRE_MAX`` makes ZeroMQ close its connection at the frame's header (``ZMQ_MAXMSGSIZE``)
    with no event but ``DISCONNECTED``, as when the peer closes it. The guard tells them apart through its
    duplicate of the descriptor, which keeps the connection open after ZeroMQ closed its own: if it is still
    established, or holds bytes nobody read, its peer did not end it (``conn_watch.peer_still_there``), so
    ZeroMQ dropped it for a protocol error, of which a frame over the limit is the only one a ZeroMQ library
    can send. A peer that sent such a frame and closed its side before the guard looked (within ``_TICK``),
    leaving nothing unread, is not told apart. Linux TCP only, like the bound."""

    def __init__(self, ctx: zmq.Context, key: bytes, bus_auth: str, on_refused: Callable[[str, str, bool], None],
                 stats: Optional[Dict[str, int]] = None, max_peer_bytes: int = 64 << 20,
                 handshake_timeout: float = 5.0, on_cut: Optional[Callable[[str, str], None]] = None,
                 on_closed: Optional[Callable[[str, str], None]] = None) -> None:
        self.bus_auth = bus_auth
        self._on_refused = on_refused
        self._on_cut = on_cut or (lambda address, why: None)
        self._on_closed = on_closed or (lambda address, why: None)
        self.stats = stats if stats is not None else {"refused_connections": 0, "cut_connections": 0,
                                                      "closed_connections": 0}
        self.max_peer_bytes = int(max_peer_bytes)
        self.handshake_timeout = float(handshake_timeout)
        if bus_auth == "curve":
            self._server_public, self._server_secret = keypair(key, "curve server")
            self._expected = z85.decode(keypair(key, "curve client")[0])
        else:
            self._expected = plain_password(key)
        # Bound before the PULL socket accepts anything: without a ZAP handler PLAIN/CURVE refuse everyone.
        self._zap = ctx.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ENDPOINT)
        self._monitor: Any = None
        self._last_address = "an unknown address"  # remote address of the connection accepted last
        self._conns: Dict[int, Conn] = {}  # socket inode -> connection
        self._by_fd: Dict[int, int] = {}  # ZeroMQ's descriptor -> socket inode
        self._uids = itertools.count(1)
        self._failures = 0  # refusals counted from an event whose connection has not closed yet
        self._early_closes: Deque[float] = deque()  # when closes counted before any refusal event came
        self._forget: Deque[Tuple[float, str]] = deque()  # user ids of closed connections, dropped later
        self._next_tick = 0.0
        self._port: Optional[int] = None  # the PULL socket's TCP port (``listening``)
        # The reader adds the wire size of each frame it reads here (None: not watched on this platform).
        self.delivered: Optional[Dict[str, int]] = {} if watchable() else None

    def wire_size(self) -> Callable[[int], int]:
        """Bytes a frame of ``n`` bytes took on the connection (ZMTP framing; CURVE's MESSAGE command)."""
        if self.bus_auth == "curve":
            return lambda n: n + 33 + (2 if n + 33 < 256 else 9)
        return lambda n: n + (2 if n < 256 else 9)

    def server(self, pull: zmq.Socket) -> None:
        """Configure the PULL socket (before ``bind``) and watch its handshakes."""
        pull.setsockopt(zmq.ZAP_DOMAIN, b"rlpipe")
        if self.bus_auth == "curve":
            pull.curve_server = True
            pull.curve_publickey = self._server_public
            pull.curve_secretkey = self._server_secret
        else:
            pull.plain_server = True
        self._monitor = pull.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
                                                | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                                                | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)

    def listening(self, endpoint: str) -> None:
        """The PULL socket is bound to ``endpoint``: only connections accepted on its port are watched (a
        stale ACCEPTED event may name a descriptor already reused by another socket of this process)."""
        if endpoint.startswith("tcp://"):
            self._port = int(endpoint.rsplit(":", 1)[1])

    def close(self) -> None:
        """Close the sockets without running (``run`` closes them when it ends)."""
        self._zap.close(0)
        if self._monitor is not None:
            self._monitor.close(0)
        for c in list(self._conns.values()):
            self._untrack(c)

    def run(self, stopping: threading.Event) -> None:
        poller = zmq.Poller()
        poller.register(self._zap, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        try:
            while not stopping.is_set():
                for sock, _ in poller.poll(int(_TICK * 1000) if self._conns else 100):
                    if sock is self._zap:
                        self._drain_monitor()  # the ACCEPTED event of the connection asking comes first
                        self._answer(self._zap.recv_multipart())
                    else:
                        self._drain_monitor()
                now = time.monotonic()
                if now >= self._next_tick:
                    self._next_tick = now + _TICK
                    self._check(now)
        except zmq.ContextTerminated:
            pass
        finally:
            self.close()

    def _drain_monitor(self) -> None:
        if self._monitor is None:
            return
        while self._monitor.poll(0):
            self._watch(parse_monitor_message(self._monitor.recv_multipart()))

    # ------------------------------------------------------------------ ZAP
    def _answer(self, request: list) -> None:
        """One ZAP request: [version, id, domain, address, routing id, mechanism, credentials...]."""
        ok = False
        address = request[3].decode(errors="replace") if len(request) > 3 else ""
        if len(request) >= 7 and request[0] == b"1.0":
            mechanism, creds = request[5], request[6:]
            if mechanism == b"PLAIN" and self.bus_auth == "plain" and len(creds) == 2:
                ok = creds[0] == USER and hmac.compare_digest(creds[1], self._expected)
            elif mechanism == b"CURVE" and self.bus_auth == "curve" and len(creds) == 1:
                ok = hmac.compare_digest(creds[0], self._expected)
        rid = request[1] if len(request) > 1 else b""
        uid = f"c{next(self._uids)}" if ok else ""
        waiting = self._awaiting_zap()
        self._zap.send_multipart([b"1.0", rid, b"200" if ok else b"400", b"OK" if ok else b"wrong credential",
                                  uid.encode(), b""])
        self._link(waiting, uid)
        if not ok:
            self._refused(address or "an ipc peer", "its credential is not derived from this key", True)

    def _awaiting_zap(self) -> Dict[int, Conn]:
        """The watched connections in the state of one waiting for a ZAP reply (see the class docstring)."""
        target = _BEFORE_ZAP.get(self.bus_auth, _GREETING)
        out = {}
        for c in self._conns.values():
            if not c.authed_at and not c.cut:
                counts = counters(c.sock)
                if counts is not None and counts[0] == target:
                    out[c.ino] = c
        return out

    def _link(self, waiting: Dict[int, Conn], uid: str) -> None:
        """After a ZAP reply: find the connection that moved on (the one that asked); give it ``uid``."""
        if not waiting:
            return
        target = _BEFORE_ZAP.get(self.bus_auth, _GREETING)
        deadline = time.monotonic() + _LINK_WAIT
        while True:
            moved = []
            for c in waiting.values():
                counts = counters(c.sock)
                if counts is None or counts[0] != target or not self._open(c):
                    moved.append((c, counts))
            if moved or time.monotonic() >= deadline:
                break
            time.sleep(0.001)
        if len(moved) == 1 and uid:
            c, counts = moved[0]
            if counts is not None and self._open(c):
                got = counts[1]
                c.uid, c.authed_at = uid, time.monotonic()
                c.base = got - self.delivered.get(uid, 0) if self.delivered is not None else got

    # ------------------------------------------------------------------ monitor events
    def _watch(self, event: Mapping[str, Any]) -> None:
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_ACCEPTED:
            self._track(value)
        elif kind == zmq.EVENT_DISCONNECTED:
            ino = self._by_fd.get(value)
            c = self._conns.get(ino) if ino is not None else None
            if c is not None and not self._open(c):
                self._closed(c)
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            # The event carries no fd: name the connection accepted most recently (usually the one; the fd of
            # a connection refused at once may be closed before we look, then the one before it).
            address = self._last_address
            if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
                self._refused(address, "its CURVE keys are not derived from this key", True)
            elif value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                self._refused(address, f"it does not authenticate with {self.bus_auth.upper()} (a client "
                              "without the key, or a node with another --bus-auth)", False)
            else:
                self._refused(address, f"ZeroMQ protocol error {value:#x} in the handshake", False)
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL:
            self._refused(self._last_address, f"its handshake did not finish (within handshake_timeout "
                          f"{self.handshake_timeout:g} s, or it went away)", False)

    def _refused(self, address: str, why: str, wrong_key: bool) -> None:
        """A refusal with a reason: counted now, and the close of its connection then is not counted again;
        unless that close was seen first (the monitor event can arrive after the guard saw the descriptor
        go): a close counted less than ``_PAIR_WAIT`` s ago takes this refusal as its own."""
        now = time.monotonic()
        while self._early_closes and now - self._early_closes[0] > _PAIR_WAIT:
            self._early_closes.popleft()
        if self._early_closes:
            self._early_closes.popleft()
        else:
            self.stats["refused_connections"] += 1
            self._failures += 1
        self._on_refused(address, why, wrong_key)

    def _track(self, zfd: int) -> None:
        try:
            sock = _socket.socket(fileno=os.dup(zfd))  # a duplicate (family detected): closing it is safe
        except OSError:  # closed before we looked (a refused peer does not linger)
            self._closed_unseen()
            return
        try:
            name = sock.getpeername()
            address = str(name[0]) if isinstance(name, tuple) else (name or "an ipc peer")
            local = sock.getsockname()
        except OSError:
            address, local = "", None
        counts = counters(sock) if self.delivered is not None else None
        if counts is None:  # not watched: not TCP (ipc), or not Linux
            if address:
                self._last_address = address
            sock.close()
            return
        if not isinstance(local, tuple) or local[1] != self._port:
            sock.close()  # the descriptor already names another socket of this process: ours closed
            self._closed_unseen()
            return
        if address:
            self._last_address = address
        ino = os.fstat(sock.fileno()).st_ino
        if ino in self._conns:  # the descriptor was already reused by the next connection: that one is known
            sock.close()
            self._closed_unseen()
            return
        c = Conn(sock, ino, zfd, address or "an unknown address")
        self._conns[ino] = c
        self._by_fd[zfd] = ino

    def _open(self, c: Conn) -> bool:
        """Whether ZeroMQ still has this connection (its descriptor still names the same socket)."""
        try:
            return os.fstat(c.zfd).st_ino == c.ino
        except OSError:
            return False

    def _untrack(self, c: Conn) -> None:
        self._conns.pop(c.ino, None)
        if self._by_fd.get(c.zfd) == c.ino:
            del self._by_fd[c.zfd]
        try:
            c.sock.shutdown(_socket.SHUT_RDWR)  # ZeroMQ closed its descriptor: end the connection now
        except OSError:
            pass
        c.sock.close()
        if c.uid is not None:
            self._forget.append((time.monotonic() + 10.0, c.uid))

    def _closed(self, c: Conn) -> None:
        """ZeroMQ closed ``c``'s descriptor (its peer ended it, or ZeroMQ dropped it: see the class docstring)."""
        passed = bool(c.authed_at or c.uid)
        dropped = passed and not c.cut and peer_still_there(c.sock)  # looked at before _untrack ends it
        self._untrack(c)
        if not passed:
            self._closed_unseen(c.address, c.cut)
        elif dropped:
            self.stats["closed_connections"] += 1
            self._on_closed(c.address, f"it passed the handshake, then sent a frame over {WIRE_MAX} bytes "
                            "(ZMQ_MAXMSGSIZE: not read, a node never sends one) or broke the ZMTP protocol; "
                            "ZeroMQ closed it while it was still sending")

    def _closed_unseen(self, address: str = "an unknown address", cut: bool = False) -> None:
        """A connection closed without passing the handshake: counted unless its refusal was."""
        if self._failures > 0:
            self._failures -= 1
            return
        self.stats["refused_connections"] += 1
        self._early_closes.append(time.monotonic())
        self._on_refused(address, "cut: too many connections in their handshake" if cut else
                         f"it closed before passing the handshake (e.g. it declared a frame of more than "
                         f"{WIRE_MAX} bytes, which is not read)", False)

    # ------------------------------------------------------------------ the bound
    def held(self) -> Dict[str, int]:
        """Per linked connection (its user id): bytes ZeroMQ read from it and has not handed over."""
        out: Dict[str, int] = {}
        delivered = self.delivered
        for c in list(self._conns.values()):
            counts = counters(c.sock) if c.uid is not None and delivered is not None else None
            if counts is not None and c.uid is not None and delivered is not None:
                out[c.uid] = counts[1] - c.base - delivered.get(c.uid, 0)
        return out

    def _cut(self, c: Conn, why: str) -> None:
        c.cut = True
        try:
            c.sock.shutdown(_socket.SHUT_RDWR)  # ZeroMQ sees the connection end and drops what it held
        except OSError:
            pass
        if c.authed_at or c.uid:
            self.stats["cut_connections"] += 1
            self._on_cut(c.address, why)

    def _check(self, now: float) -> None:
        while self._forget and self._forget[0][0] <= now:
            uid = self._forget.popleft()[1]
            if self.delivered is not None:
                self.delivered.pop(uid, None)
        delivered = self.delivered
        if not self._conns or delivered is None:  # (connections are tracked only with ``delivered``)
            return
        target = _BEFORE_ZAP.get(self.bus_auth, _GREETING)
        pending = []
        for c in list(self._conns.values()):
            if not self._open(c):
                self._closed(c)
                continue
            if c.cut:
                continue
            counts = counters(c.sock)
            if counts is None:
                continue
            sent, got = counts
            if c.uid is not None:
                held = got - c.base - delivered.get(c.uid, 0)
                if held > self.max_peer_bytes:
                    self._cut(c, f"it made this node hold {held} bytes it had not yet read (more than "
                                 f"max_peer_bytes {self.max_peer_bytes}: e.g. a multipart message that never "
                                 "ends); ZeroMQ dropped them")
            elif sent > target:  # past the handshake, but not tied to its user id
                if not c.authed_at:
                    c.authed_at = now
                elif now - c.authed_at > _LINK_WAIT:
                    self._cut(c, "what it sent could not be told from other connections' (it is reconnected "
                                 "if it is a node)")
            elif now - c.since > self.handshake_timeout + 1.0:
                self._cut(c, "handshake too long")
            else:
                pending.append(c)
        if len(pending) > MAX_PENDING:
            for c in sorted(pending, key=lambda c: c.since)[MAX_PENDING:]:
                self._cut(c, "too many connections in their handshake")
