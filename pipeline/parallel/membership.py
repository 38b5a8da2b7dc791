"""How the entries of the peer table (``peers``) join, die, leave and come back: ``Membership``.

A new peer (made known by the handshake) produces ``"__peer_joined__"``; a peer the heartbeat thread
(``heartbeat``) declares dead produces ``"__peer_dead__", (node_id,), {}`` (and ``"__finish__"`` too when
``stop_on_peer_failure``); a peer that stops cleanly sends BYE (``"__peer_left__"``). These reach
``on_message`` as notices the reader delivers. A peer declared dead that sends again is reconnected
(``Membership.revive``).
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Dict, Optional

from ..runtime.node import node_is_quiet
from .peers import Peer
from .wire import _PREFIX, _MAGIC, _VERSION, K_DATA, PEER_DEAD, PEER_JOINED

if TYPE_CHECKING:
    import zmq

    from .connector import Connector
    from .ending import Ending
    from .node_state import NodeState
    from .peers import Notices, Peers
    from .wire import _Assemblies

log = logging.getLogger("rlpipe.parallel")


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
