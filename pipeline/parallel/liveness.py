"""Peer membership and liveness of ``ZmqRouter``: peer entries, heartbeats, dead and revived peers.

Nodes send heartbeats every ``heartbeat_interval`` s; a peer silent for ``heartbeat_timeout`` s is declared
dead: ``"__peer_dead__", (node_id,), {}`` is delivered through ``on_message`` (and ``"__finish__"`` too when
``stop_on_peer_failure``). A peer that stops cleanly sends BYE (``"__peer_left__"``); a new peer produces
``"__peer_joined__"``. While a local listener runs for a long time the silence of peers is not held against
them. A peer declared dead that sends again is reconnected (``Membership.revive``).

The pieces: ``Peer`` (one entry), ``Peers`` (the table and its lock), ``Membership`` (how entries join, die,
leave and come back) and ``Heartbeat`` (the heartbeat thread).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Deque, Dict, Iterable, List, Optional, Tuple

from ..runtime.node import node_is_quiet
from . import codec
from .wire import _PREFIX, _MAGIC, _VERSION, K_DATA, K_HEARTBEAT, PEER_DEAD, PEER_JOINED, _Assemblies

if TYPE_CHECKING:
    import zmq

    from .connector import Connector
    from .ending import Ending
    from .handshake import Handshake
    from .node_state import NodeState
    from .reader import Delivery, Reader, Waker
    from .sending import Sender
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")

# What the reader delivers to ``on_message`` besides messages: (event, args) of joined, dead and left peers
# and of a local finish, queued by the membership and the ending.
Notices = Deque[Tuple[str, tuple]]


class Peer:
    """One incarnation of a peer that joined this node: its connection, the sequence numbers of what this
    node sends it, and what the heartbeat thread and the membership know of its liveness. ``lock`` is held
    by whoever sends to it (``sock`` and ``next_seq`` change only under it)."""
    __slots__ = ("node_id", "session", "address", "labels", "roles", "sock", "lock", "next_seq", "last_seen",
                 "alive", "warned", "data_prefix", "rx_count", "rx_mark", "dead_since", "dead_wall", "left")

    def __init__(self, node_id: int, session: int, address: str, labels: Iterable[str], roles: Iterable[str],
                 sock: Optional[zmq.Socket], data_prefix: bytes = b"") -> None:
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
        self.dead_since = 0.0  # when it was declared dead (its socket is closed some time later)
        self.dead_wall = 0.0  # the same as wall-clock time (a HELLO stamped before it cannot revive it)
        self.left = False  # it said goodbye (BYE): this incarnation never comes back


class Peers(Dict[int, Peer]):
    """The peer table of a node: node id -> the entry of its latest incarnation that joined (alive, dead or
    gone), and the state lock. Only ``Membership`` adds, revives and closes entries; anyone may look one up
    without the lock (a dict lookup is atomic) or take a snapshot (``list(peers.values())``).

    ``lock`` (re-entrant) is the router's state lock: it guards membership changes, and also the probes and
    the HELLO state of ``handshake``. ``changed``, a condition on it, is notified when a peer joins, dies,
    leaves or comes back (``ZmqRouter.wait_for_peers`` waits on it)."""

    def __init__(self) -> None:
        super().__init__()
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)

    def n_alive(self) -> int:
        return sum(1 for p in self.values() if p.alive)

    def alive_ids(self) -> List[int]:
        """Ids of the connected (alive) peers."""
        with self.lock:
            return sorted(i for i, p in self.items() if p.alive)

    def info(self, node_id: int) -> Dict[str, object]:
        """What a peer announced: address, labels, roles, and whether it is alive."""
        with self.lock:
            p = self[node_id]
            return {"address": p.address, "labels": set(p.labels), "roles": set(p.roles), "alive": p.alive}

    def notify_changed(self) -> None:
        with self.changed:
            self.changed.notify_all()


class Membership:
    """How peer entries join, die, leave and come back (see the module docstring), in the table ``peers``.
    Owns no state of its own: it opens and closes the entries' sockets (``connector``), discards a departed
    peer's unfinished chunked message (``assemblies``), queues the notices the reader delivers (``notices``),
    tells a peer that joins after the finish of it and ends the run when a peer dies under
    ``stop_on_peer_failure`` (``ending``)."""

    def __init__(self, node: NodeState, peers: Peers, connector: Connector, assemblies: _Assemblies,
                 notices: Notices, ending: Ending, stop_on_peer_failure: bool) -> None:
        self._node, self._peers, self._connector = node, peers, connector
        self._assemblies, self._notices, self._ending = assemblies, notices, ending
        self._stop_on_peer_failure = stop_on_peer_failure

    def register(self, node_id: int, session: int, info: Dict[str, Any], sock: Optional[zmq.Socket] = None) -> Peer:
        """Create or refresh the peer entry for (node_id, session); caller holds the state lock. The entry of a
        known incarnation is kept (a dead one is revived), so its sequence numbers never restart."""
        me = self._node
        old = self._peers.get(node_id)
        if old is not None and old.session == session:
            if sock is not None:
                if old.sock is None and old.lock.acquire(timeout=1.0):
                    old.sock, sock = sock, None
                    old.lock.release()
                if sock is not None:
                    sock.close(0)
            if not old.alive:
                self._wake(old)
            return old
        if old is not None:
            if old.alive:
                log.warning("node %d: node %d restarted (new session); replacing its connection", me.node_id,
                            node_id)
            self.close(old)
        if sock is None:
            sock = self._connector.push(info["address"])
        labels = [x for x in info.get("labels", ()) if isinstance(x, str)]
        roles = [x for x in info.get("roles", ()) if isinstance(x, str)]
        peer = Peer(node_id, session, info["address"], labels, roles, sock,
                    _PREFIX.pack(_MAGIC, _VERSION, K_DATA, me.node_id, me.session, node_id, session))
        self._peers[node_id] = peer
        log.log(logging.DEBUG if node_is_quiet() else logging.INFO,
                "node %d: connected to node %d at %s (roles %s, labels %s)", me.node_id, node_id,
                info["address"], sorted(peer.roles) or "-", sorted(peer.labels) or "-")
        self._notices.append((PEER_JOINED, (node_id,)))
        self._peers.changed.notify_all()
        self._ending.owe_finish(peer)  # a node that joins after the finish still hears of it (``ending``)
        return peer

    def close(self, p: Peer) -> None:
        """Mark ``p`` not alive and close its socket (caller holds the state lock, or ``p`` is dead)."""
        p.alive = False
        self._assemblies.discard((p.node_id, p.session))  # its unfinished chunked message, if any
        if p.lock.acquire(timeout=1.0):  # a sender polls p.alive every 50 ms and lets go
            try:
                if p.sock is not None:
                    p.sock.close(0)
                    p.sock = None
            finally:
                p.lock.release()
        else:
            log.warning("node %d: could not close the connection to node %d (a sender holds it)",
                        self._node.node_id, p.node_id)

    def lose(self, p: Peer, event: str) -> None:
        """Mark ``p`` dead (silent too long) or gone (it said BYE). A dead peer keeps its entry, its sequence
        numbers and, for a while, its socket: what is queued there still reaches it if it comes back, and it
        keeps getting heartbeats, so that two nodes that both declared the other dead find each other again."""
        with self._peers.lock:
            if not p.alive:
                return
            if event == PEER_DEAD:
                p.alive = False
                p.dead_since = time.monotonic()
                p.dead_wall = time.time()
            else:
                p.left = True
                self.close(p)
            self._peers.changed.notify_all()
        self._notices.append((event, (p.node_id,)))
        if event == PEER_DEAD and self._stop_on_peer_failure:
            self._ending.end_run(f"node {p.node_id} is dead (--stop-on-failure)")

    def revive(self, p: Peer) -> None:
        """``p``, declared dead, sent an authenticated message of the same session: it is alive again."""
        with self._peers.lock:
            if p.alive or self._peers.get(p.node_id) is not p or self._node.stopping.is_set():
                return
            log.warning("node %d: node %d, declared dead, is sending again; reconnecting", self._node.node_id,
                        p.node_id)
            self._wake(p)

    def _wake(self, p: Peer) -> None:
        """Revive a dead entry in place (caller holds the state lock): same sequence numbers, same socket if
        it is still open, so that every message after the revival arrives exactly once."""
        if p.sock is None:
            p.sock = self._connector.push(p.address)
        p.alive = True
        p.rx_mark = p.rx_count
        p.last_seen = time.monotonic()
        self._notices.append((PEER_JOINED, (p.node_id,)))
        self._peers.changed.notify_all()


class Heartbeat:
    """The heartbeat thread (``run``): every 50 ms it turns the messages counted per peer into the time it
    was last heard of, watches for a long listener, wakes the reader, repeats HELLOs to unanswered probes;
    every ``heartbeat_interval`` s it sends heartbeats (also to dead peers, so that they can revive us),
    declares silent peers dead, checks the peerless bound and expires stalled chunked messages.

    Owns ``grace_from``: since when the peers' silence counts (moved on after this process was paused or
    this node's reader was busy in a long listener), and what it saw of the listener that runs now. Reads
    the delivery's ``in_handler``, ``deliveries`` and ``handler_event`` and the reader's ``owner``."""

    def __init__(self, node: NodeState, peers: Peers, membership: Membership, handshake: Handshake,
                 sender: Sender, ending: Ending, framer: Framer, delivery: Delivery, reader: Reader, waker: Waker,
                 notices: Notices, heartbeat_interval: float, heartbeat_timeout: float,
                 slow_listener_warning: float) -> None:
        self._node, self._peers, self._membership = node, peers, membership
        self._handshake, self._sender, self._ending, self._framer = handshake, sender, ending, framer
        self._delivery, self._reader, self._waker, self._notices = delivery, reader, waker, notices
        self.heartbeat_interval, self.heartbeat_timeout = heartbeat_interval, heartbeat_timeout
        self.slow_listener_warning = slow_listener_warning
        self.grace_from = 0.0

    def run(self) -> None:
        hb = codec.encode(None)[0]
        node, delivery, reader = self._node, self._delivery, self._reader
        stopping = node.stopping
        probe_every = min(0.2, self.heartbeat_interval)
        next_beat = 0.0
        busy_no, long_busy, busy_since, warned = -1, False, 0.0, False
        keep_dead = max(30.0, 10 * self.heartbeat_timeout)
        last_tick = time.monotonic()
        while not stopping.is_set():
            now = time.monotonic()
            if now - last_tick > max(1.0, self.heartbeat_timeout / 2):
                # This thread did not run for a while (the process was paused: SIGSTOP, a VM or GC pause, or
                # starved): nobody here read anything either, so the peers' silence means nothing yet.
                self.grace_from = now
            last_tick = now
            # The readers only count messages per peer; the time a peer was last heard of is taken here.
            for p in list(self._peers.values()):
                n = p.rx_count
                if n != p.rx_mark:
                    p.rx_mark = n
                    p.last_seen = now
            # A listener seen running on two ticks in a row is a long one: while it runs and after it ends,
            # the peers' silence is not held against them (we were not reading).
            if delivery.in_handler:
                n = delivery.deliveries
                if n == busy_no:
                    long_busy = True
                    if not warned and now - busy_since > self.slow_listener_warning:
                        warned = True
                        log.warning(
                            "node %d: a listener of remote event %r has run for %.0f s; meanwhile this node reads "
                            "no messages. Listeners must not block (hand long work to another thread); a thread "
                            "in task.wait_for/router.wait also runs listeners, so it must not hold a lock that "
                            "one of them takes", node.node_id, delivery.handler_event, now - busy_since)
                else:
                    if long_busy:
                        self.grace_from = now
                    busy_no, long_busy, busy_since, warned = n, False, now, False
            else:
                if long_busy:
                    self.grace_from = now
                busy_no, long_busy = -1, False
            # The reader blocks in recv without a timeout: wake it for notices (e.g. a dead peer) to deliver,
            # and wake a thread in wait() every tick, so that it checks its condition and deadline.
            owner = reader.owner
            if owner is not None and (self._notices or owner != reader.receiver):
                self._waker.send()
            with self._peers.lock:  # probe sockets are used only under this lock
                self._handshake.send_hellos(now, probe_every)
            if now >= next_beat:
                next_beat = now + self.heartbeat_interval
                self._beat(now, hb, keep_dead)
            stopping.wait(0.05)

    def _beat(self, now: float, hb: bytes, keep_dead: float) -> None:
        """One heartbeat (see the class docstring)."""
        with self._peers.lock:
            peers = [p for p in self._peers.values() if p.alive]
            dead = [p for p in self._peers.values() if not p.alive and p.sock is not None]
        for p in peers:
            self._sender.send_to(p, K_HEARTBEAT, hb, (), b"", "heartbeat", timeout=0.0)
        for p in dead:  # a dead peer that comes back hears from us and revives us in turn
            if now - p.dead_since > keep_dead:
                with self._peers.lock:
                    if not p.alive:
                        self._membership.close(p)
            else:
                self._sender.send_to(p, K_HEARTBEAT, hb, (), b"", "heartbeat", timeout=0.0, to_dead=True)
        for p in peers:
            if self._delivery.in_handler:
                break  # our reader is busy in a listener: peers' silence means nothing now
            silent = now - max(p.last_seen, self.grace_from)
            if silent > self.heartbeat_timeout and p.alive:
                log.error("node %d: node %d is dead (no message for %.1f s, heartbeat_timeout %.1f s)",
                          self._node.node_id, p.node_id, silent, self.heartbeat_timeout)
                self._membership.lose(p, PEER_DEAD)
        self._ending.check_peerless(now)
        # chunked messages whose chunks stopped coming (``wire``)
        self._framer.expire(now, self._delivery.in_handler, self.grace_from)
        if self._notices and self._reader.owner is not None:
            self._waker.send()
