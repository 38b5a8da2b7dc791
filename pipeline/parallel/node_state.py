"""What the parts of one ``ZmqRouter`` share about the node itself: ``NodeState``."""
from __future__ import annotations

import logging
import threading
from typing import Dict, Iterable, Optional, Set

log = logging.getLogger("rlpipe.parallel")

# The router's counters (``ZmqRouter.stats``), in the order they are listed.
STATS = ("sent", "received", "auth_failed", "malformed", "duplicates", "misrouted", "undeliverable", "gaps",
         "stale_hello", "oversize", "control_sent", "control_received", "finish_to_lost", "refused_connections",
         "cut_connections", "closed_connections", "unfinished", "unjoined", "assembly_full", "stalled")


class NodeState:
    """This node as every part of its router sees it. Each field has one writer:

    * ``node_id``, ``session`` (this incarnation), ``address`` (the one announced to peers, known after
      ``start``), ``labels`` and ``roles`` (announced in HELLO and ACK): the router, whose attributes of
      those names are these;
    * ``stats``: the counters (``ZmqRouter.stats``); each part counts what happens to it;
    * ``started``, ``started_at`` (monotonic: construction, then ``start``), ``stopped`` (``stop`` began) and
      ``stopping`` (set once ``stop`` said goodbye: every loop and wait ends): the router;
    * ``finish_seen``: ``ending``, once "__finish__" was sent or received (from then on no send waits for
      backpressure).

    ``drop`` counts a dropped message and logs it (the first 5 of each counter, then every 1000th).
    """

    def __init__(self, node_id: int, session: int, labels: Iterable[str] = (), roles: Iterable[str] = ()) -> None:
        self.node_id = node_id
        self.session = session
        self.address: Optional[str] = None
        self.labels: Set[str] = set(labels)
        self.roles: Set[str] = set(roles)
        self.stats: Dict[str, int] = dict.fromkeys(STATS, 0)
        self.started = False
        self.started_at = 0.0
        self.stopped = False
        self.stopping = threading.Event()
        self.finish_seen = False

    def drop(self, counter: str, why: str) -> None:
        self.stats[counter] += 1
        n = self.stats[counter]
        if n <= 5 or n % 1000 == 0:
            log.warning("node %d: dropped a message (%s): %s [%d so far]", self.node_id, counter, why, n)
