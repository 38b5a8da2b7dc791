"""How a run ends on every node (a mixin of ``ZmqRouter``).

* ``"__finish__"`` reaches every node of the job, whatever the topology and whatever each node believes
  about the others' liveness: a node that sends or first receives it passes it on to every peer it knows,
  alive or declared dead (a node two hops away in a star or an ``attach_to`` chain gets it through the
  middle node; a peer declared dead, perhaps only paused or slow, gets it on the connection kept for its
  revival, or over a fresh one once that is closed).
* A node whose every peer is gone (dead or left) for ``peerless_timeout`` seconds finishes its run (the
  ``"__finish__"`` event is delivered locally, so ``task.run`` ends and ``task.wait_for`` returns). The clock
  starts when the last peer was lost, or, for a node that expects peers, when its startup timeout ran out
  without any. A node that expects nobody (it waits for others to attach) waits for its first peer. While the
  launcher restarts nodes that die (``RLPIPE_MAX_RESTARTS`` > 0), the bound is at least
  ``RESTART_PEERLESS_TIMEOUT`` (120 s), the time a restarted peer gets to start, load its checkpoint and
  listen again; the launcher ends the job when it cannot restart a node.
* A peer that connects after this node saw the finish is told too (a late joiner of the job).
* A node leaving ``with task.start()`` normally finishes the run of its peers (``Task.__exit__``).
"""
from __future__ import annotations

import logging
from typing import Any, List, Optional

import zmq

from . import codec
from ..runtime.node import RESTART_PEERLESS_TIMEOUT, restarts_expected
from .transport_auth import client
from .wire import FINISH, K_DATA

log = logging.getLogger("rlpipe.parallel")


class Ending:
    """Finish propagation and the peerless bound; uses ``ZmqRouter``'s ``_peers``, ``_state_lock``,
    ``_notices``, ``_ctx``, ``_frames``, ``_send_to``, ``peerless_timeout`` and ``stats``."""

    _finish_meta: Optional[bytes] = None
    _alone_since: Optional[float] = None
    _ended_alone = False
    _finish_owed: Optional[List[Any]] = None  # peers that connected after the finish

    def _finish_frames_meta(self) -> bytes:
        if self._finish_meta is None:
            self._finish_meta = codec.encode_event(FINISH, (), {})[0]
        return self._finish_meta

    def _spread_finish(self, came_from: Optional[int] = None, alive_told: bool = False) -> None:
        """Called once per node, when "__finish__" is first emitted here or received: pass it on to every
        known peer but ``came_from`` (alive ones on their connection, the others over a fresh one).
        ``alive_told``: ``emit`` sent it to the alive peers already."""
        if self._finish_seen:
            return
        self._finish_seen = True  # from now on no send waits for backpressure
        meta = self._finish_frames_meta()
        with self._state_lock:
            peers = [p for p in self._peers.values() if p.node_id != came_from and not (alive_told and p.alive)]
        for p in peers:
            alive = p.alive
            if p.sock is not None and self._send_to(p, K_DATA, meta, (), b"", FINISH, timeout=0.2, to_dead=True):
                if not alive:
                    self.stats["finish_to_lost"] += 1
            elif alive or getattr(p, "dead_since", 0.0):  # not for a peer that said goodbye: it is gone
                self._send_finish_over_new_connection(p, meta)

    def _send_finish_over_new_connection(self, p: Any, meta: bytes) -> None:
        """A peer we consider dead may only be paused or slow: give it "__finish__" anyway (best effort, queued
        until it accepts the connection, for at most ``linger`` s after this router stops)."""
        if self._ctx is None or not p.address:
            return
        try:
            sock = self._ctx.socket(zmq.PUSH)
            client(sock, self._key, self.bus_auth)
            sock.setsockopt(zmq.LINGER, int(self.linger * 1000))
            sock.setsockopt(zmq.SNDHWM, 4)
            sock.connect(p.address)
        except zmq.ZMQError as e:
            log.warning("node %d: cannot reach node %d at %s to tell it the run finished: %s", self.node_id,
                        p.node_id, p.address, e)
            return
        try:
            if p.lock.acquire(timeout=1.0):
                try:
                    frames = self._frames(K_DATA, p.node_id, p.session, p.next_seq, meta, (), b"")
                    sock.send_multipart(frames, zmq.NOBLOCK)
                    p.next_seq += 1
                    self.stats["finish_to_lost"] += 1
                finally:
                    p.lock.release()
        except zmq.ZMQError:
            pass
        finally:
            sock.close()  # with LINGER: the message still goes out when the peer answers
        log.info("node %d: told node %d (declared %s) that the run finished", self.node_id, p.node_id,
                 "dead or gone" if not p.alive else "slow")

    def _end_run(self, why: str) -> None:
        """Finish this node's run (and tell every peer it knows): the local "__finish__" notice."""
        log.error("node %d: %s; finishing the run", self.node_id, why)
        self._spread_finish()
        self._notices.append((FINISH, ()))
        self._send_wake()

    def _owe_finish(self, p: Any) -> None:
        """``p`` connected (caller holds the state lock): after the finish, it is told on the next tick."""
        if self._finish_seen:
            if self._finish_owed is None:
                self._finish_owed = []
            self._finish_owed.append(p)

    def _check_peerless(self, now: float) -> None:
        """The heartbeat thread's check of the peerless bound (see the module docstring) and of peers that
        sign with another key (``keycheck``); it also tells the finish to peers that joined after it."""
        owed = self._finish_owed
        if owed:
            self._finish_owed = None
            meta = self._finish_frames_meta()
            for p in owed:
                if not self._send_to(p, K_DATA, meta, (), b"", FINISH, timeout=0.2):
                    self._send_finish_over_new_connection(p, meta)
        if self._finish_seen or self._ended_alone:
            self._alone_since = None
            return
        if self._key_error is None and self._check_keys(now):
            self._ended_alone = True
            self._end_run(self._key_error)
            return
        if self._n_alive():
            self._alone_since = None
            return
        if self._alone_since is None:
            if self._peers:  # every peer it had is gone
                self._alone_since = now
            elif self.expected_peers and now >= self._started_at + self.startup_timeout:
                self._alone_since = self._started_at + self.startup_timeout
            else:
                return
        alone = now - self._alone_since
        bound, why = self.peerless_timeout, "peerless_timeout"
        if bound < RESTART_PEERLESS_TIMEOUT and restarts_expected():
            bound, why = RESTART_PEERLESS_TIMEOUT, "waiting for the launcher's restart of a peer"
        if alone >= bound:
            self._ended_alone = True
            self._end_run(f"no peer for {alone:.1f} s (every peer is gone, or none ever came; {why}: "
                          f"{bound:.0f} s)")
