"""How a run ends on every node (``Ending``, a part of ``ZmqRouter``).

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
from typing import TYPE_CHECKING, List, Optional

import zmq

from . import codec
from ..runtime.node import RESTART_PEERLESS_TIMEOUT, restarts_expected
from .wire import FINISH, K_DATA

if TYPE_CHECKING:
    from .connector import Connector
    from .keycheck import KeyCheck
    from .node_state import NodeState
    from .peers import Notices, Peer, Peers
    from .sending import Sender
    from .waker import Waker
    from .wire import Framer

log = logging.getLogger("rlpipe.parallel")


class Ending:
    """Finish propagation and the peerless bound (see the module docstring). Owns the encoded "__finish__"
    (``_finish_meta``), the peers owed the finish (``_finish_owed``: they joined after it), since when this
    node has had no peer (``_alone_since``) and whether it ended its run for that or for a key mismatch
    (``_ended_alone``); sets ``node.finish_seen``. Sends through ``sender`` (or a fresh connection of
    ``connector``), queues the local "__finish__" notice and wakes the reader (``notices``, ``waker``), and
    asks ``keys`` whether a peer signs with another key."""

    def __init__(self, node: NodeState, peers: Peers, sender: Sender, framer: Framer, connector: Connector,
                 keys: KeyCheck, notices: Notices, waker: Waker, peerless_timeout: float, expected_peers: int,
                 startup_timeout: float) -> None:
        self._node, self._peers, self._keys = node, peers, keys
        self._sender, self._framer, self._connector = sender, framer, connector
        self._notices, self._waker = notices, waker
        self.peerless_timeout = peerless_timeout
        self.expected_peers, self.startup_timeout = expected_peers, startup_timeout
        self._finish_meta: Optional[bytes] = None
        self._alone_since: Optional[float] = None
        self._ended_alone = False
        self._finish_owed: Optional[List[Peer]] = None  # peers that connected after the finish

    def _finish_frames_meta(self) -> bytes:
        if self._finish_meta is None:
            self._finish_meta = codec.encode_event(FINISH, (), {})[0]
        return self._finish_meta

    def spread_finish(self, came_from: Optional[int] = None, alive_told: bool = False) -> None:
        """Called once per node, when "__finish__" is first emitted here or received: pass it on to every
        known peer but ``came_from`` (alive ones on their connection, the others over a fresh one).
        ``alive_told``: ``emit`` sent it to the alive peers already."""
        node = self._node
        if node.finish_seen:
            return
        node.finish_seen = True  # from now on no send waits for backpressure
        meta = self._finish_frames_meta()
        with self._peers.lock:
            peers = [p for p in self._peers.values() if p.node_id != came_from and not (alive_told and p.alive)]
        for p in peers:
            alive = p.alive
            if p.sock is not None and self._sender.send_to(p, K_DATA, meta, (), b"", FINISH, timeout=0.2,
                                                           to_dead=True):
                if not alive:
                    node.stats["finish_to_lost"] += 1
            elif alive or p.dead_since:  # not for a peer that said goodbye: it is gone
                self._send_finish_over_new_connection(p, meta)

    def _send_finish_over_new_connection(self, p: Peer, meta: bytes) -> None:
        """A peer we consider dead may only be paused or slow: give it "__finish__" anyway (best effort, queued
        until it accepts the connection, for at most ``linger`` s after this router stops)."""
        node = self._node
        if self._connector.ctx is None or not p.address:
            return
        try:
            sock = self._connector.push_once(p.address)
        except zmq.ZMQError as e:
            log.warning("node %d: cannot reach node %d at %s to tell it the run finished: %s", node.node_id,
                        p.node_id, p.address, e)
            return
        try:
            if p.lock.acquire(timeout=1.0):
                try:
                    frames = self._framer.frames(K_DATA, p.node_id, p.session, p.next_seq, meta, (), b"")
                    sock.send_multipart(frames, zmq.NOBLOCK)
                    p.next_seq += 1
                    node.stats["finish_to_lost"] += 1
                finally:
                    p.lock.release()
        except zmq.ZMQError:
            pass
        finally:
            sock.close()  # with LINGER: the message still goes out when the peer answers
        log.info("node %d: told node %d (declared %s) that the run finished", node.node_id, p.node_id,
                 "dead or gone" if not p.alive else "slow")

    def end_run(self, why: str) -> None:
        """Finish this node's run (and tell every peer it knows): the local "__finish__" notice."""
        log.error("node %d: %s; finishing the run", self._node.node_id, why)
        self.spread_finish()
        self._notices.append((FINISH, ()))
        self._waker.send()

    def owe_finish(self, p: Peer) -> None:
        """``p`` connected (caller holds the state lock): after the finish, it is told on the next tick."""
        if self._node.finish_seen:
            if self._finish_owed is None:
                self._finish_owed = []
            self._finish_owed.append(p)

    def check_peerless(self, now: float) -> None:
        """The heartbeat thread's check of the peerless bound (see the module docstring) and of peers that
        sign with another key (``keycheck``); it also tells the finish to peers that joined after it."""
        owed = self._finish_owed
        if owed:
            self._finish_owed = None
            meta = self._finish_frames_meta()
            for p in owed:
                if not self._sender.send_to(p, K_DATA, meta, (), b"", FINISH, timeout=0.2):
                    self._send_finish_over_new_connection(p, meta)
        if self._node.finish_seen or self._ended_alone:
            self._alone_since = None
            return
        if self._keys.error is None:
            mismatch = self._keys.check(now)
            if mismatch:
                self._ended_alone = True
                self.end_run(mismatch)
                return
        if self._peers.n_alive():
            self._alone_since = None
            return
        if self._alone_since is None:
            started_at = self._node.started_at
            if self._peers:  # every peer it had is gone
                self._alone_since = now
            elif self.expected_peers and now >= started_at + self.startup_timeout:
                self._alone_since = started_at + self.startup_timeout
            else:
                return
        alone = now - self._alone_since
        bound, why = self.peerless_timeout, "peerless_timeout"
        if bound < RESTART_PEERLESS_TIMEOUT and restarts_expected():
            bound, why = RESTART_PEERLESS_TIMEOUT, "waiting for the launcher's restart of a peer"
        if alone >= bound:
            self._ended_alone = True
            self.end_run(f"no peer for {alone:.1f} s (every peer is gone, or none ever came; {why}: "
                         f"{bound:.0f} s)")
