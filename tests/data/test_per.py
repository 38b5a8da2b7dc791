"""Prioritized experience replay and its segment trees."""
import numpy as np
import pytest
import torch

from pipeline.data import DequeBuffer, PrioritizedSampler, use_time_check
from pipeline.data.segment_tree import SumMinTree

pytestmark = pytest.mark.usefixtures("kernel")


@pytest.mark.parametrize("cap", [1, 7, 32, 100, 5000, 140000])
def test_tree_matches_numpy(cap):
    rng = np.random.default_rng(cap)
    tree = SumMinTree(cap)
    ref = np.zeros(cap)
    for _ in range(5):
        idx = rng.integers(0, cap, size=min(cap, 50))
        vals = rng.random(len(idx)) * (rng.random(len(idx)) > 0.2)
        tree.set_many(idx, vals)
        ref[idx] = vals
        j = int(rng.integers(0, cap))
        tree.set(j, 0.5)
        ref[j] = 0.5
        assert tree.total == pytest.approx(ref.sum())
        assert tree.min == pytest.approx(ref[ref > 0].min())
        cum = np.cumsum(ref)
        u = rng.random(200) * cum[-1]
        expect = np.searchsorted(cum, u, side="right")
        got = tree.find_prefixsum(u)
        # equal except where u sits within rounding of a boundary
        assert (got == expect).mean() > 0.99
        assert (ref[got] > 0).all()


def test_tree_empty_and_clear():
    tree = SumMinTree(10)
    with pytest.raises(ValueError):
        tree.sample(1, np.random.default_rng(0))
    tree.set(3, 2.0)
    assert tree.sample(5, np.random.default_rng(0)).tolist() == [3] * 5
    tree.clear()
    assert tree.total == 0 and tree.min == np.inf
    with pytest.raises(ValueError):
        SumMinTree(0)


def make(n=4, size=None, **kw):
    buf = DequeBuffer(size or n, seed=1, sampler=PrioritizedSampler(**kw))
    return buf, buf.sampler


def test_per_sampling_frequencies_follow_priorities():
    buf, per = make(4, alpha=1.0)
    pri = [1.0, 2.0, 3.0, 4.0]
    for i, p in enumerate(pri):
        buf.push(i, meta={"priority": p})
    counts = np.zeros(4)
    n = 4000
    for _ in range(n // 4):
        for it in buf.sample(4, replace=True):
            counts[it.data] += 1
    freq = counts / counts.sum()
    assert np.allclose(freq, np.array(pri) / 10, atol=0.025), freq


def test_per_priority_power_factor_and_update():
    buf, per = make(2, alpha=0.5)
    a = buf.push("a", meta={"priority": 1.0})
    b = buf.push("b", meta={"priority": 1.0})
    assert buf.update(b.index, meta={"priority": 9.0})
    assert buf.get_by_index(b.index).meta["priority"] == 9.0
    hits = sum(it.data == "b" for _ in range(2000) for it in buf.sample(1))
    assert abs(hits / 2000 - 0.75) < 0.04  # sqrt(9) : sqrt(1) = 3 : 1
    with pytest.raises(ValueError, match="priority"):
        buf.update(a.index, meta={"priority": float("nan")})
    with pytest.raises(ValueError, match="priority"):
        buf.update(a.index, meta={"priority": -1})
    with pytest.raises(ValueError):
        buf.push("c", meta={"priority": "high"})


def test_per_is_weights():
    buf, per = make(3, alpha=1.0, beta=0.5)
    for p in (1.0, 2.0, 4.0):
        buf.push(p, meta={"priority": p})
    items = buf.sample(3)
    for it in items:
        assert it.meta["priority_IS"] == pytest.approx((it.data / 1.0) ** -0.5, rel=1e-5)
    assert max(it.meta["priority_IS"] for it in items) == pytest.approx(1.0)
    noweight, _ = make(3, is_weight=False)
    noweight.push({"x": 1})  # sample_batch batches dict items
    assert "priority_IS" not in noweight.sample(1)[0].meta
    assert noweight.sample_batch(1).get("weight") is None


def test_per_beta_anneals_to_one():
    buf, per = make(2, beta=0.4, anneal=10)
    buf.push(1, meta={"priority": 1.0})
    buf.push(2, meta={"priority": 2.0})
    assert per.beta == pytest.approx(0.4)
    for _ in range(5):
        buf.sample(1)
    assert per.beta == pytest.approx(0.7)
    for _ in range(20):
        buf.sample(1)
    assert per.beta == 1.0


def test_per_default_priority_is_max_seen():
    buf, per = make(4)
    buf.push(0, meta={"priority": 5.0})
    it = buf.push(1)
    assert it.meta["priority"] == 5.0
    buf.update_many([0], meta={"priority": [7.0]})
    assert buf.push(2).meta["priority"] == 7.0


def test_per_without_replacement_is_unique_even_when_skewed():
    buf, per = make(10)
    for i in range(10):
        buf.push(i, meta={"priority": 1e6 if i == 0 else 1e-3})
    for _ in range(20):
        got = [it.index for it in buf.sample(10)]
        assert sorted(got) == list(range(10))
        got = [it.index for it in buf.sample(5)]
        assert len(set(got)) == 5 and 0 in got
    with pytest.raises(ValueError):
        buf.sample(11)
    assert len(buf.sample(11, ignore_insufficient=True)) == 10


def test_per_tracks_deletes_evictions_clear_and_views():
    buf, per = make(3)
    for i in range(3):
        buf.push(i, meta={"priority": 1.0})
    buf.push(3, meta={"priority": 100.0})  # evicts index 0
    buf.delete(1)
    buf.view().delete(2)  # deleted through a view
    DequeBuffer(3, storage=buf.storage).push(4)  # and through a uniform buffer on the same storage
    DequeBuffer(3, storage=buf.storage).delete(4)
    for _ in range(20):
        assert [it.index for it in buf.sample(1)] == [3]
    assert per._tree.total == pytest.approx(100.0 ** 0.6)
    buf.clear()
    with pytest.raises(ValueError):
        buf.sample(1)
    buf.view().push("v")  # pushed through a view: gets the max priority
    assert buf.sample(1)[0].data == "v"


def test_per_sample_range_and_indices():
    buf, per = make(10, alpha=1.0)
    for i in range(10):
        buf.push(i, meta={"priority": float(i + 1)})
    for _ in range(10):
        got = buf.sample(3, sample_range=slice(-3, None))
        assert {it.index for it in got} == {7, 8, 9}
        assert all(it.index >= 7 for it in buf.sample(5, replace=True, sample_range=slice(-3, None)))
    got = buf.sample(indices=[0, 9])
    assert got[0].meta["priority_IS"] > got[1].meta["priority_IS"]
    with pytest.raises(ValueError, match="groupby"):
        buf.sample(1, groupby="x")


def test_per_sample_batch_weights_and_update_many():
    buf, per = make(64, alpha=1.0)
    for i in range(64):
        buf.push({"x": torch.tensor([float(i)])}, meta={"priority": 1.0})
    b = buf.sample_batch(16)
    assert b.get("weight").dtype == torch.float32 and b.get("weight").shape == (16,)
    assert torch.allclose(b.get("weight"), torch.ones(16))
    assert b["x"].squeeze(1).long().tolist() == b["indices"].tolist()
    ok = buf.update_many(b["indices"].tolist(), meta={"priority": np.full(16, 3.0)})
    assert ok == [True] * 16
    assert all(buf.get_by_index(i).meta["priority"] == 3.0 for i in b["indices"].tolist())
    assert per._tree.total == pytest.approx(16 * 3.0 + 48 * 1.0)
    assert buf.update_many([b["indices"].tolist()[0], 12345], meta=[{"priority": 2.0}, {"priority": 2.0}]) == [True, False]
    td = torch.full((16,), 0.5, requires_grad=True) * 2
    assert buf.update_many(b["indices"].tolist(), meta={"priority": td}) == [True] * 16
    assert buf.get_by_index(b["indices"].tolist()[3]).meta["priority"] == 1.0
    with pytest.raises(ValueError):
        buf.update_many(b["indices"].tolist()[:2], meta={"priority": [1.0, -2.0]})


def test_per_update_with_the_sampled_indices_tensor_writes_each_id_even_when_it_differs_from_the_draw():
    buf, per = make(32, alpha=1.0)
    for i in range(32):
        buf.push({"x": torch.tensor([float(i)])}, meta={"priority": 1.0})
    b = buf.sample_batch(8)
    idx = b["indices"]
    assert buf.update_many(idx, meta={"priority": np.full(8, 4.0)}) == [True] * 8  # the tensor as sampled
    assert [buf.get_by_index(i).meta["priority"] for i in idx.tolist()] == [4.0] * 8
    assert per._tree.total == pytest.approx(8 * 4.0 + 24 * 1.0)
    other = next(i for i in range(32) if i not in idx.tolist())
    changed = idx.clone()
    changed[0] = other  # not the last draw's ids any more: each id is looked up
    assert buf.update_priority(changed.numpy(), np.full(8, 2.0)) == [True] * 8
    assert buf.get_by_index(other).meta["priority"] == 2.0
    assert buf.get_by_index(idx[0].item()).meta["priority"] == 4.0
    b = buf.sample_batch(8)
    buf.push({"x": torch.tensor([99.0])}, meta={"priority": 1.0})  # evicts an item: the draw is stale
    gone = min(set(range(33)) - set(buf.indices()))  # FIFO: item 0 left
    ok = buf.update_many(b["indices"], meta={"priority": np.full(8, 5.0)})
    assert ok == [i != gone for i in b["indices"].tolist()]
    assert all(buf.get_by_index(i).meta["priority"] == 5.0 for i in b["indices"].tolist() if i != gone)


def test_per_state_dict_round_trip_and_save_load(tmp_path):
    buf, per = make(8)
    for i in range(8):
        buf.push({"x": i}, meta={"priority": float(i + 1)})
    for _ in range(3):
        buf.sample(2)
    state = per.state_dict()
    torch.save(state, tmp_path / "per.pt")
    state = torch.load(tmp_path / "per.pt", weights_only=True)
    buf.save_data(str(tmp_path / "buf.pt"))

    buf2, per2 = make(8)
    buf2.load_data(str(tmp_path / "buf.pt"))
    per2.load_state_dict(state)
    assert per2.sample_count == 3 and per2.max_priority == per.max_priority
    assert per2._tree.total == pytest.approx(per._tree.total)
    assert np.allclose(per2._tree.leaves, per._tree.leaves)
    assert buf2.indices() == buf.indices()
    with pytest.raises(ValueError):
        per2.load_state_dict({"max_priority": 1.0})


def test_per_with_use_time_check():
    buf = DequeBuffer(10, seed=0, sampler=PrioritizedSampler())
    per = buf.sampler
    buf.use(use_time_check(buf, max_use=1))
    for i in range(10):
        buf.push(i)
    seen = [it.index for _ in range(5) for it in buf.sample(2)]
    assert sorted(seen) == list(range(10)) and buf.count() == 0
    assert per._tree.total == 0


def test_per_needs_valid_args():
    with pytest.raises(ValueError):
        PrioritizedSampler(beta=2)


def test_per_update_many_after_eviction_does_not_touch_the_new_item():
    buf, per = make(4, alpha=1.0)
    for i in range(4):
        buf.push({"x": i}, meta={"priority": 1.0})
    b = buf.sample_batch(4)  # every item, including index 0
    newcomer = buf.push({"x": 99}, meta={"priority": 5.0})  # evicts index 0, reusing its slot
    ok = buf.update_many(b["indices"].tolist(), meta={"priority": np.full(4, 2.0)})
    assert ok == [i != 0 for i in b["indices"].tolist()]
    assert buf.get_by_index(newcomer.index).meta["priority"] == 5.0
    assert per._tree.total == pytest.approx(5.0 + 3 * 2.0)
    # and the fast path (nothing changed since the sample) writes every priority
    b = buf.sample_batch(4)
    assert buf.update_many(b["indices"].tolist(), meta={"priority": np.full(4, 3.0)}) == [True] * 4
    assert per._tree.total == pytest.approx(12.0)
    assert all(buf.get_by_index(i).meta["priority"] == 3.0 for i in b["indices"].tolist())


def test_update_many_priorities_reach_meta_on_every_read_path(tmp_path):
    buf, per = make(6, alpha=1.0)
    for i in range(6):
        buf.push({"x": i}, meta={"priority": 1.0, "g": i % 2})
    b = buf.sample_batch(6)
    buf.update_many(b["indices"].tolist(), meta={"priority": np.arange(6, dtype=np.float64) + 10})
    want = {i: 10.0 + k for k, i in enumerate(b["indices"].tolist())}
    assert all(per.priority(i) == want[i] for i in want)
    assert per.priority(12345) is None
    i0, i1, i2, i3 = b["indices"].tolist()[:4]
    assert buf.get_by_index(i0).meta["priority"] == want[i0]
    assert buf.get(buf.indices().index(i1)).meta["priority"] == want[i1]
    assert buf.sample(indices=[i2])[0].meta["priority"] == want[i2]
    groups = DequeBuffer(6, storage=buf.storage).sample(groupby="g")  # uniform, on the same storage
    assert all(it.meta["priority"] == want[it.index] for g in groups for it in g)
    buf.update_many(b["indices"].tolist(), meta={"priority": np.full(6, 7.0)})
    buf.save_data(str(tmp_path / "b.pt"))
    other, per2 = make(6)
    other.load_data(str(tmp_path / "b.pt"))
    assert all(other.get_by_index(i).meta["priority"] == 7.0 for i in b["indices"].tolist())
    assert all(per2.priority(i) == 7.0 for i in b["indices"].tolist())
    assert per.state_dict()["priorities"] == [7.0] * 6
