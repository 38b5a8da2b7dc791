"""ZeroMQ message bus between rlpipe nodes: ``ZmqRouter``.

Transport
    Every node binds one PULL socket (its *address*, ``tcp://127.0.0.1:PORT`` or ``ipc:///path``) and keeps
    one PUSH socket per peer, so each pair of nodes has exactly one path in each direction and an event
    reaches each peer exactly once. A node learns its peers by a handshake (``handshake``).

Topologies
    ``mesh``: connect to every node of the group. ``star``: every node connects to the centre (the
    smallest node id of the group) only; the centre talks to everyone, the others only to the centre.
    ``alone``: connect only to ``attach_to``. In all topologies a node accepts nodes that attach to it.

The router is assembled from one module per concern; each module's docstring says what it guarantees:

* ``wire``: framing and HMAC authentication (nothing is decoded before the MAC check; payloads use the
  pickle-free ``codec``), sequence numbers against duplicates and replays;
* ``handshake``: HELLO/ACK, how nodes find each other, and refusing replayed HELLOs;
* ``liveness``: peer entries, heartbeats, dead, left, joined and revived peers;
* ``reader``: which thread reads the socket (the hand-over to threads in ``wait``) and delivery to
  ``on_message``;
* ``sending``: ``emit``, backpressure (``BackpressureTimeout``) and counting what cannot be delivered;
* this module: configuration, start and stop.
"""
from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
import socket as _socket
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set

import zmq

from ..runtime.node import node_is_quiet
from ..runtime.router import Router
from . import codec
from .ending import Ending
from .handshake import Handshake, _Probe
from .keycheck import KeyCheck, KeyMismatchError
from .keys import resolve_key
from .liveness import Liveness, _Peer
from .reader import Reader
from .sending import BackpressureTimeout, Sending
from . import transport_auth
from .transport_auth import TransportGuard, resolve_bus_auth
from .wire import (FINISH, K_BYE, PEER_DEAD, PEER_JOINED, PEER_LEFT, WIRE_MAX, Framing, _Assemblies, is_local_address,
                   keyed_hmac, require_payload_mac)

log = logging.getLogger("rlpipe.parallel")

__all__ = ["ZmqRouter", "BackpressureTimeout", "KeyMismatchError", "PEER_DEAD", "PEER_LEFT", "PEER_JOINED", "FINISH",
           "is_local_address"]

TOPOLOGIES = ("mesh", "star", "alone")


def announced_address(advertise: str, bound: str) -> str:
    """The address announced to peers for ``--advertise``: a full ``tcp://HOST:PORT`` (or ``ipc://``) as
    given; a bare ``HOST`` (or ``tcp://HOST``) gets the port this node is bound to (``bound``). Anything else
    is a ValueError that says what to give."""
    text = advertise.strip()
    if text.startswith(("ipc://", "inproc://")):
        return text
    if "://" in text and not text.startswith("tcp://"):
        raise ValueError(f"--advertise {advertise!r}: give a host (e.g. 10.0.0.1 or node-a.example.org) or "
                         "tcp://HOST:PORT")
    host = text[len("tcp://"):] if text.startswith("tcp://") else text
    port = ""
    if host.startswith("["):  # [v6] or [v6]:port
        end = host.find("]")
        if end < 0:
            raise ValueError(f"--advertise {advertise!r}: unclosed '[' in an IPv6 address")
        host, port = host[:end + 1], host[end + 1:].lstrip(":")
    elif host.count(":") == 1:
        host, port = host.split(":")
    elif host.count(":") > 1:  # a bare IPv6 address
        host = f"[{host}]"
    if not host or host in ("[]", "*") or any(c in host for c in "/ ") or (port and not port.isdigit()):
        raise ValueError(f"--advertise {advertise!r}: give a host (e.g. 10.0.0.1 or node-a.example.org) or "
                         "tcp://HOST:PORT")
    if not port:
        if not bound.startswith("tcp://"):
            raise ValueError(f"--advertise {advertise!r}: a host can only be announced for a tcp address; this "
                             f"node listens on {bound}")
        port = bound.rsplit(":", 1)[1]
    return f"tcp://{host}:{port}"


class ZmqRouter(Reader, Sending, Handshake, Liveness, Ending, KeyCheck, Framing, Router):
    """The ZeroMQ implementation of ``pipeline.runtime.router.Router`` (see the module docstring).

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
        bus_auth: how a connection proves it knows the key before any message is read (``transport_auth``):
            ``"plain"`` (a derived credential, free per message, sent in clear) or ``"curve"`` (CurveZMQ:
            encrypted, nothing sniffable, slower for large messages). Default: ``RLPIPE_BUS_AUTH``, else
            ``"curve"`` for a node with an address that is not loopback or ipc (its traffic may cross a
            network) and ``"plain"`` for one whose addresses all are; the same on every node.
        advertise: address announced to peers, if different from the bound one (e.g. behind 0.0.0.0 or NAT):
            a host (``10.0.0.2``: announced with the bound port) or ``tcp://HOST:PORT``.
        heartbeat_interval, heartbeat_timeout: seconds between heartbeats; silence that makes a peer dead.
        expected_peers: ``start`` waits (at most ``startup_timeout`` s) until this many peers are connected.
            Default: the number of addresses this node connects to.
        send_timeout: longest time ``emit`` blocks on one peer under backpressure.
        hwm: high-water mark (messages) of each send and receive queue.
        linger: seconds ``stop`` waits to flush messages still queued.
        stop_on_peer_failure: also finish the run (every node's) when a peer is declared dead.
        peerless_timeout: a node whose every peer is gone (dead or left) for this long finishes its run; also
            a node that expects peers and has none this long after ``startup_timeout`` (``ending``).
        max_frame_size, max_message_size: caps (bytes) on one payload (a tensor, an array, bytes, or the
            encoded event itself) and on a whole event, which bound what a keyed sender makes this node keep
            of one chunked message (``wire``): the chunks of a larger one are not kept (its head is dropped
            and counted, ``stats["oversize"]``).
            ``emit`` refuses to send more (``ValueError``). Defaults: 256 MiB per payload, 512 MiB per event;
            set the same values on every node. Whatever these are, no ZeroMQ frame or message over
            ``wire.WIRE_MAX`` (1 MiB + 64 KiB) is read: ZeroMQ closes the connection at such a frame's header.
        max_peer_bytes: the most one connection can make ZeroMQ hold (read from the connection, not yet handed
            over: queued messages and an unfinished one), 64 MiB by default; a connection past it is shut down
            and counted (``stats["cut_connections"]``; ``transport_auth``). Each receive queue holds at most
            ``max_peer_bytes // WIRE_MAX - 3`` messages (and at most ``hwm``), so genuine peers stay below it.
            A connection past the handshake that ZeroMQ closes for a frame over ``WIRE_MAX`` (or another ZMTP
            protocol error) while its peer still sends is counted too (``stats["closed_connections"]``).
        max_assembly_bytes: the most that all unfinished chunked messages (``wire``) hold together, whoever
            sent them: a message whose next chunk would pass it is dropped and counted
            (``stats["assembly_full"]``). Default (None): twice ``max_message_size`` (1 GiB); at least
            ``max_message_size``. Raise it if several peers send this node messages of hundreds of MiB at once.
            Only peers that joined this node can start one (heads of other sender incarnations are dropped,
            ``stats["unjoined"]``), one at a time each, and it holds the bytes received, not those declared.
        assembly_timeout: an unfinished chunked message that gets no chunk for this long (s) while this node
            reads is dropped and counted (``stats["stalled"]``); 30 s by default.
        handshake_timeout: seconds a connection has to pass the handshake (``ZMQ_HANDSHAKE_IVL``); before that
            it can make this node hold at most one frame of ``WIRE_MAX`` bytes.
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
                 stop_on_peer_failure: bool = False, max_frame_size: int = 256 << 20,
                 max_message_size: int = 512 << 20,
                 hello_max_skew: float = 120.0, slow_listener_warning: float = 10.0,
                 peerless_timeout: float = 15.0, bus_auth: Optional[str] = None,
                 handshake_timeout: float = 5.0, max_peer_bytes: int = 64 << 20,
                 max_assembly_bytes: Optional[int] = None, assembly_timeout: float = 30.0) -> None:
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
        if advertise is not None:
            announced_address(advertise, "tcp://0.0.0.0:1")  # refuse a malformed one now, with its reason
        self.advertise = advertise
        self.heartbeat_interval = float(heartbeat_interval)
        self.heartbeat_timeout = float(heartbeat_timeout)
        self.startup_timeout = float(startup_timeout)
        self.send_timeout = float(send_timeout)
        self.hwm = int(hwm)
        self.linger = float(linger)
        self.stop_on_peer_failure = bool(stop_on_peer_failure)
        self.max_frame_size = int(max_frame_size)
        self.max_message_size = int(max_message_size)
        if not 0 < self.max_frame_size <= self.max_message_size:
            raise ValueError(f"max_frame_size ({max_frame_size}) must be positive and at most max_message_size "
                             f"({max_message_size})")
        if not handshake_timeout > 0:
            raise ValueError(f"handshake_timeout must be a number of seconds > 0, got {handshake_timeout!r}")
        self.handshake_timeout = float(handshake_timeout)
        if not max_peer_bytes >= 8 * WIRE_MAX:
            raise ValueError(f"max_peer_bytes must be at least {8 * WIRE_MAX} (8 messages of WIRE_MAX bytes), "
                             f"got {max_peer_bytes!r}")
        self.max_peer_bytes = int(max_peer_bytes)
        self.max_assembly_bytes = (2 * self.max_message_size if max_assembly_bytes is None
                                   else int(max_assembly_bytes))
        if not self.max_assembly_bytes >= self.max_message_size:
            raise ValueError(f"max_assembly_bytes ({max_assembly_bytes}) must be at least max_message_size "
                             f"({max_message_size}), or no message of that size could be received")
        if not assembly_timeout > 0:
            raise ValueError(f"assembly_timeout must be a number of seconds > 0, got {assembly_timeout!r}")
        self.assembly_timeout = float(assembly_timeout)
        self.hello_max_skew = float(hello_max_skew)
        self.slow_listener_warning = float(slow_listener_warning)
        if not peerless_timeout >= 0:
            raise ValueError(f"peerless_timeout must be a number of seconds >= 0, got {peerless_timeout!r}")
        self.peerless_timeout = float(peerless_timeout)
        self._started_at = time.monotonic()
        all_addresses = [self.bind_address, *self.group.values(), *self.attach_to]
        multi_machine = not all(is_local_address(a) for a in all_addresses)
        self._key = resolve_key(key, multi_machine=multi_machine)
        self.bus_auth = resolve_bus_auth(bus_auth, multi_machine=multi_machine)
        self._guard: Optional[TransportGuard] = None
        self._delivered: Optional[Dict[str, int]] = None  # the guard's per-connection count of bytes read
        self._wire_size: Callable[[int], int] = len
        # HMAC-SHA256 of one part / of two parts under the shared key (padded-key states prepared once).
        self._mac, self._mac2 = keyed_hmac(self._key)
        # One-time AES-GMAC keys of the extra frames come from HMAC(payload key, nonce); the payload key is
        # derived from the shared key, so that the first-frame MAC key is never used for anything else.
        require_payload_mac()
        self._otk_mac = keyed_hmac(hmac.new(self._key, b"rlpipe payload-mac key v2", "sha256").digest())[0]
        self.session = secrets.randbits(63) | 1
        self.address: Optional[str] = None  # the announced address, known after start()
        self._seeds = self._seed_addresses()
        self.expected_peers = len(self._seeds) if expected_peers is None else int(expected_peers)
        self.stats: Dict[str, int] = dict.fromkeys(
            ("sent", "received", "auth_failed", "malformed", "duplicates", "misrouted", "undeliverable",
             "gaps", "stale_hello", "oversize", "control_sent", "control_received", "finish_to_lost",
             "refused_connections", "cut_connections", "closed_connections", "unfinished", "unjoined",
             "assembly_full", "stalled"), 0)
        self._peers: Dict[int, _Peer] = {}
        self._probes: Dict[int, _Probe] = {}
        self._state_lock = threading.RLock()
        self._keycheck_lock = threading.Lock()  # one check of the keys at a time (``keycheck``)
        self._rx_seq: Dict[tuple, Any] = {}  # (sender, session) -> its ReplayWindow
        self._rx_known: Dict[bytes, tuple] = {}  # header prefix of a data message -> (window, sender, session)
        # Per (sender, session): its unfinished chunked message; all of them hold at most max_assembly_bytes.
        self._assembling = _Assemblies(self.max_assembly_bytes)
        self._hello_newest: Dict[int, float] = {}  # per node id: the newest HELLO/ACK time accepted
        self._hello_last: Dict[tuple, float] = {}  # per (node id, session): the newest HELLO time accepted
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
    def _new_push(self, address: str) -> Any:
        s = self._ctx.socket(zmq.PUSH)
        transport_auth.client(s, self._key, self.bus_auth)
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
        if self._started:
            raise RuntimeError("ZmqRouter.start called twice: a router serves one task run; build a new one")
        self._started = True
        self._started_at = time.monotonic()
        self._on_message = on_message
        self._ctx = zmq.Context()
        self._guard = TransportGuard(self._ctx, self._key, self.bus_auth, self._refused, stats=self.stats,
                                     max_peer_bytes=self.max_peer_bytes, handshake_timeout=self.handshake_timeout,
                                     on_cut=self._cut_connection, on_closed=self._closed_connection)
        self._delivered = self._guard.delivered
        self._wire_size = self._guard.wire_size()
        pull = self._ctx.socket(zmq.PULL)
        self._guard.server(pull)
        if "[" in self.bind_address:
            pull.setsockopt(zmq.IPV6, 1)
        # Per connection at most this many messages (each at most WIRE_MAX) wait to be read, so that a genuine
        # peer stays below max_peer_bytes of what ZeroMQ holds for it (``transport_auth``).
        pull.setsockopt(zmq.RCVHWM, min(self.hwm, self.max_peer_bytes // (WIRE_MAX + 64) - 3))
        pull.setsockopt(zmq.LINGER, 0)
        pull.setsockopt(zmq.MAXMSGSIZE, WIRE_MAX)  # a longer frame closes its connection at its header
        pull.setsockopt(zmq.HANDSHAKE_IVL, int(self.handshake_timeout * 1000))
        try:
            if self.bind_address.startswith("ipc://"):
                os.makedirs(os.path.dirname(self.bind_address[len("ipc://"):]) or ".", exist_ok=True)
            pull.bind(self.bind_address)
        except zmq.ZMQError as e:
            pull.close(0)
            self._guard.close()
            self._ctx.term()
            raise OSError(f"node {self.node_id} cannot listen on {self.bind_address}: {e} (is another node or "
                          "program using this port? choose other --ports)") from None
        self._pull = pull
        bound = pull.getsockopt_string(zmq.LAST_ENDPOINT)
        self._guard.listening(bound)
        pull.bind("inproc://rlpipe-wake")  # this router's own context: the address is private to it
        self._waker = self._ctx.socket(zmq.PUSH)
        self._waker.setsockopt(zmq.SNDHWM, 2)
        self._waker.setsockopt(zmq.LINGER, 0)
        self._waker.connect("inproc://rlpipe-wake")
        self.address = announced_address(self.advertise, bound) if self.advertise else self._announceable(bound)
        for a in self._seeds:
            if is_local_address(a) != is_local_address(self.address) and not self.advertise:
                log.warning("node %d listens on %s but connects to %s: the peer cannot connect back unless "
                            "this node listens on an interface it can reach (--address)", self.node_id,
                            self.address, a)
        with self._state_lock:
            for a in self._seeds:
                self._add_probe(a)
        log.log(logging.DEBUG if node_is_quiet() else logging.INFO,
                "node %d listening on %s (topology %s, %d seed address(es))", self.node_id, self.address,
                self.topology, len(self._seeds))
        for target, name in ((self._recv_loop, "recv"), (self._monitor_loop, "heartbeat"), (self._guard_loop, "auth")):
            t = threading.Thread(target=target, name=f"rlpipe-{name}-{self.node_id}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.expected_peers:
            try:
                ok = self.wait_for_peers(self.expected_peers, self.startup_timeout)
            except BaseException:  # e.g. Ctrl-C while waiting: do not leave threads and sockets behind
                self.stop()
                raise
            if not ok and self._check_keys(time.monotonic()):
                self.stop()  # raises KeyMismatchError

    def _guard_loop(self) -> None:
        self._guard.run(self._stopping)

    def _announceable(self, bound: str) -> str:
        if bound.startswith("tcp://0.0.0.0:") or bound.startswith("tcp://[::]:"):
            port = bound.rsplit(":", 1)[1]
            try:
                host = _socket.gethostbyname(_socket.gethostname())
            except OSError:
                host = _socket.gethostname()
            return f"tcp://{host}:{port}"
        return bound

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
            was_alive, p.alive = p.alive, False
            got = p.lock.acquire(timeout=1.0)
            try:
                if p.sock is not None:
                    # With LINGER, queued messages get up to `linger` s to go out; not to a peer declared dead.
                    p.sock.close(None if was_alive else 0)
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
        if self.bind_address.startswith("ipc://"):  # ZeroMQ leaves the socket file behind
            try:
                os.unlink(self.bind_address[len("ipc://"):])
            except OSError:
                pass
        self._peer_change_notify()
        log.debug("node %d stopped (%s)", self.node_id,
                 ", ".join(f"{k} {v}" for k, v in self.stats.items() if v))
        if self._key_error:
            raise KeyMismatchError(self._key_error)

    def __repr__(self) -> str:
        return (f"ZmqRouter(node_id={self.node_id}, address={self.address or self.bind_address!r}, "
                f"topology={self.topology!r}, peers={self.peers})")
