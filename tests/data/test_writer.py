"""The buffer's writer part (pipeline/data/writer.py): which item a push evicts, or whether it is kept."""
import copy

import numpy as np
import pytest
import torch

from pipeline.data import DROP, FREE, DequeBuffer, FifoWriter, PrioritizedSampler, SlotStorage, Writer
from pipeline.data.frame_storage import FrameStorage


class ReservoirWriter:
    """Reservoir sampling (Vitter's algorithm R), as a user would write it: the buffer holds a uniform
    sample of everything ever pushed. While there is room every push is kept; then push number ``n``
    replaces a uniformly random stored item with probability ``size / n`` and is dropped otherwise."""

    def __init__(self, seed=0):
        self.storage = None
        self.seen = 0
        self.rng = np.random.default_rng(seed)

    def attach(self, storage):
        self.storage = storage

    def push_slot(self):
        s = self.storage
        self.seen += 1
        if s.count < s.size:
            return FREE
        j = int(self.rng.integers(self.seen))
        return int(s.dense[j]) if j < s.size else DROP  # dense[:count]: the occupied slots

    def state_dict(self):
        return {"seen": self.seen}

    def load_state_dict(self, state):
        self.seen = int(state["seen"])


class KeepFirstWriter:
    """Keep the first ``size`` items pushed (a fixed evaluation set); later pushes are dropped."""

    def __init__(self):
        self.storage = None

    def attach(self, storage):
        self.storage = storage

    def push_slot(self):
        s = self.storage
        return FREE if s.count < s.size else DROP

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def tr(i):
    return {"obs": torch.full((3,), float(i)), "action": torch.tensor(i % 2), "reward": torch.tensor(float(i))}


def test_the_default_writer_is_fifo_and_views_and_copies_share_or_own_it():
    buf = DequeBuffer(3)
    assert isinstance(buf.writer, FifoWriter) and isinstance(buf.writer, Writer)
    assert buf.view().writer is buf.writer and "FifoWriter()" in repr(buf)
    for i in range(5):
        buf.push(i)
    assert buf.indices() == [2, 3, 4]
    buf.delete(3)  # an interior delete: the oldest is still the next to leave
    buf.push(5)
    buf.push(6)
    assert buf.indices() == [4, 5, 6]
    c = copy.deepcopy(buf)
    assert c.writer is not buf.writer and c.writer.storage is c.storage
    c.push(7)
    assert c.indices() == [5, 6, 7] and buf.indices() == [4, 5, 6]


def test_keep_first_writer_drops_later_pushes_and_reports_them_by_index():
    buf = DequeBuffer(4, writer=KeepFirstWriter())
    got = [buf.push(tr(i), meta={"i": i}) for i in range(7)]
    assert buf.indices() == [0, 1, 2, 3]
    # a dropped push: a new index, not stored, as if pushed and evicted at once
    assert [it.index for it in got] == list(range(7))
    assert [it.index in buf for it in got] == [True] * 4 + [False] * 3
    assert buf.get_by_index(5) is None and got[5].data["obs"][0] == 5.0 and got[5].meta == {"i": 5}
    b = buf.sample_batch(4)
    assert sorted(b["indices"].tolist()) == [0, 1, 2, 3] and sorted(b["reward"].tolist()) == [0.0, 1.0, 2.0, 3.0]
    buf.delete(1)
    assert buf.push(tr(9)).index in buf  # room again: kept
    assert buf.indices() == [0, 2, 3, 7]


def test_reservoir_writer_keeps_a_uniform_sample_of_all_pushes_with_uniform_sampling():
    buf = DequeBuffer(50, writer=ReservoirWriter(seed=1), seed=0)
    kept = sum(buf.push(tr(i)).index in buf for i in range(2000))
    ids = buf.indices()
    assert buf.count() == 50 and len(set(ids)) == 50 and kept > 50
    # FIFO would hold 1950..1999 (mean 1974.5); a uniform sample of 0..1999 has mean ~1000 (sd ~80)
    assert 600 < np.mean(ids) < 1400 and min(ids) < 1000
    # push order of the survivors is kept (a replaced item's successor is the newest)
    assert ids[-1] == max(ids)
    for _ in range(20):
        b = buf.sample_batch(16)
        assert all(i in buf for i in b["indices"].tolist())
        assert b["reward"].tolist() == [float(i) for i in b["indices"].tolist()]  # rows hold the right items
    items = buf.sample(50)
    assert sorted(it.index for it in items) == sorted(ids)


def _check_tree(buf, per):
    """Every occupied slot's leaf is max(p, floor) ** alpha of its item's priority; every other leaf is 0."""
    s = buf.storage
    leaves = per._tree.leaves.copy()
    occupied = s.dense[: s.count]
    expect = np.zeros(s.size)
    for slot in occupied.tolist():
        expect[slot] = max(per.priority(int(s.slot_id[slot])), per._FLOOR) ** per.alpha
    np.testing.assert_allclose(leaves, expect, rtol=1e-12)
    assert per._tree.total == pytest.approx(expect.sum(), rel=1e-9)
    assert per._tree.min == pytest.approx(expect[expect > 0].min(), rel=1e-12)


@pytest.mark.parametrize("writer", [ReservoirWriter, KeepFirstWriter])
def test_evictions_and_drops_leave_the_priority_tree_right(writer):
    per = PrioritizedSampler(alpha=0.7, beta=0.5)
    buf = DequeBuffer(32, writer=writer(), sampler=per, seed=0)
    rng = np.random.default_rng(0)
    for i in range(400):
        buf.push(tr(i), meta={"priority": float(1 + i % 13)})
        if i % 50 == 49:
            buf.delete(buf.indices()[::5])  # free slots inside the buffer
            _check_tree(buf, per)
        if i % 7 == 0 and buf.count() >= 8:
            b = buf.sample_batch(8)
            assert all(i in buf for i in b["indices"].tolist())
            assert b["reward"].tolist() == [float(i) for i in b["indices"].tolist()]
            # the weights follow the stored priorities: (leaf / smallest stored leaf) ** -beta (the draw's beta)
            leaf = np.array([max(per.priority(i), per._FLOOR) ** per.alpha for i in b["indices"].tolist()])
            mn, beta = per._wargs
            assert mn == per._tree.min
            np.testing.assert_allclose(b["weight"].numpy(), (leaf / mn) ** -beta, rtol=1e-5)
            buf.update_priority(b["indices"].tolist(), rng.random(8) * 5 + 0.1)
    _check_tree(buf, per)


def test_save_and_load_keep_the_writers_state_items_and_priorities(tmp_path):
    per = PrioritizedSampler()
    buf = DequeBuffer(20, writer=ReservoirWriter(seed=3), sampler=per, seed=0)
    for i in range(300):
        buf.push(tr(i), meta={"priority": float(i % 7 + 1)})
    path = str(tmp_path / "buf.pt")
    buf.save_data(path)
    assert torch.load(path, weights_only=True)["middleware"]["writer:ReservoirWriter"] == {"seen": 300}

    w2, per2 = ReservoirWriter(seed=3), PrioritizedSampler()
    other = DequeBuffer(20, writer=w2, sampler=per2, seed=0)
    other.load_data(path)
    assert w2.seen == 300 and other.writer is w2
    assert other.indices() == buf.indices()
    assert [per2.priority(i) for i in other.indices()] == [per.priority(i) for i in buf.indices()]
    _check_tree(other, per2)
    # the loaded buffer goes on with its writer: the next push is number 301 of the reservoir (same keep/drop
    # decisions as the saved buffer's; which stored item a kept push replaces depends on the slot layout)
    w2.rng, buf.writer.rng = np.random.default_rng(9), np.random.default_rng(9)
    kept = [(buf.push(tr(i)).index in buf, other.push(tr(i)).index in other) for i in range(300, 340)]
    assert all(a == b for a, b in kept) and 0 < sum(a for a, _ in kept) < 40
    assert other.count() == 20 and w2.seen == 340
    _check_tree(other, per2)


def test_a_frame_storage_drops_a_push_without_keeping_its_frames():
    st = FrameStorage(3, pixel_keys=("obs",))
    buf = DequeBuffer(3, storage=st, writer=KeepFirstWriter())
    frames = [np.full((2, 4, 4), i, dtype=np.uint8) for i in range(6)]
    for i in range(3):
        buf.push({"obs": frames[i], "r": float(i)})
    live = st.frame_pool.live
    it = buf.push({"obs": frames[5], "r": 5.0})
    assert it.index not in buf and st.frame_pool.live == live
    assert type(it.data["obs"]) is np.ndarray and (it.data["obs"] == 5).all()
    assert buf.sample_batch(3)["obs"].shape == (3, 2, 4, 4)


def test_a_writer_that_breaks_the_rules_gets_a_clear_error():
    class Full(KeepFirstWriter):
        def push_slot(self):
            return FREE

    buf = DequeBuffer(2, writer=Full())
    buf.push(0)
    buf.push(1)
    with pytest.raises(ValueError, match="returned FREE but the storage is full"):
        buf.push(2)

    class Bad(KeepFirstWriter):
        def push_slot(self):
            return 1  # a slot that holds nothing yet

    buf = DequeBuffer(2, writer=Bad())
    with pytest.raises(ValueError, match=r"returned 1: expected FREE \(-1\), DROP \(-2\) or an occupied slot"):
        buf.push(0)
    assert buf.count() == 0
    with pytest.raises(TypeError, match="writer must be a Writer"):
        DequeBuffer(2, writer=object())
    w = FifoWriter()
    DequeBuffer(2, writer=w)
    with pytest.raises(ValueError, match="already used by another buffer's storage"):
        DequeBuffer(2, writer=w)


def test_a_storage_given_to_the_buffer_keeps_its_writer_unless_one_is_given():
    st = SlotStorage(4, None, 0)
    w = KeepFirstWriter()
    DequeBuffer(4, storage=st, writer=w)
    assert DequeBuffer(4, storage=st).writer is w
    assert DROP == -2 and FREE == -1
