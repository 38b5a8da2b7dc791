"""The peer table of ``ZmqRouter``: ``Peer`` (one entry), ``Peers`` (the table and the state lock) and
``Notices`` (the joined, dead and left peers and the local finish the reader delivers to ``on_message``).

State only: this module imports nothing of the bus. How entries join, die, leave and come back is
``membership``; the heartbeat thread that declares silent peers dead is ``heartbeat``.
"""
from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Deque, Dict, Iterable, List, Optional, Tuple

if TYPE_CHECKING:
    import zmq


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
