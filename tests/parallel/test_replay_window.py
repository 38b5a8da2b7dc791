"""The bus's anti-replay window (``pipeline.parallel.replay``): exactly-once acceptance under reordering,
gaps counted, and memory bounded however many messages were lost."""
import random

from pipeline.parallel.replay import WINDOW, ReplayWindow


class _Reference:
    """The window's specification, written plainly: every number accepted once; a number at or below
    ``max seen - WINDOW`` is refused; numbers never seen that fall below that line are counted as lost."""

    def __init__(self) -> None:
        self.seen: set = set()
        self.line = 0  # everything <= line is settled (accepted or lost)

    def accept(self, seq: int) -> int:
        if seq <= self.line or seq in self.seen:
            return -1
        self.seen.add(seq)
        lost = 0
        new_line = max(self.line, seq - WINDOW)
        if new_line > self.line:
            lost = sum(1 for s in range(self.line + 1, new_line + 1) if s not in self.seen)
            self.line = new_line
        return lost


def _check_against_reference(seqs):
    w, ref = ReplayWindow(), _Reference()
    for s in seqs:
        assert w.accept(s) == ref.accept(s), f"number {s}"


def test_in_order_and_duplicates():
    w = ReplayWindow()
    assert [w.accept(s) for s in (1, 2, 3)] == [0, 0, 0]
    assert w.accept(2) == -1 and w.accept(3) == -1 and w.accept(0) == -1
    assert (w.floor, w.top, w.bits) == (3, 3, 0)


def test_a_copy_that_overtakes_the_original_is_refused_and_nothing_genuine_is_lost():
    w = ReplayWindow()
    assert w.accept(5) == 0  # a replayed copy of #5 arrives first, over another connection
    assert [w.accept(s) for s in (1, 2, 3, 4)] == [0, 0, 0, 0]  # the genuine earlier messages all pass
    assert w.accept(5) == -1  # the genuine #5: already accepted once
    assert (w.floor, w.bits) == (5, 0)


def test_random_reordering_with_copies_matches_the_reference():
    rng = random.Random(7)
    for trial in range(30):
        n = rng.choice([50, 500, 3000])
        seqs = list(range(1, n + 1))
        for _ in range(n // 5):  # local swaps (reordering) and copies (replays)
            i = rng.randrange(n)
            j = min(n - 1, i + rng.randrange(1, 40))
            seqs[i], seqs[j] = seqs[j], seqs[i]
        seqs += rng.sample(range(1, n + 1), n // 10)
        rng.shuffle(seqs[-(n // 10):])
        _check_against_reference(seqs)


def test_gaps_are_counted_once_the_window_slides_past_them():
    w = ReplayWindow()
    assert w.accept(1) == 0
    # #2 is lost on the way; everything after it arrives
    lost = [w.accept(s) for s in range(3, WINDOW + 4)]
    assert sum(lost) == 1 and -1 not in lost
    assert w.accept(2) == -1  # far too late now


def test_memory_stays_bounded_behind_a_lost_message():
    """A set of out-of-order numbers would hold 65,536 ints (megabytes) behind one lost message; the bitmap
    never holds more than WINDOW bits."""
    w = ReplayWindow()
    for s in range(2, 3 * WINDOW):  # #1 never arrives
        assert w.accept(s) >= 0
        assert w.bits.bit_length() <= WINDOW
    assert w.floor >= 2 * WINDOW - 1


def test_a_jump_far_ahead_slides_the_window_without_allocating_the_gap():
    w = ReplayWindow()
    assert w.accept(1) == 0 and w.accept(3) == 0
    far = 10 ** 15
    lost = w.accept(far)  # an authenticated sender with a broken counter must not make us allocate 1e15 bits
    assert lost == far - WINDOW - 2  # every number between 3 and far - WINDOW except #3
    assert w.bits.bit_length() <= WINDOW and w.top == far
    assert w.accept(far) == -1 and w.accept(far - 1) == 0
    assert w.accept(far - WINDOW) == -1
