"""Liveness of ``ZmqRouter``'s peers: the heartbeat thread (``Heartbeat``), which drives the other parts.

Nodes send heartbeats every ``heartbeat_interval`` s; a peer silent for ``heartbeat_timeout`` s is declared
dead: ``"__peer_dead__", (node_id,), {}`` is delivered through ``on_message`` (and ``"__finish__"`` too when
``stop_on_peer_failure``). A peer that stops cleanly sends BYE (``"__peer_left__"``); a new peer produces
``"__peer_joined__"``. While a local listener runs for a long time the silence of peers is not held against
them. A peer declared dead that sends again is reconnected (``Membership.revive``).

The peer table is ``peers`` (``Peer``, ``Peers``); how its entries join, die, leave and come back is
``membership`` (``Membership``). The heartbeat thread sits above the parts it drives (only the router
imports it): the membership, the handshake, the sender, the ending, the framer and the reader.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from . import codec
from .wire import K_HEARTBEAT, PEER_DEAD

if TYPE_CHECKING:
    from .delivery import Delivery
    from .ending import Ending
    from .handshake import Handshake
    from .membership import Membership
    from .node_state import NodeState
    from .peers import Notices, Peers
    from .reader import Reader
    from .sending import Sender
    from .waker import Waker
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")


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
