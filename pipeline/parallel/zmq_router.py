"""ZeroMQ message bus between rlpipe nodes: ``ZmqRouter``.

Transport
    Every node binds one PULL socket (its *address*, ``tcp://127.0.0.1:PORT`` or ``ipc:///path``) and keeps
    one PUSH socket per peer, so each pair of nodes has exactly one path in each direction and an event
    reaches each peer exactly once. A node learns its peers by a handshake (``handshake``).

Topologies
    ``mesh``: connect to every node of the group. ``star``: every node connects to the centre (the
    smallest node id of the group) only; the centre talks to everyone, the others only to the centre.
    ``alone``: connect only to ``attach_to``. In all topologies a node accepts nodes that attach to it.

The router holds one part per concern (listed in its constructor, with the state they share); each part's
module docstring says what it guarantees. The modules import one way (``tests/parallel/test_import_layers.py``
checks it), so they read bottom-up:

* the shared state: ``node_state.NodeState`` (this node), ``peers`` (the peer table ``Peers``, its entries
  and the ``Notices`` delivered besides messages), ``sleepers.Sleepers`` and ``waker.Waker`` (waking
  threads in ``wait`` and a reader in ``recv``);
* ``wire.Framer``: framing and HMAC authentication (nothing is decoded before the MAC check; payloads use
  the pickle-free ``codec``), sequence numbers against duplicates and replays, chunked messages;
* ``transport_guard``: the incoming connections; ``connector.Connector``: the outgoing ones, and
  ``probes.Probes`` on them (the addresses that have not answered our HELLOs yet);
* ``sending.Sender``: ``emit``, backpressure (``BackpressureTimeout``) and counting what cannot be delivered;
* ``keycheck.KeyCheck``: telling a peer with another key from silence (``KeyMismatchError``);
* ``ending.Ending``: "__finish__" reaching every node, and the peerless bound;
* ``membership.Membership``: how peer entries join, die, leave and come back;
* ``handshake.Handshake``: HELLO/ACK, how nodes find each other, and refusing replayed HELLOs;
* ``delivery.Delivery``: acting on what was read, and calling ``on_message``; ``reader.Reader``: which
  thread reads the socket (the hand-over to threads in ``wait``);
* ``heartbeat.Heartbeat``: the heartbeat thread, which drives the parts below it (liveness of the peers);
* this module: configuration, start and stop.
"""
from __future__ import annotations

import logging
import os
import secrets
import socket as _socket
import threading
import time
from collections import deque
from typing import Any, Callable, Dict, Generic, Iterable, List, Mapping, Optional, Sequence, Set, TypeVar, overload

import zmq

from ..runtime.node import node_is_quiet
from ..runtime.router import OnMessage, Router
from .connector import Connector
from .delivery import Delivery
from .ending import Ending
from .handshake import Handshake, seed_addresses
from .heartbeat import Heartbeat
from .keycheck import KeyCheck, KeyMismatchError
from .keys import resolve_key
from .membership import Membership
from .node_state import NodeState
from .peers import Notices, Peers
from .probes import Probes
from .reader import Reader
from .sending import BackpressureTimeout, Sender
from .sleepers import Sleepers
from .transport_auth import TransportGuard, resolve_bus_auth
from .waker import Waker
from .wire import (FINISH, PEER_DEAD, PEER_JOINED, PEER_LEFT, WIRE_MAX, Framer, _Assemblies, is_local_address)

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


def _announceable(bound: str) -> str:
    """The address to announce for the bound one: a wildcard host (0.0.0.0, ::) is replaced by this machine's
    address (or name)."""
    if bound.startswith("tcp://0.0.0.0:") or bound.startswith("tcp://[::]:"):
        port = bound.rsplit(":", 1)[1]
        try:
            host = _socket.gethostbyname(_socket.gethostname())
        except OSError:
            host = _socket.gethostname()
        return f"tcp://{host}:{port}"
    return bound


_T = TypeVar("_T")


class _OfNode(Generic[_T]):
    """An attribute of the router kept in its ``NodeState``, where the parts read it (the one of the same
    name): ``session``, ``address``, ``labels``, ``roles``."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, router: None, owner: object = None) -> _OfNode[_T]: ...

    @overload
    def __get__(self, router: ZmqRouter, owner: object = None) -> _T: ...

    def __get__(self, router: Optional[ZmqRouter], owner: object = None) -> object:
        return self if router is None else getattr(router._node, self._name)

    def __set__(self, router: ZmqRouter, value: _T) -> None:
        setattr(router._node, self._name, value)


class ZmqRouter(Router):
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
        # This node as every part sees it: id, incarnation (``session``), announced address, labels and roles
        # (this router's attributes of those names), the counters (``stats``) and whether it runs.
        self._node = NodeState(int(node_id), secrets.randbits(63) | 1, roles={str(r) for r in (roles or ())})
        super().__init__(node_id=int(node_id), labels=labels)
        if topology not in TOPOLOGIES:
            raise ValueError(f"unknown topology {topology!r}: use one of {', '.join(TOPOLOGIES)}")
        if heartbeat_timeout <= heartbeat_interval:
            raise ValueError(f"heartbeat_timeout ({heartbeat_timeout}) must be larger than heartbeat_interval "
                             f"({heartbeat_interval})")
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
        node = self._node
        node.started_at = time.monotonic()
        all_addresses = [self.bind_address, *self.group.values(), *self.attach_to]
        multi_machine = not all(is_local_address(a) for a in all_addresses)
        self._key = resolve_key(key, multi_machine=multi_machine)
        self.bus_auth = resolve_bus_auth(bus_auth, multi_machine=multi_machine)
        self._seeds = seed_addresses(node.node_id, self.group, topology, self.attach_to)
        self.expected_peers = len(self._seeds) if expected_peers is None else int(expected_peers)
        self.stats = node.stats

        # The state the parts share; each part's docstring says what it reads and writes of it.
        self._peers = Peers()  # node id -> peer entry, and the state lock
        self._notices: Notices = deque()  # what on_message gets besides messages (joined/dead/left, finish)
        # Per (sender, session): its unfinished chunked message; all of them hold at most max_assembly_bytes.
        self._assembling = _Assemblies(self.max_assembly_bytes)
        self._sleepers = Sleepers()  # threads in wait() that do not read
        self._waker = Waker()  # the in-process wake-up of a reader blocked in recv
        self._connector = Connector(self._key, self.bus_auth, self.hwm, self.linger)  # outgoing connections
        self._probes = Probes(self._connector)  # seed addresses that have not answered our HELLOs
        # The parts, each built from what it needs.
        table, notices = self._peers, self._notices
        self._framer = Framer(node, self._key, table, self._assembling, self.max_frame_size,
                              self.max_message_size, self.assembly_timeout)
        self._sender = Sender(node, table, self._framer, self.send_timeout, self.hwm, self.max_frame_size,
                              self.max_message_size, topology)
        self._keys = KeyCheck(node, table, self._probes, self.bus_auth, self.startup_timeout)
        self._ending = Ending(node, table, self._sender, self._framer, self._connector, self._keys, notices,
                              self._waker, self.peerless_timeout, self.expected_peers, self.startup_timeout)
        self._membership = Membership(node, table, self._connector, self._assembling, notices, self._ending,
                                      self.stop_on_peer_failure)
        self._handshake = Handshake(node, table, self._probes, self._membership, self._framer, self._sender,
                                    topology, self.hello_max_skew)
        self._delivery = Delivery(node, table, self._framer, self._membership, self._handshake, self._ending,
                                  notices, self._sleepers)
        self._reader = Reader(node, self._framer, self._delivery, self._sleepers, self._waker)
        self._heartbeat = Heartbeat(node, table, self._membership, self._handshake, self._sender, self._ending,
                                    self._framer, self._delivery, self._reader, self._waker, notices,
                                    self.heartbeat_interval, self.heartbeat_timeout, self.slow_listener_warning)
        # Made by start().
        self._ctx: Any = None
        self._guard: Optional[TransportGuard] = None
        self._threads: List[threading.Thread] = []

    # ------------------------------------------------------------------ this node
    session = _OfNode[int]()  # this incarnation (random, odd): peers tell a restarted node by it
    address = _OfNode[Optional[str]]()  # the address announced to peers, known after start()
    labels = _OfNode[Set[str]]()  # announced to peers (peer_info); the task runtime sets them before start()
    roles = _OfNode[Set[str]]()  # announced to peers; read by the task runtime when task.start gets none

    @property
    def assembly_bytes(self) -> int:
        """Bytes held now by this node's unfinished chunked messages, all together (at most
        ``max_assembly_bytes``): the chunks received so far, whatever their heads declared."""
        return self._assembling.held

    # ------------------------------------------------------------------ peers
    @property
    def peers(self) -> List[int]:
        """Ids of the connected (alive) peers."""
        return self._peers.alive_ids()

    def peer_info(self, node_id: int) -> Dict[str, object]:
        """What a peer announced: address, labels, roles, and whether it is alive."""
        return self._peers.info(node_id)

    def wait_for_peers(self, n: int, timeout: float) -> bool:
        """Block until at least ``n`` peers are connected, at most ``timeout`` s (also released by stop).
        Returns whether they are; logs the missing seeds otherwise."""
        peers, stopping = self._peers, self._node.stopping
        deadline = time.monotonic() + timeout
        with peers.changed:
            while peers.n_alive() < n and not stopping.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                peers.changed.wait(min(left, 0.1))
            ok = peers.n_alive() >= n
            missing = self._probes.addresses()
        if not ok and not stopping.is_set():
            log.warning("node %d: only %d of %d expected peers connected after %.1f s; still waiting in the "
                        "background for %s", self.node_id, peers.n_alive(), n, timeout, missing or "new nodes")
        return ok

    # ------------------------------------------------------------------ messages
    def emit(self, event: str, args: tuple = (), kwargs: Optional[dict] = None, to: Optional[int] = None) -> None:
        """Send ``event`` to every connected peer (``to=None``) or to node ``to``, exactly once each.

        Blocks under backpressure (bounded by ``send_timeout``). Raises ``codec.EncodeError`` for values
        the safe codec cannot carry. A message for a dead or unknown peer is counted and logged."""
        if self._sender.emit(event, args, kwargs, to) and event == FINISH:
            self._ending.spread_finish(alive_told=to is None)  # also to peers believed dead (``ending``)

    def wait(self, until: Callable[[], object], timeout: float) -> bool:
        """Block until ``until()`` is true, at most ``timeout`` s (``inf`` allowed), or until the router stops;
        meanwhile the calling thread reads and delivers messages itself (``Reader.wait``)."""
        return self._reader.wait(until, timeout)

    def wake(self) -> None:
        """Make threads in ``wait`` check their condition now (``Reader.wake``)."""
        self._reader.wake()

    # ------------------------------------------------------------------ set-up
    def start(self, on_message: OnMessage) -> None:
        """Bind, start the receiver and heartbeat threads, connect to the seeds and wait (bounded) for
        ``expected_peers`` peers."""
        node = self._node
        if node.started:
            raise RuntimeError("ZmqRouter.start called twice: a router serves one task run; build a new one")
        node.started = True
        node.started_at = time.monotonic()
        self._delivery.on_message = on_message
        self._ctx = self._connector.ctx = zmq.Context()
        keys = self._keys
        guard = self._guard = TransportGuard(self._ctx, self._key, self.bus_auth, keys.refused, stats=self.stats,
                                             max_peer_bytes=self.max_peer_bytes,
                                             handshake_timeout=self.handshake_timeout, on_cut=keys.cut_connection,
                                             on_closed=keys.closed_connection)
        pull = self._ctx.socket(zmq.PULL)
        guard.server(pull)
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
            guard.close()
            self._ctx.term()
            raise OSError(f"node {self.node_id} cannot listen on {self.bind_address}: {e} (is another node or "
                          "program using this port? choose other --ports)") from None
        self._reader.attach(pull, guard.delivered, guard.wire_size())
        bound = pull.getsockopt_string(zmq.LAST_ENDPOINT)
        guard.listening(bound)
        pull.bind("inproc://rlpipe-wake")  # this router's own context: the address is private to it
        self._waker.connect(self._ctx)
        self.address = announced_address(self.advertise, bound) if self.advertise else _announceable(bound)
        for a in self._seeds:
            if is_local_address(a) != is_local_address(self.address) and not self.advertise:
                log.warning("node %d listens on %s but connects to %s: the peer cannot connect back unless "
                            "this node listens on an interface it can reach (--address)", self.node_id,
                            self.address, a)
        with self._peers.lock:
            for a in self._seeds:
                self._probes.add(a)
        log.log(logging.DEBUG if node_is_quiet() else logging.INFO,
                "node %d listening on %s (topology %s, %d seed address(es))", self.node_id, self.address,
                self.topology, len(self._seeds))
        stopping = node.stopping
        for target, name in ((self._reader.run, "recv"), (self._heartbeat.run, "heartbeat"),
                             (lambda: guard.run(stopping), "auth")):
            t = threading.Thread(target=target, name=f"rlpipe-{name}-{self.node_id}", daemon=True)
            t.start()
            self._threads.append(t)
        if self.expected_peers:
            try:
                ok = self.wait_for_peers(self.expected_peers, self.startup_timeout)
            except BaseException:  # e.g. Ctrl-C while waiting: do not leave threads and sockets behind
                self.stop()
                raise
            if not ok and keys.check(time.monotonic()):
                self.stop()  # raises KeyMismatchError

    # ------------------------------------------------------------------ shutdown
    def stop(self) -> None:
        """Say goodbye to the peers, flush queued messages (at most ``linger`` s) and close. Idempotent."""
        node = self._node
        if not node.started or node.stopped:
            node.stopped = True
            return
        node.stopped = True  # senders blocked under backpressure give up within 50 ms
        self._sender.send_bye(self.linger)
        self._reader.halt()
        node.stopping.set()
        self._reader.release()
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join(timeout=2.0)
        # Whoever reads checks the stop flag after taking the token: once we hold it, nobody touches the PULL
        # socket again (the token is never given back). A listener that calls stop() holds it already.
        reading = self._reader.take_for_good(me.ident)
        with self._peers.lock:
            self._probes.close_all()
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
        self._waker.close()
        if reading:
            self._reader.close()
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
        self._peers.notify_changed()
        log.debug("node %d stopped (%s)", self.node_id,
                 ", ".join(f"{k} {v}" for k, v in self.stats.items() if v))
        if self._keys.error:
            raise KeyMismatchError(self._keys.error)

    def __repr__(self) -> str:
        return (f"ZmqRouter(node_id={self.node_id}, address={self.address or self.bind_address!r}, "
                f"topology={self.topology!r}, peers={self.peers})")
