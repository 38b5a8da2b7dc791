"""Anti-replay window for the bus: which sequence numbers of one sender incarnation were already accepted.

Every message carries the sender's incarnation (its random 63-bit session) and a per-pair sequence number
that starts at 1 and never restarts within the incarnation (a peer revived after being declared dead keeps
its numbers). The receiver keeps, per (sender, session), a sliding window as IPsec and DTLS do: the
highest number below which everything was accepted (``floor``) and a bitmap of the accepted numbers above
it (bit ``i`` of ``bits``: number ``floor + 1 + i``), so one sender incarnation costs the receiver at most
``WINDOW`` bits (8 KiB), however many messages were lost or reordered (a set of numbers would grow to
megabytes behind one lost message).
A number is accepted once; a copy of it, before or after the original, is refused. Messages may arrive out
of order (a replayed copy sent over another connection can overtake the genuine one still queued) without a
genuine message ever being refused, as long as it is less than ``WINDOW`` numbers behind the highest one
seen; a number that far behind is refused too, and the numbers never seen that the window slides past are
counted as gaps (messages lost on the way, e.g. in a dropped connection).
"""
from __future__ import annotations

import sys

WINDOW = 1 << 16

if sys.version_info >= (3, 10):
    _popcount = int.bit_count
else:  # Python 3.9 (setup.cfg allows it); only the rare slide past a gap counts bits
    def _popcount(x: int) -> int:
        return bin(x).count("1")


class ReplayWindow:
    __slots__ = ("floor", "top", "bits")

    def __init__(self) -> None:
        self.floor = 0  # every number <= floor was accepted (or skipped as lost)
        self.top = 0  # the highest number accepted
        self.bits = 0  # bit i set: number floor + 1 + i was accepted (out-of-order arrivals); never bit 0

    def accept(self, seq: int) -> int:
        """Record ``seq``. Returns -1 if it must be refused (seen before, or too old), else the number of
        never-seen messages the window slid past (0 almost always)."""
        floor = self.floor
        if seq == floor + 1 and not self.bits:  # in order: the common case
            self.floor = self.top = seq
            return 0
        if seq <= floor:
            return -1
        bits = self.bits
        lost = 0
        off = seq - floor - 1
        if off >= WINDOW:  # seq is more than WINDOW ahead: slide so that floor = seq - WINDOW; the numbers
            shift = off + 1 - WINDOW  # slid past that never arrived are lost (gaps)
            kept = bits >> shift
            lost = shift - (_popcount(bits) - _popcount(kept))
            bits = kept
            floor += shift
            off -= shift
        bit = 1 << off
        if bits & bit:
            return -1
        bits |= bit
        if seq > self.top:
            self.top = seq
        if bits & 1:  # the numbers right above floor arrived: slide floor over them
            run = (~bits & (bits + 1)).bit_length() - 1  # trailing one bits
            bits >>= run
            floor += run
        self.floor = floor
        self.bits = bits
        return lost
