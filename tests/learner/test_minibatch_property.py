"""Property test: for random rows / minibatch size / epochs the update count and row coverage hold."""
from __future__ import annotations

import math
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from learner_helpers import RecordingLearner, index_batch, two_modules
from pipeline.learner import MetricsLogger


@settings(max_examples=40, deadline=None)
@given(
    rows=st.integers(1, 23),
    small=st.integers(1, 23),
    m=st.integers(1, 9),
    epochs=st.integers(1, 4),
    shuffle=st.booleans(),
)
def test_update_count_and_row_coverage(rows, small, m, epochs, shuffle):
    lrn = RecordingLearner(two_modules(), seed=1)
    res = lrn.update(
        {"p": index_batch(rows), "q": index_batch(small)},
        minibatch_size=m,
        num_epochs=epochs,
        shuffle_batch_per_epoch=shuffle,
    )
    largest = max(rows, small)
    updates = math.ceil(epochs * largest / m)
    assert MetricsLogger.peek_results(res)["__all_modules__"]["num_minibatch_updates"] == updates
    for mid, n in (("p", rows), ("q", small)):
        seen = lrn.seen[mid]
        assert len(seen) == updates and all(len(mb) == m for mb in seen)
        counts = Counter(i for mb in seen for i in mb)
        assert set(counts) <= set(range(n))
        # every row is used at least floor(updates * m / n) times (>= epochs for the largest module)
        assert min(counts.get(i, 0) for i in range(n)) >= (updates * m) // n
        if n == largest:
            assert min(counts.values()) >= epochs
        if not shuffle:
            flat = [i for mb in seen for i in mb]
            assert flat == [k % n for k in range(updates * m)]
