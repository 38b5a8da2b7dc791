"""Peer membership and liveness of ``ZmqRouter``: peer entries, heartbeats, dead and revived peers.

Nodes send heartbeats every ``heartbeat_interval`` s; a peer silent for ``heartbeat_timeout`` s is declared
dead: ``"__peer_dead__", (node_id,), {}`` is delivered through ``on_message`` (and ``"__finish__"`` too when
``stop_on_peer_failure``). A peer that stops cleanly sends BYE (``"__peer_left__"``); a new peer produces
``"__peer_joined__"``. While a local listener runs for a long time the silence of peers is not held against
them. A peer declared dead that sends again is reconnected (``_revive``).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Dict, Iterable, List

from ..runtime.node import node_is_quiet
from . import codec
from .wire import _PREFIX, _MAGIC, _VERSION, K_DATA, K_HEARTBEAT, PEER_DEAD, PEER_JOINED

log = logging.getLogger("rlpipe.parallel")


class _Peer:
    __slots__ = ("node_id", "session", "address", "labels", "roles", "sock", "lock", "next_seq", "last_seen",
                 "alive", "warned", "data_prefix", "rx_count", "rx_mark", "dead_since", "dead_wall", "left")

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
        self.dead_since = 0.0  # when it was declared dead (its socket is closed some time later)
        self.dead_wall = 0.0  # the same as wall-clock time (a HELLO stamped before it cannot revive it)
        self.left = False  # it said goodbye (BYE): this incarnation never comes back


class Liveness:
    """Peer entries and the heartbeat thread; a mixin of ``ZmqRouter`` (uses its ``_peers``, ``_state_lock``,
    ``_peer_change``, ``_notices``, ``_stopping``, the reader's ``_in_handler``/``_deliveries``/``_rx_owner`` and
    ``_send_wake``, ``_send_to``, and ``wire``'s ``_assembling`` and ``_expire_assemblies``, which the heartbeat
    thread calls on each beat)."""

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

    def _register(self, node_id: int, session: int, info: Dict[str, Any], sock: Any = None) -> _Peer:
        """Create or refresh the peer entry for (node_id, session); caller holds the state lock. The entry of a
        known incarnation is kept (a dead one is revived), so its sequence numbers never restart."""
        old = self._peers.get(node_id)
        if old is not None and old.session == session:
            if sock is not None:
                if old.sock is None and old.lock.acquire(timeout=1.0):
                    old.sock, sock = sock, None
                    old.lock.release()
                if sock is not None:
                    sock.close(0)
            if not old.alive:
                self._wake_peer(old)
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
        log.log(logging.DEBUG if node_is_quiet() else logging.INFO,
                "node %d: connected to node %d at %s (roles %s, labels %s)", self.node_id, node_id,
                info["address"], sorted(peer.roles) or "-", sorted(peer.labels) or "-")
        self._notices.append((PEER_JOINED, (node_id,)))
        self._peer_change.notify_all()
        self._owe_finish(peer)  # a node that joins after the finish still hears of it (``ending``)
        return peer

    def _close_peer(self, p: _Peer) -> None:
        p.alive = False
        self._assembling.discard((p.node_id, p.session))  # its unfinished chunked message, if any
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
        """Mark ``p`` dead (silent too long) or gone (it said BYE). A dead peer keeps its entry, its sequence
        numbers and, for a while, its socket: what is queued there still reaches it if it comes back, and it
        keeps getting heartbeats, so that two nodes that both declared the other dead find each other again."""
        with self._state_lock:
            if not p.alive:
                return
            if event == PEER_DEAD:
                p.alive = False
                p.dead_since = time.monotonic()
                p.dead_wall = time.time()
            else:
                p.left = True
                self._close_peer(p)
            self._peer_change.notify_all()
        self._notices.append((event, (p.node_id,)))
        if event == PEER_DEAD and self.stop_on_peer_failure:
            self._end_run(f"node {p.node_id} is dead (--stop-on-failure)")

    def _revive(self, p: _Peer) -> None:
        """``p``, declared dead, sent an authenticated message of the same session: it is alive again."""
        with self._state_lock:
            if p.alive or self._peers.get(p.node_id) is not p or self._stopping.is_set():
                return
            log.warning("node %d: node %d, declared dead, is sending again; reconnecting", self.node_id, p.node_id)
            self._wake_peer(p)

    def _wake_peer(self, p: _Peer) -> None:
        """Revive a dead entry in place (caller holds the state lock): same sequence numbers, same socket if
        it is still open, so that every message after the revival arrives exactly once."""
        if p.sock is None:
            p.sock = self._new_push(p.address)
        p.alive = True
        p.rx_mark = p.rx_count
        p.last_seen = time.monotonic()
        self._notices.append((PEER_JOINED, (p.node_id,)))
        self._peer_change.notify_all()

    def _monitor_loop(self) -> None:
        hb = codec.encode(None)[0]
        stopping = self._stopping
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
                self._grace_from = now
            last_tick = now
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
                    dead = [p for p in self._peers.values() if not p.alive and p.sock is not None]
                for p in peers:
                    self._send_to(p, K_HEARTBEAT, hb, (), b"", "heartbeat", timeout=0.0)
                for p in dead:  # a dead peer that comes back hears from us and revives us in turn
                    if now - p.dead_since > keep_dead:
                        with self._state_lock:
                            if not p.alive:
                                self._close_peer(p)
                    else:
                        self._send_to(p, K_HEARTBEAT, hb, (), b"", "heartbeat", timeout=0.0, to_dead=True)
                for p in peers:
                    if self._in_handler:
                        break  # our reader is busy in a listener: peers' silence means nothing now
                    silent = now - max(p.last_seen, self._grace_from)
                    if silent > self.heartbeat_timeout and p.alive:
                        log.error("node %d: node %d is dead (no message for %.1f s, heartbeat_timeout %.1f s)",
                                  self.node_id, p.node_id, silent, self.heartbeat_timeout)
                        self._lose(p, PEER_DEAD)
                self._check_peerless(now)
                self._expire_assemblies(now)  # chunked messages whose chunks stopped coming (``wire``)
                if self._notices and self._rx_owner is not None:
                    self._send_wake()
            stopping.wait(0.05)

    def _peer_change_notify(self) -> None:
        with self._peer_change:
            self._peer_change.notify_all()
