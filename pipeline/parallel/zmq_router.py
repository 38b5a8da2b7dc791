"""ZeroMQ message bus between rlpipe nodes: ``ZmqRouter``.

Transport
    Every node binds one PULL socket (its *address*, ``tcp://127.0.0.1:PORT`` or ``ipc:///path``) and keeps
    one PUSH socket per peer, so each pair of nodes has exactly one path in each direction and an event
    reaches each peer exactly once. A node learns its peers by a handshake: it sends HELLO to the addresses
    it was given (the group's addresses, filtered by the topology, plus ``attach_to``); the receiver
    connects back to the address announced in the HELLO and answers ACK. In a ``mesh`` the ACK also lists
    the receiver's peers, so a late joiner that attached to one node connects to the whole group.

Topologies
    ``mesh``: connect to every node of the group. ``star``: every node connects to the centre (the
    smallest node id of the group) only; the centre talks to everyone, the others only to the centre.
    ``alone``: connect only to ``attach_to``. In all topologies a node accepts nodes that attach to it.

Authentication and safety
    Every message carries an HMAC-SHA256 under the shared key over its header and body (large binary
    payloads travel as separate frames, covered through a SHA-256 digest). A message that fails the check
    or is malformed is dropped and counted (``stats``) before anything in it is decoded. Payloads use the
    safe codec in ``pipeline.parallel.codec`` (no pickle). Each message names the receiver's id and
    incarnation and carries a per-pair sequence number, so duplicates and replays are dropped too. A HELLO
    (the one message sent before the pair has sequence numbers) carries the sender's clock time: it is
    refused (``stats["stale_hello"]``) when stamped more than ``hello_max_skew`` s from the receiver's clock,
    or when it comes from another session than the connected one and is not newer than every HELLO/ACK
    accepted from that node id, so a captured HELLO of an earlier incarnation cannot reset a connection.

Backpressure
    High-water marks bound every queue. A sender whose peer does not keep up blocks in ``emit`` (polling
    in short slices, released by ``stop`` or by the peer being declared dead) for at most
    ``send_timeout`` seconds, then gets ``BackpressureTimeout``. Nothing is dropped silently: a message
    for a dead or unknown peer is counted in ``stats["undeliverable"]`` and logged.

Liveness
    Once ``"__finish__"`` was sent or received, a send no longer waits under backpressure (the message
    is counted as undeliverable and logged), so finishing never hangs on a stalled peer.
    Nodes send heartbeats every ``heartbeat_interval`` s; a peer silent for ``heartbeat_timeout`` s is
    declared dead: ``"__peer_dead__", (node_id,), {}`` is delivered through ``on_message`` (and
    ``"__finish__"`` too when ``stop_on_peer_failure``). A peer that stops cleanly sends BYE
    (``"__peer_left__"``); a new peer produces ``"__peer_joined__"``. While a local listener runs for a
    long time the silence of peers is not held against them.

Threads
    One thread at a time reads the PULL socket (it holds the read token), handles what arrives in arrival
    order and calls ``on_message`` on its own thread, so ``on_message`` is never called concurrently. The
    reader is the receiver thread, except while some thread is inside ``wait(until, timeout)``: then the
    waiting thread reads and delivers itself (a reply reaches it without a thread switch) and the receiver
    thread steps aside until no thread has waited for ``_HANDBACK`` (2 ms; it looks every 20 ms while a
    wait is in progress and is woken when a wait longer than that ends). The hand-over happens only
    between two messages, so order is kept; a waiter that finds the receiver thread blocked in ``recv``
    wakes it (an in-process wake-up message) so that it steps aside at once. Hence ``on_message`` may run on
    the receiver thread or on any thread that calls ``wait`` (``task.wait_for`` does), and it must not
    block for long on either. ``wait`` called from inside ``on_message`` does not read (the reader is busy
    in the listener). After a burst of short waits ends, messages that arrive meanwhile wait at most ~22 ms
    for the receiver thread. Readers block in ``recv`` without a timeout (a timer per receive is costly on
    a VM); wake-ups come from waiters, ``wake()``, ``stop`` and the heartbeat thread (every 50 ms to a
    waiting thread, so that it checks its condition and deadline; at once for a notice such as a dead
    peer). ``stop`` releases every waiter and takes the token for good before closing the socket. ``emit``
    may be called from any thread.
"""
from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import os
import secrets
import socket as _socket
import struct
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set

from ..router import Router
from . import codec
from .keys import resolve_key

log = logging.getLogger("rlpipe.parallel")

__all__ = ["ZmqRouter", "BackpressureTimeout", "PEER_DEAD", "PEER_LEFT", "PEER_JOINED", "FINISH"]

PEER_DEAD = "__peer_dead__"
PEER_LEFT = "__peer_left__"
PEER_JOINED = "__peer_joined__"
FINISH = "__finish__"

TOPOLOGIES = ("mesh", "star", "alone")

# Wire header (after the 32-byte MAC): magic, version, kind, sender id, sender session, dest id,
# dest session, seq, number of extra frames.
_HEADER = struct.Struct("<2sBBiQiQQI")
_PREFIX = struct.Struct("<2sBBiQiQ")  # the header up to the sequence number
_SEQ = struct.Struct("<QI")  # the header's sequence number and number of extra frames
_HEADER_SIZE = _HEADER.size
_MIN_FRAME = 32 + _HEADER_SIZE
_unpack_header = _HEADER.unpack_from
_pack_seq = _SEQ.pack
_MAGIC = b"RP"
_VERSION = 1
_MAC_LEN = 32
K_DATA, K_HELLO, K_ACK, K_HEARTBEAT, K_BYE = 1, 2, 3, 4, 5
_KIND_NAMES = {K_DATA: "data", K_HELLO: "hello", K_ACK: "ack", K_HEARTBEAT: "heartbeat", K_BYE: "bye"}
_LEN = struct.Struct("<Q")
_compare_digest = hmac.compare_digest
_NOBLOCK = 1  # zmq.NOBLOCK, set when the first router starts
_zmq: Any = None  # the zmq module, imported when the first router starts (keeps `import pipeline` light)
_zsend: Any = None  # pyzmq's Socket.send without its pure-Python layer (set when the first router starts)
_INF = float("inf")
_HANDBACK = 0.002  # the receiver thread reads again this long after the last wait() returned
_SHORT = 0.2  # a reader whose deadline is closer than this receives with a timeout (see _read)
_PARK = 0.02  # while a wait() is in progress the receiver thread looks every _PARK s (and is woken at the end
# of a wait longer than that); after a shorter wait it is back within _PARK + _HANDBACK s at most


class BackpressureTimeout(TimeoutError):
    """A peer did not accept a message within ``send_timeout`` seconds (it is alive but not reading)."""


def _digest(buffers: Sequence[Any]) -> bytes:
    """SHA-256 over the out-of-band frames (length-prefixed), bound into the MAC of the first frame."""
    h = hashlib.sha256()
    for b in buffers:
        n = b.nbytes if isinstance(b, memoryview) else len(b)
        h.update(_LEN.pack(n))
        h.update(b)
    return h.digest()


def is_local_address(address: str) -> bool:
    """True for ipc/inproc addresses and tcp addresses on the loopback interface."""
    if address.startswith(("ipc://", "inproc://")):
        return True
    if not address.startswith("tcp://"):
        return False
    host = address[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


class _Peer:
    __slots__ = ("node_id", "session", "address", "labels", "roles", "sock", "lock", "next_seq", "last_seen",
                 "alive", "warned", "data_prefix", "rx_count", "rx_mark")

    def __init__(self, node_id: int, session: int, address: str, labels: Iterable[str], roles: Iterable[str],
                 sock: Any, data_prefix: bytes = b"") -> None:
        self.data_prefix = data_prefix  # the constant start of the header of a data message to this peer
        self.rx_count = 0  # messages received from it (the heartbeat thread turns changes into last_seen)
        self.rx_mark = 0
        self.node_id = node_id
        self.session = session
        self.address = address
        self.labels = set(labels)
        self.roles = set(roles)
        self.sock = sock
        self.lock = threading.Lock()
        self.next_seq = 1
        self.last_seen = time.monotonic()
        self.alive = True
        self.warned = False


class _Probe:
    __slots__ = ("address", "sock", "token", "last_sent")

    def __init__(self, address: str, sock: Any, token: int) -> None:
        self.address = address
        self.sock = sock
        self.token = token
        self.last_sent = 0.0


class ZmqRouter(Router):
    """The ZeroMQ implementation of ``pipeline.router.Router`` (see the module docstring).

    Args:
        node_id: this node's id (unique in the group).
        address: where to listen: ``tcp://HOST:PORT`` (``PORT`` may be ``*`` for a free port) or
            ``ipc:///path``. Defaults to a free port on 127.0.0.1. Use a non-loopback host only on purpose.
        peers: the group's nodes as ``{node_id: address}`` (this node may be included). Which of them this
            node connects to depends on ``topology``.
        topology: ``"mesh"``, ``"star"`` or ``"alone"``.
        attach_to: extra addresses to connect to (nodes of a running group, possibly on other machines).
        labels, roles: this node's labels and roles, announced to peers (``peer_info``); ``roles`` is also
            read by the task runtime when ``task.start`` gets no roles.
        key: shared secret for the HMAC (bytes or str). Default: ``RLPIPE_KEY`` / ``RLPIPE_KEY_FILE``.
        advertise: address announced to peers, if different from the bound one (e.g. behind 0.0.0.0).
        heartbeat_interval, heartbeat_timeout: seconds between heartbeats; silence that makes a peer dead.
        expected_peers: ``start`` waits (at most ``startup_timeout`` s) until this many peers are connected.
            Default: the number of addresses this node connects to.
        send_timeout: longest time ``emit`` blocks on one peer under backpressure.
        hwm: high-water mark (messages) of each send and receive queue.
        linger: seconds ``stop`` waits to flush messages still queued.
        stop_on_peer_failure: also deliver ``"__finish__"`` when a peer is declared dead.
        max_message_size: larger incoming frames make ZeroMQ drop the connection (bytes; -1: no limit).
        hello_max_skew: a HELLO stamped further than this (s) from this node's clock is refused as a replay
            (machines in a group need clocks synchronised to within this, e.g. by NTP).
        slow_listener_warning: log a warning once a listener of a remote event has run this long (s): while it
            runs this node reads no messages, and a listener blocked on a lock held by a thread in ``wait``
            would otherwise hang without a word.
    """

    is_active = True

    def __init__(self, node_id: int = 0, address: Optional[str] = None,
                 peers: Optional[Mapping[int, str]] = None, topology: str = "mesh",
                 attach_to: Sequence[str] = (), labels: Optional[Iterable[str]] = None,
                 roles: Optional[Iterable[str]] = None, key: Optional[Any] = None, advertise: Optional[str] = None,
                 heartbeat_interval: float = 0.5, heartbeat_timeout: float = 5.0,
                 expected_peers: Optional[int] = None, startup_timeout: float = 30.0,
                 send_timeout: float = 60.0, hwm: int = 128, linger: float = 2.0,
                 stop_on_peer_failure: bool = False, max_message_size: int = 1 << 31,
                 hello_max_skew: float = 120.0, slow_listener_warning: float = 10.0) -> None:
        super().__init__(node_id=int(node_id), labels=labels)
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}: use one of {', '.join(TOPOLOGIES)}")
        if heartbeat_timeout <= heartbeat_interval:
            raise ValueError(f"heartbeat_timeout ({heartbeat_timeout}) must be larger than heartbeat_interval "
                             f"({heartbeat_interval})")
        self.roles: Set[str] = {str(r) for r in (roles or ())}
        self.topology = topology
        self.bind_address = address or "tcp://127.0.0.1:*"
        self.group: Dict[int, str] = {int(k): v for k, v in (peers or {}).items()}
        self.attach_to = list(attach_to)
        self.advertise = advertise
        self.heartbeat_interval = float(heartbeat_interval)
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.startup_timeout = float(startup_timeout)
        self.send_timeout = float(send_timeout)
        self.hwm = int(hwm)
        self.linger = float(linger)
        self.stop_on_peer_failure = bool(stop_on_peer_failure)
        self.max_message_size = int(max_message_size)
        self.hello_max_skew = float(hello_max_skew)
        self.slow_listener_warning = float(slow_listener_warning)
        all_addresses = [self.bind_address, *self.group.values(), *self.attach_to]
        self._key = resolve_key(key, multi_machine=not all(is_local_address(a) for a in all_addresses))
        # Keyed once, copied per message; the C object of the OpenSSL HMAC when there is one (faster).
        base = hmac.new(self._key, digestmod="sha256")
        self._hmac = getattr(base, "_hmac", None) or base
        self.session = secrets.randbits(63) | 1
        self.address: Optional[str] = None  # the announced address, known after start()
        self._seeds = self._seed_addresses()
        self.expected_peers = len(self._seeds) if expected_peers is None else int(expected_peers)
        self.stats: Dict[str, int] = dict.fromkeys(
            ("sent", "received", "auth_failed", "malformed", "duplicates", "misrouted", "undeliverable",
             "gaps", "stale_hello", "control_sent", "control_received"), 0)
        self._peers: Dict[int, _Peer] = {}
        self._probes: Dict[int, _Probe] = {}
        self._state_lock = threading.RLock()
        self._rx_seq: Dict[tuple, int] = {}
        self._hello_newest: Dict[int, float] = {}  # per node id: the newest HELLO/ACK time accepted
        self._notices: deque = deque()
        self._stopping = threading.Event()
        self._halt = False  # True once stop() set _stopping (a plain attribute: cheap to test per message)
        self._started = False
        self._stopped = False
        self._on_message: Optional[Callable[[str, tuple, dict], None]] = None
        self._ctx: Any = None
        self._pull: Any = None
        self._threads: List[threading.Thread] = []
        self._grace_from = 0.0
        self._in_handler = False
        self._handler_event = ""  # the remote event whose listener runs now (for the slow-listener warning)
        self._finish_seen = False  # after "__finish__" no send waits for backpressure
        self._peer_change = threading.Condition(self._state_lock)
        # Reading the PULL socket (see "Threads" in the module docstring): one reader at a time, the holder of
        # _rx_token; the receiver thread steps aside while threads are in wait() and reads themselves.
        self._rx_token = threading.Lock()
        self._rx_owner: Optional[int] = None  # thread ident of the token holder
        self._recv_ident: Optional[int] = None  # the receiver thread's ident
        self._rx_lock = threading.Lock()
        self._park = threading.Event()  # the receiver thread sleeps on it while threads in wait() read
        self._rx_cond = threading.Condition(self._rx_lock)  # waiters not reading sleep on it
        self._waiting = 0  # threads inside wait()
        self._sleepers = 0  # of those, the ones asleep on _rx_cond
        self._wait_exit = -1e9  # monotonic time the last wait() returned
        self._waited = False  # a wait() returned less than _HANDBACK s ago (or the receiver has not looked)
        self._deliveries = 0  # number of on_message calls so far (the heartbeat thread spots long ones)
        self._rcvtimeo = -2  # the PULL socket's current RCVTIMEO (ms; -1: none)
        self._wake_msg = secrets.token_bytes(16)  # in-process wake-up of a reader blocked in recv
        self._waker: Any = None
        self._waker_lock = threading.Lock()
        self._tokens = itertools.count(secrets.randbits(32) << 20)

    # ------------------------------------------------------------------ set-up
    def _seed_addresses(self) -> List[str]:
        others = {i: a for i, a in self.group.items() if i != self.node_id}
        if self.topology == "mesh":
            seeds = list(others.values())
        elif self.topology == "star":
            centre = min([self.node_id, *self.group])
            seeds = [others[centre]] if centre != self.node_id else []
        else:
            seeds = []
        for a in self.attach_to:
            if a not in seeds:
                seeds.append(a)
        return seeds

    def _new_push(self, address: str) -> Any:
        import zmq
        s = self._ctx.socket(zmq.PUSH)
        if "[" in address:
            s.setsockopt(zmq.IPV6, 1)
        s.setsockopt(zmq.SNDHWM, self.hwm)
        s.setsockopt(zmq.IMMEDIATE, 1)  # queue only on a live connection: a dead peer pushes back
        s.setsockopt(zmq.LINGER, int(self.linger * 1000))
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        s.connect(address)
        return s

    def start(self, on_message: Callable[[str, tuple, dict], None]) -> None:
        """Bind, start the receiver and heartbeat threads, connect to the seeds and wait (bounded) for
        ``expected_peers`` peers."""
        global _zmq, _NOBLOCK, _zsend
        import zmq
        _zmq = zmq
        _NOBLOCK = zmq.NOBLOCK
        _zsend = getattr(getattr(zmq, "backend", None), "Socket", zmq.Socket).send
        if self._started:
            raise RuntimeError("ZmqRouter.start called twice: a router serves one task run; build a new one")
        self._started = True
        self._on_message = on_message
        self._ctx = zmq.Context()
        pull = self._ctx.socket(zmq.PULL)
        if "[" in self.bind_address:
            pull.setsockopt(zmq.IPV6, 1)
        pull.setsockopt(zmq.RCVHWM, self.hwm)
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.MAXMSGSIZE, self.max_message_size)
        try:
            if self.bind_address.startswith("ipc://"):
                os.makedirs(os.path.dirname(self.bind_address[len("ipc://"):]) or ".", exist_ok=True)
            pull.bind(self.bind_address)
        except zmq.ZMQError as e:
            pull.close(0)
            self._ctx.term()
            raise OSError(f"node {self.node_id} cannot listen on {self.bind_address}: {e} (is another node or "
                          "program using this port? choose other --ports)") from None
        self._pull = pull
        bound = pull.getsockopt_string(zmq.LAST_ENDPOINT)
        pull.bind("inproc://rlpipe-wake")  # this router's own context: the address is private to it
        self._waker = self._ctx.socket(zmq.PUSH)
        self._waker.setsockopt(zmq.SNDHWM, 2)
        self._waker.setsockopt(zmq.LINGER, 0)
        self._waker.connect("inproc://rlpipe-wake")
        self.address = self.advertise or self._announceable(bound)
        for a in self._seeds:
            if is_local_address(a) != is_local_address(self.address) and not self.advertise:
                log.warning("node %d listens on %s but connects to %s: the peer cannot connect back unless "
                            "this node listens on an interface it can reach (--address)", self.node_id,
                            self.address, a)
        with self._state_lock:
            for a in self._seeds:
                self._add_probe(a)
        log.info("node %d listening on %s (topology %s, %d seed address(es))", self.node_id, self.address,
                 self.topology, len(self._seeds))
        for target, name in ((self._recv_loop, "recv"), (self._monitor_loop, "heartbeat")):
            t = threading.Thread(target=target, name=f"rlpipe-{name}-{self.node_id}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.expected_peers:
            try:
                self.wait_for_peers(self.expected_peers, self.startup_timeout)
            except BaseException:  # e.g. Ctrl-C while waiting: do not leave threads and sockets behind
                self.stop()
                raise

    def _announceable(self, bound: str) -> str:
        if bound.startswith("tcp://0.0.0.0:") or bound.startswith("tcp://[::]:"):
            port = bound.rsplit(":", 1)[1]
            try:
                host = _socket.gethostbyname(_socket.gethostname())
            except OSError:
                host = _socket.gethostname()
            return f"tcp://{host}:{port}"
        return bound

    def wait_for_peers(self, n: int, timeout: float) -> bool:
        """Block until at least ``n`` peers are connected, at most ``timeout`` s (also released by stop).
        Returns whether they are; logs the missing seeds otherwise."""
        deadline = time.monotonic() + timeout
        with self._peer_change:
            while self._n_alive() < n and not self._stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._peer_change.wait(min(left, 0.1))
            ok = self._n_alive() >= n
            missing = [p.address for p in self._probes.values()]
        if not ok and not self._stopping.is_set():
            log.warning("node %d: only %d of %d expected peers connected after %.1f s; still waiting in the "
                        "background for %s", self.node_id, self._n_alive(), n, timeout, missing or "new nodes")
        return ok

    def _n_alive(self) -> int:
        return sum(1 for p in self._peers.values() if p.alive)

    @property
    def peers(self) -> List[int]:
        """Ids of the connected (alive) peers."""
        with self._state_lock:
            return sorted(i for i, p in self._peers.items() if p.alive)

    def peer_info(self, node_id: int) -> Dict[str, Any]:
        """What a peer announced: address, labels, roles, and whether it is alive."""
        with self._state_lock:
            p = self._peers[node_id]
            return {"address": p.address, "labels": set(p.labels), "roles": set(p.roles), "alive": p.alive}

    # ------------------------------------------------------------------ sending
    def _frames(self, kind: int, peer_id: int, peer_session: int, seq: int, meta: bytes,
                buffers: Sequence[Any], digest: bytes) -> List[Any]:
        head = _HEADER.pack(_MAGIC, _VERSION, kind, self.node_id, self.session, peer_id, peer_session, seq,
                            len(buffers))
        body = head + meta
        h = self._hmac.copy()
        h.update(body)
        if digest:
            h.update(digest)
        return [h.digest() + body, *buffers] if buffers else [h.digest() + body]

    def _send(self, sock: Any, frames: List[Any], block_until: float, peer: Optional[_Peer],
              flushing: bool = False) -> bool:
        """Send one message; under backpressure wait in short slices until ``block_until``.
        Returns False if the peer died or the router stopped meanwhile."""
        zmq = _zmq
        big = len(frames) > 1
        if not big:  # the common case: one frame that fits
            try:
                sock.send(frames[0], zmq.NOBLOCK)
                return True
            except zmq.Again:
                pass
        while True:
            try:
                if big:
                    sock.send_multipart(frames, zmq.NOBLOCK, copy=False)
                else:
                    sock.send(frames[0], zmq.NOBLOCK)
                return True
            except zmq.Again:
                pass
            if peer is not None and not peer.alive:
                return False
            now = time.monotonic()
            if now >= block_until:
                raise BackpressureTimeout(
                    f"node {self.node_id}: node {peer.node_id if peer else '?'} accepted no message for "
                    f"{self.send_timeout:.1f} s (its queue of {self.hwm} messages is full and it is alive but "
                    "not reading, or it is not connected yet); raise send_timeout or make it consume faster")
            if (self._stopped or self._finish_seen) and not flushing:
                if self._finish_seen and not self._stopped:
                    log.warning("node %d: the run is finishing; not waiting for node %s to accept more",
                                self.node_id, peer.node_id if peer else "?")
                return False  # stop() is running or the run finished: let go of the peer's lock
            sock.poll(int(min(0.05, block_until - now) * 1000) + 1, zmq.POLLOUT)

    def emit(self, event: str, args: tuple = (), kwargs: Optional[dict] = None, to: Optional[int] = None) -> None:
        """Send ``event`` to every connected peer (``to=None``) or to node ``to``, exactly once each.

        Blocks under backpressure (bounded by ``send_timeout``). Raises ``codec.EncodeError`` for values
        the safe codec cannot carry. A message for a dead or unknown peer is counted and logged."""
        if not self._started or self._stopped:
            raise RuntimeError(f"node {self.node_id}: emit({event!r}) on a router that is not running "
                               "(call start() first; after stop() build a new router)")
        if type(event) is not str:
            if not isinstance(event, str):
                raise TypeError(f"event names are str, got {type(event).__name__} {event!r}")
            event = str.__str__(event)
        meta, buffers = codec.encode_event(event, args if type(args) is tuple else tuple(args),
                                           kwargs if type(kwargs) is dict else dict(kwargs or {}))
        if buffers:
            # Snapshot large payloads (e.g. weights an optimizer updates in place right after emit), so that
            # what is sent to every peer is what the MAC covers; frames then go out without another copy.
            buffers = [b if type(b) is bytes else bytes(b) for b in buffers]
            digest = _digest(buffers)
        else:
            digest = b""
        if to is None:
            targets = [p for p in list(self._peers.values()) if p.alive]  # list(): atomic snapshot
        else:
            p = self._peers.get(to if type(to) is int else int(to))  # one dict lookup: atomic
            if p is None or not p.alive:
                self.stats["undeliverable"] += 1
                log.warning("node %d: event %r for node %s not sent: that node is %s", self.node_id, event, to,
                            "dead or gone" if p is not None else
                            f"not connected (connected: {self.peers}; topology {self.topology})")
                return
            targets = (p,)
        for p in targets:
            if not buffers and p.lock.acquire(False):
                # The common case: one frame, nobody else is sending to this peer and its queue has room.
                try:
                    sock = p.sock
                    if p.alive and sock is not None:
                        body = p.data_prefix + _pack_seq(p.next_seq, 0) + meta
                        h = self._hmac.copy()
                        h.update(body)
                        try:
                            _zsend(sock, h.digest() + body, _NOBLOCK)
                        except _zmq.Again:
                            pass  # queue full: the bounded wait of _send_to
                        else:
                            p.next_seq += 1
                            self.stats["sent"] += 1
                            continue
                finally:
                    p.lock.release()
            self._send_to(p, K_DATA, meta, buffers, digest, event)
        if event == FINISH:
            self._finish_seen = True

    def _send_to(self, p: _Peer, kind: int, meta: bytes, buffers: Sequence[Any], digest: bytes,
                 what: str, timeout: Optional[float] = None) -> bool:
        """Send one message to ``p``. ``timeout=None``: block up to ``send_timeout`` and raise
        ``BackpressureTimeout`` after; a number: wait at most that long and return False on timeout."""
        lock = p.lock
        patient = timeout is None
        wait = self.send_timeout if patient else timeout
        deadline = time.monotonic() + wait
        got = lock.acquire(False) or (wait > 0 and lock.acquire(timeout=wait))
        if not got:
            if patient:
                self.stats["undeliverable"] += 1
                raise BackpressureTimeout(f"node {self.node_id}: waited {wait:.1f} s for other threads sending "
                                          f"to node {p.node_id}")
            return False
        try:
            if not p.alive or p.sock is None:
                ok = False
            else:
                frames = self._frames(kind, p.node_id, p.session, p.next_seq, meta, buffers, digest)
                try:
                    ok = self._send(p.sock, frames, deadline, p)
                except BackpressureTimeout:
                    if patient:
                        self.stats["undeliverable"] += 1
                        raise
                    ok = False
                if ok:
                    p.next_seq += 1
        finally:
            p.lock.release()
        if kind == K_DATA:
            if ok:
                self.stats["sent"] += 1
            else:
                self.stats["undeliverable"] += 1
                log.warning("node %d: event %r for node %d not delivered: the peer died or the router stopped",
                            self.node_id, what, p.node_id)
        elif ok:
            self.stats["control_sent"] += 1
        return ok

    @staticmethod
    def _send_nowait(sock: Any, frames: List[Any]) -> bool:
        zmq = _zmq
        try:
            sock.send(frames[0], zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def _announce(self) -> Dict[str, Any]:
        """The body of a HELLO or ACK. ``time`` (this machine's clock) lets the receiver refuse replays."""
        return {"address": self.address, "labels": sorted(self.labels), "roles": sorted(self.roles),
                "topology": self.topology, "time": time.time()}

    def _add_probe(self, address: str) -> None:
        token = next(self._tokens)
        self._probes[token] = _Probe(address, self._new_push(address), token)

    def _hello_frames(self, token: int) -> List[Any]:
        msg = self._announce()
        msg["token"] = token
        return self._frames(K_HELLO, -1, 0, 0, codec.encode(msg)[0], (), b"")

    def _send_hello(self, probe: _Probe) -> None:
        frames = self._hello_frames(probe.token)
        if self._send_nowait(probe.sock, frames):
            self.stats["control_sent"] += 1
        probe.last_sent = time.monotonic()

    # ------------------------------------------------------------------ receiving
    def _set_rcvtimeo(self, ms: int) -> None:
        if ms != self._rcvtimeo:
            self._pull.setsockopt(_zmq.RCVTIMEO, ms)
            self._rcvtimeo = ms

    def _read(self, until: Callable[[], Any], deadline: float = _INF) -> bool:
        """Receive and handle messages until ``until()`` is true (returns True), ``deadline`` passes or the
        router stops. The caller holds the read token.

        A receive blocks without a timeout (arming a timer per receive costs, on a VM especially) until a
        message or a wake-up arrives: a waiter wakes the receiver thread, ``stop`` and ``wake()`` wake any
        reader, the heartbeat thread wakes the reader for a notice (a dead peer) and wakes a waiting thread
        every 50 ms; in the last ``_SHORT`` s before ``deadline`` a receive times out by itself."""
        again = _zmq.Again
        recv = self._pull.recv
        handle = self._handle
        wake_msg = self._wake_msg
        monotonic = time.monotonic
        if self._rcvtimeo != -1:
            self._set_rcvtimeo(-1)
        while not self._halt:
            if until():
                return True
            if self._notices:
                self._deliver_notices()
                continue
            if deadline != _INF:
                left = deadline - monotonic()
                if left < _SHORT:
                    if left <= 0:
                        return False
                    self._set_rcvtimeo(int(left * 1000) + 1)
            try:
                frame = recv(copy=False)
            except again:
                continue
            first = frame.bytes
            if frame.more:
                extra = []
                while frame.more:
                    frame = recv(copy=False)
                    extra.append(frame.buffer)
                handle(first, extra)
            elif first != wake_msg:
                handle(first, ())
        return False

    def _recv_loop(self) -> None:
        me = self._recv_ident = threading.get_ident()
        token = self._rx_token
        stopping = self._stopping
        monotonic = time.monotonic

        def step_aside() -> bool:  # a thread is (or was just) in wait(): it reads
            if self._waiting:
                return True
            if self._waited:
                if monotonic() - self._wait_exit < _HANDBACK:
                    return True
                self._waited = False
            return False

        park = self._park
        try:
            while not stopping.is_set():
                if step_aside():
                    park.wait(_PARK if self._waiting else _HANDBACK)
                    park.clear()
                    continue
                if not token.acquire(timeout=_HANDBACK):
                    continue
                self._rx_owner = me
                try:
                    if not stopping.is_set():
                        self._read(step_aside)
                finally:
                    self._end_reading()
                if self._sleepers:
                    self._notify_sleepers()
        except _zmq.ContextTerminated:
            pass
        except Exception:  # a bug here must not go unnoticed: peers would see this node as dead
            log.exception("node %d: receiver thread crashed", self.node_id)
            raise

    def _end_reading(self) -> None:
        """Give the read token back. After stop() the reader closes the PULL socket itself: stop() closes it
        only if it gets the token, which a listener that does not return may keep (closing twice is fine)."""
        self._rx_owner = None
        if self._halt:
            self._pull.close(0)
        self._rx_token.release()

    def _notify_sleepers(self) -> None:
        with self._rx_cond:
            self._rx_cond.notify_all()

    def _send_wake(self) -> None:
        with self._waker_lock:
            if self._waker is not None:
                try:
                    self._waker.send(self._wake_msg, _NOBLOCK)
                except _zmq.ZMQError:
                    pass  # a wake-up is already queued (or the router is closing)

    def wake(self) -> None:
        """Make threads in ``wait`` check their condition now. Call it from another thread after changing
        what such a condition reads (``task.wait_for`` does; messages delivered by the reader need no wake)."""
        if self._sleepers:
            self._notify_sleepers()
        owner = self._rx_owner
        if owner is not None and owner != self._recv_ident and owner != threading.get_ident():
            self._send_wake()  # a waiter blocked in recv

    def wait(self, until: Callable[[], Any], timeout: float) -> bool:
        """Block until ``until()`` is true, at most ``timeout`` s (``inf`` allowed), or until the router stops.
        Returns ``bool(until())`` at the end. ``until`` must have no side effects (it is called repeatedly).

        Meanwhile the calling thread reads incoming messages itself and calls ``on_message`` for them on
        this thread (the receiver thread steps aside), so a reply reaches the waiting thread without a
        thread switch. ``until`` is checked after each message, on ``wake()``, and every 50 ms or so.
        From inside ``on_message`` (the reading thread) nothing more is read until the listener returns,
        so such a wait only sees what other threads change (and ``wake()``)."""
        if until():
            return True
        me = threading.get_ident()
        if not self._started or self._halt or self._rx_owner == me:
            return self._wait_without_reading(until, timeout)
        monotonic = time.monotonic
        entered = monotonic()
        deadline = entered + timeout if timeout < _INF else _INF
        token = self._rx_token
        with self._rx_lock:
            self._waiting += 1
        try:
            while True:
                if token.acquire(False):
                    self._rx_owner = me
                    try:
                        done = not self._halt and self._read(until, deadline)
                    except _zmq.ContextTerminated:
                        done = False
                    finally:
                        self._end_reading()
                    if self._sleepers:
                        self._notify_sleepers()
                    if done:
                        return True
                else:  # another thread reads: it delivers, and notifies us after each message
                    if self._rx_owner == self._recv_ident:
                        self._send_wake()  # the receiver thread is blocked in recv: make it step aside now
                    cond = self._rx_cond
                    with cond:
                        self._sleepers += 1
                        try:
                            if token.locked() and not until():
                                cond.wait(max(0.0, min(deadline - monotonic(), 0.05)))
                        finally:
                            self._sleepers -= 1
                if until():
                    return True
                if self._halt or monotonic() >= deadline:
                    return bool(until())
        finally:
            with self._rx_lock:
                self._waiting -= 1
                last = not self._waiting
            self._wait_exit = now = monotonic()
            self._waited = True
            if last and now - entered > _PARK:
                self._park.set()  # a long wait: the receiver thread may be asleep for _PARK s; read again now

    def _wait_without_reading(self, until: Callable[[], Any], timeout: float) -> bool:
        """``wait`` for a thread that cannot read: inside ``on_message`` (the reader is busy in it), or with
        the router not running. Sleeps in slices, woken by the reader's deliveries and by ``wake()``."""
        monotonic = time.monotonic
        deadline = monotonic() + timeout if timeout < _INF else _INF
        cond = self._rx_cond
        while not until() and not self._stopping.is_set():
            left = deadline - monotonic()
            if left <= 0:
                break
            with cond:
                self._sleepers += 1
                try:
                    cond.wait(min(left, 0.05))
                finally:
                    self._sleepers -= 1
        return bool(until())

    def _drop(self, counter: str, why: str) -> None:
        self.stats[counter] += 1
        n = self.stats[counter]
        if n <= 5 or n % 1000 == 0:
            log.warning("node %d: dropped a message (%s): %s [%d so far]", self.node_id, counter, why, n)

    def _handle(self, first: bytes, extra: Sequence[Any]) -> None:
        """Check and act on one message: ``first`` frame (MAC + header + body) and the ``extra`` frames."""
        if len(first) < _MIN_FRAME:
            self._drop("malformed", f"first frame of {len(first)} bytes is shorter than MAC + header")
            return
        body = first[_MAC_LEN:]
        h = self._hmac.copy()
        h.update(body)
        if extra:
            h.update(_digest(extra))
        if not _compare_digest(h.digest(), first[:_MAC_LEN]):
            self._drop("auth_failed", "HMAC check failed (wrong key, forged or corrupted)")
            return
        # Authenticated: only now is anything in the message parsed.
        magic, version, kind, sender, session, dest, dest_session, seq, nbufs = _unpack_header(body)
        if magic != _MAGIC or version != _VERSION or kind not in _KIND_NAMES or nbufs != len(extra):
            self._drop("malformed", f"bad header (magic {magic!r}, version {version}, kind {kind})")
            return
        if kind != K_HELLO:
            if dest != self.node_id or dest_session != self.session:
                self._drop("misrouted", f"{_KIND_NAMES[kind]} from node {sender} for node {dest} (session "
                           f"{dest_session:x}), this is node {self.node_id} (session {self.session:x})")
                return
            rx_key = (sender, session)
            last = self._rx_seq.get(rx_key, 0)
            if seq != last + 1:
                if seq <= last:
                    self._drop("duplicates",
                               f"{_KIND_NAMES[kind]} #{seq} from node {sender} already seen (#{last})")
                    return
                if last:
                    self.stats["gaps"] += 1
                    log.warning("node %d: %d message(s) from node %d missing before #%d", self.node_id,
                                seq - last - 1, sender, seq)
            self._rx_seq[rx_key] = seq
        if kind == K_DATA:
            try:
                event, args, kwargs = codec.decode_event(body, extra, _HEADER_SIZE)
            except codec.DecodeError as e:
                self._drop("malformed", f"data from node {sender} is not (event, args, kwargs): {e}")
                return
            peer = self._peers.get(sender)
            if peer is not None and peer.session == session:
                peer.rx_count += 1
                if not peer.alive:
                    self._revive(peer)
            self.stats["received"] += 1
            if event == FINISH:
                self._finish_seen = True
            self._deliver(event, args, kwargs)
            return
        try:
            value = codec.decode(body[_HEADER_SIZE:], extra)
        except codec.DecodeError as e:
            self._drop("malformed", f"{_KIND_NAMES[kind]} from node {sender}: {e}")
            return
        peer = self._peers.get(sender)
        if peer is not None and peer.session == session:
            peer.rx_count += 1
            if not peer.alive and kind == K_HEARTBEAT:
                self._revive(peer)
        self.stats["control_received"] += 1
        if kind == K_HEARTBEAT:
            return
        if kind == K_BYE:
            if peer is not None and peer.session == session and peer.alive:
                log.info("node %d: node %d left", self.node_id, sender)
                self._lose(peer, PEER_LEFT)
                self._deliver_notices()
            return
        if not isinstance(value, dict) or not isinstance(value.get("address"), str) \
                or not isinstance(value.get("token"), int):
            self._drop("malformed", f"{_KIND_NAMES[kind]} from node {sender} lacks address/token")
            return
        try:
            if kind == K_HELLO:
                self._on_hello(sender, session, value)
            else:
                self._on_ack(sender, session, value)
        except Exception as e:  # e.g. an announced address ZeroMQ cannot connect to
            self._drop("malformed", f"{_KIND_NAMES[kind]} from node {sender}: {type(e).__name__}: {e}")
        self._deliver_notices()

    def _deliver(self, event: str, args: tuple, kwargs: dict) -> None:
        self._deliveries += 1
        self._handler_event = event
        self._in_handler = True
        try:
            self._on_message(event, args, kwargs)  # type: ignore[misc]
        except Exception:
            log.exception("node %d: listener of remote event %r raised", self.node_id, event)
        finally:
            self._in_handler = False
        if self._sleepers:
            self._notify_sleepers()

    def _deliver_notices(self) -> None:
        while self._notices:
            event, args = self._notices.popleft()
            self._deliver(event, args, {})

    # ------------------------------------------------------------------ membership
    def _register(self, node_id: int, session: int, info: Dict[str, Any], sock: Any = None) -> _Peer:
        """Create or refresh the peer entry for (node_id, session); caller holds the state lock."""
        old = self._peers.get(node_id)
        if old is not None and old.session == session and old.alive:
            if sock is not None:
                sock.close(0)
            return old
        if old is not None:
            if old.alive:
                log.warning("node %d: node %d restarted (new session); replacing its connection", self.node_id,
                            node_id)
            self._close_peer(old)
        if sock is None:
            sock = self._new_push(info["address"])
        labels = [x for x in info.get("labels", ()) if isinstance(x, str)]
        roles = [x for x in info.get("roles", ()) if isinstance(x, str)]
        peer = _Peer(node_id, session, info["address"], labels, roles, sock,
                     _PREFIX.pack(_MAGIC, _VERSION, K_DATA, self.node_id, self.session, node_id, session))
        self._peers[node_id] = peer
        log.info("node %d: connected to node %d at %s (roles %s, labels %s)", self.node_id, node_id,
                 info["address"], sorted(peer.roles) or "-", sorted(peer.labels) or "-")
        self._notices.append((PEER_JOINED, (node_id,)))
        self._peer_change.notify_all()
        return peer

    def _on_hello(self, sender: int, session: int, info: Dict[str, Any]) -> None:
        if sender == self.node_id:
            if session != self.session:
                log.error("node %d: another node at %s uses the same node id %d; ignoring it (give every node "
                          "a unique --node-ids)", self.node_id, info["address"], sender)
            return
        with self._state_lock:
            if self._stopping.is_set():
                return
            if not self._hello_is_fresh(sender, session, info):
                return
            peer = self._register(sender, session, info)
        ack = self._announce()
        ack["token"] = info["token"]
        if self.topology == "mesh" and info.get("topology") == "mesh":
            with self._state_lock:
                ack["peers"] = [[i, p.address] for i, p in self._peers.items() if p.alive and i != sender]
        self._send_to(peer, K_ACK, codec.encode(ack)[0], (), b"", "ack", timeout=0.5)

    def _hello_is_fresh(self, sender: int, session: int, info: Dict[str, Any]) -> bool:
        """Refuse a replayed HELLO (caller holds the state lock). A HELLO has no sequence number; a captured
        one replayed later could make this node drop its connection to the live incarnation of ``sender``.
        So a HELLO must be stamped within ``hello_max_skew`` s of our clock, and one from another session than
        the connected one must be newer than every HELLO or ACK accepted from that node id so far."""
        t = info.get("time")
        if type(t) is not float:
            self._drop("stale_hello", f"HELLO from node {sender} carries no timestamp (an older rlpipe version?)")
            return False
        age = time.time() - t
        if abs(age) > self.hello_max_skew:
            self._drop("stale_hello", f"HELLO from node {sender} is stamped {age:+.1f} s from now (more than "
                       f"hello_max_skew={self.hello_max_skew:.0f} s: a replay, or the machines' clocks differ; "
                       "sync them with NTP or raise hello_max_skew)")
            return False
        known = self._peers.get(sender)
        newest = self._hello_newest.get(sender, -_INF)
        if (known is None or known.session != session) and t <= newest:
            self._drop("stale_hello", f"HELLO from node {sender} (session {session:x}) is older than one already "
                       f"accepted from that node id ({newest - t:.3f} s): a replay of an earlier incarnation")
            return False
        if t > newest:
            self._hello_newest[sender] = t
        return True

    def _on_ack(self, sender: int, session: int, info: Dict[str, Any]) -> None:
        with self._state_lock:
            if self._stopping.is_set():
                return
            probe = self._probes.pop(info["token"], None)
            if probe is None:
                return  # a repeated ACK for a probe already settled
            t = info.get("time")
            if type(t) is float and t > self._hello_newest.get(sender, -_INF):
                self._hello_newest[sender] = t  # an older HELLO of this node id is a replay from now on
            peer = self._peers.get(sender)
            if peer is not None and peer.session == session and peer.alive:
                probe.sock.close(0)  # we already have a connection to this node (it contacted us first)
            else:
                self._register(sender, session, info, sock=probe.sock)
            known = {p.address for p in self._probes.values()}
            for item in info.get("peers", ()):
                if (isinstance(item, list) and len(item) == 2 and isinstance(item[0], int)
                        and isinstance(item[1], str) and item[0] != self.node_id):
                    other = self._peers.get(item[0])
                    if (other is None or not other.alive) and item[1] not in known:
                        self._add_probe(item[1])
                        known.add(item[1])

    def _close_peer(self, p: _Peer) -> None:
        p.alive = False
        if p.lock.acquire(timeout=1.0):  # a sender polls p.alive every 50 ms and lets go
            try:
                if p.sock is not None:
                    p.sock.close(0)
                    p.sock = None
            finally:
                p.lock.release()
        else:
            log.warning("node %d: could not close the connection to node %d (a sender holds it)", self.node_id,
                        p.node_id)

    def _lose(self, p: _Peer, event: str) -> None:
        with self._state_lock:
            if not p.alive:
                return
            self._close_peer(p)
            self._peer_change.notify_all()
        self._notices.append((event, (p.node_id,)))
        if event == PEER_DEAD and self.stop_on_peer_failure:
            self._notices.append((FINISH, ()))

    def _revive(self, p: _Peer) -> None:
        log.warning("node %d: node %d, declared dead, is sending again; reconnecting", self.node_id, p.node_id)
        with self._state_lock:
            self._peers.pop(p.node_id, None)
            self._register(p.node_id, p.session, {"address": p.address, "labels": p.labels, "roles": p.roles})

    # ------------------------------------------------------------------ heartbeats
    def _monitor_loop(self) -> None:
        hb = codec.encode(None)[0]
        stopping = self._stopping
        probe_every = min(0.2, self.heartbeat_interval)
        next_beat = 0.0
        busy_no, long_busy, busy_since, warned = -1, False, 0.0, False
        while not stopping.is_set():
            now = time.monotonic()
            # The readers only count messages per peer; the time a peer was last heard of is taken here.
            for p in list(self._peers.values()):
                n = p.rx_count
                if n != p.rx_mark:
                    p.rx_mark = n
                    p.last_seen = now
            # A listener seen running on two ticks in a row is a long one: while it runs and after it ends,
            # the peers' silence is not held against them (we were not reading).
            if self._in_handler:
                n = self._deliveries
                if n == busy_no:
                    long_busy = True
                    if not warned and now - busy_since > self.slow_listener_warning:
                        warned = True
                        log.warning(
                            "node %d: a listener of remote event %r has run for %.0f s; meanwhile this node reads "
                            "no messages. Listeners must not block (hand long work to another thread); a thread "
                            "in task.wait_for/router.wait also runs listeners, so it must not hold a lock that "
                            "one of them takes", self.node_id, self._handler_event, now - busy_since)
                else:
                    if long_busy:
                        self._grace_from = now
                    busy_no, long_busy, busy_since, warned = n, False, now, False
            else:
                if long_busy:
                    self._grace_from = now
                busy_no, long_busy = -1, False
            # The reader blocks in recv without a timeout: wake it for notices (e.g. a dead peer) to deliver,
            # and wake a thread in wait() every tick, so that it checks its condition and deadline.
            owner = self._rx_owner
            if owner is not None and (self._notices or owner != self._recv_ident):
                self._send_wake()
            with self._state_lock:  # probe sockets are used only under this lock
                for probe in list(self._probes.values()):
                    if now - probe.last_sent >= probe_every:
                        self._send_hello(probe)
            if now >= next_beat:
                next_beat = now + self.heartbeat_interval
                with self._state_lock:
                    peers = [p for p in self._peers.values() if p.alive]
                for p in peers:
                    self._send_to(p, K_HEARTBEAT, hb, (), b"", "heartbeat", timeout=0.0)
                for p in peers:
                    if self._in_handler:
                        break  # our reader is busy in a listener: peers' silence means nothing now
                    silent = now - max(p.last_seen, self._grace_from)
                    if silent > self.heartbeat_timeout and p.alive:
                        log.error("node %d: node %d is dead (no message for %.1f s, heartbeat_timeout %.1f s)",
                                  self.node_id, p.node_id, silent, self.heartbeat_timeout)
                        self._lose(p, PEER_DEAD)
                if self._notices and self._rx_owner is not None:
                    self._send_wake()
            stopping.wait(0.05)

    # ------------------------------------------------------------------ shutdown
    def stop(self) -> None:
        """Say goodbye to the peers, flush queued messages (at most ``linger`` s) and close. Idempotent."""
        if not self._started or self._stopped:
            self._stopped = True
            return
        self._stopped = True  # senders blocked under backpressure give up within 50 ms
        bye = codec.encode(None)[0]
        with self._state_lock:
            peers = [p for p in self._peers.values() if p.alive]
        deadline = time.monotonic() + self.linger
        for p in peers:
            try:
                if p.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    try:
                        if p.sock is not None:
                            frames = self._frames(K_BYE, p.node_id, p.session, p.next_seq, bye, (), b"")
                            self._send(p.sock, frames, max(deadline, time.monotonic() + 0.05), p,
                                       flushing=True)
                            p.next_seq += 1
                    finally:
                        p.lock.release()
            except BackpressureTimeout:
                pass
        self._halt = True
        self._stopping.set()
        self._park.set()
        self._send_wake()  # a reader blocked in recv returns now
        self._notify_sleepers()
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout=2.0)
        # Whoever reads checks the stop flag after taking the token: once we hold it, nobody touches the PULL
        # socket again (the token is never given back). A listener that calls stop() holds it already.
        reading = self._rx_owner == me.ident or self._rx_token.acquire(timeout=2.0)
        with self._state_lock:
            for probe in self._probes.values():
                probe.sock.close(0)
            self._probes.clear()
            peers = list(self._peers.values())
        for p in peers:
            p.alive = False
            got = p.lock.acquire(timeout=1.0)
            try:
                if p.sock is not None:
                    p.sock.close()  # with LINGER: queued messages get up to `linger` s to go out
                    p.sock = None
            finally:
                if got:
                    p.lock.release()
        with self._waker_lock:
            self._waker.close(0)
            self._waker = None
        if reading:
            self._pull.close(0)
        else:
            log.warning("node %d: a listener of a remote event has not returned within 2 s; stopping without "
                        "waiting for it (its thread closes the socket when it returns)", self.node_id)
        # term() waits for the lingering messages; bound it in case a socket escaped closing.
        closer = threading.Thread(target=self._ctx.term, name=f"rlpipe-term-{self.node_id}", daemon=True)
        closer.start()
        closer.join(self.linger + 2.0)
        if closer.is_alive():
            log.warning("node %d: ZeroMQ context did not close within %.1f s; leaving it", self.node_id,
                        self.linger + 2.0)
        self._peer_change_notify()
        log.info("node %d stopped (%s)", self.node_id,
                 ", ".join(f"{k} {v}" for k, v in self.stats.items() if v))

    def _peer_change_notify(self) -> None:
        with self._peer_change:
            self._peer_change.notify_all()

    def __repr__(self) -> str:
        return (f"ZmqRouter(node_id={self.node_id}, address={self.address or self.bind_address!r}, "
                f"topology={self.topology!r}, peers={self.peers})")
