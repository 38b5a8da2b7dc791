"""Anti-replay window for the bus: which sequence numbers of one sender incarnation were already accepted.

Every message carries the sender's incarnation (its random 63-bit session) and a per-pair sequence number
that starts at 1 and never restarts within the incarnation (a peer revived after being declared dead keeps
its numbers). The receiver keeps, per (sender, session), a sliding window as IPsec and DTLS do: the
highest number below which everything was accepted (``floor``) and the set of accepted numbers above it.
A number is accepted once; a copy of it, before or after the original, is refused. Messages may arrive out
of order (a replayed copy sent over another connection can overtake the genuine one still queued) without a
genuine message ever being refused, as long as it is less than ``WINDOW`` numbers behind the highest one
seen; a number that far behind is refused too, and the numbers never seen that the window slides past are
counted as gaps (messages lost on the way, e.g. in a dropped connection).
"""
from __future__ import annotations

from typing import Set

WINDOW = 1 << 16


class ReplayWindow:
    __slots__ = ("floor", "top", "above")

    def __init__(self) -> None:
        self.floor = 0  # every number <= floor was accepted (or skipped as lost)
        self.top = 0  # the highest number accepted
        self.above: Set[int] = set()  # accepted numbers above floor (out-of-order arrivals)

    def accept(self, seq: int) -> int:
        """Record ``seq``. Returns -1 if it must be refused (seen before, or too old), else the number of
        never-seen messages the window slid past (0 almost always)."""
        if seq == self.floor + 1 and not self.above:  # in order: the common case
            self.floor = self.top = seq
            return 0
        if seq <= self.floor or seq in self.above:
            return -1
        above = self.above
        above.add(seq)
        if seq > self.top:
            self.top = seq
        floor = self.floor
        lost = 0
        if self.top - floor > WINDOW:  # a gap older than the window: those messages are not coming
            new_floor = self.top - WINDOW
            kept = {s for s in above if s > new_floor}
            lost = (new_floor - floor) - (len(above) - len(kept))
            above.intersection_update(kept)
            floor = new_floor
        while floor + 1 in above:
            floor += 1
            above.discard(floor)
        self.floor = floor
        return lost
