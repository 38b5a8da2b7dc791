"""Core DequeBuffer operations and their error cases."""
import numpy as np
import pytest
import torch

from pipeline.data import BufferedData, DequeBuffer


def filled(n=10, size=None, **kw):
    buf = DequeBuffer(size or n, seed=0, **kw)
    for i in range(n):
        buf.push({"x": i}, meta={"env": i % 3})
    return buf


def test_push_returns_item_with_unique_stable_index():
    buf = DequeBuffer(5)
    items = [buf.push(i) for i in range(5)]
    assert [it.index for it in items] == [0, 1, 2, 3, 4]
    assert all(isinstance(it, BufferedData) for it in items)
    assert buf.count() == len(buf) == 5


def test_push_copies_meta_and_rejects_non_dict_meta():
    buf = DequeBuffer(3)
    meta = {"a": 1}
    item = buf.push("x", meta)
    meta["a"] = 2
    assert item.meta == {"a": 1}
    with pytest.raises(TypeError, match="meta"):
        buf.push("y", meta=[1, 2])


def test_fifo_eviction_and_get_offsets():
    buf = DequeBuffer(3)
    for i in range(5):
        buf.push(i)
    assert buf.count() == 3
    assert [buf.get(k).data for k in range(3)] == [2, 3, 4]
    assert buf.get(-1).data == 4
    assert buf.indices() == [2, 3, 4]
    with pytest.raises(IndexError):
        buf.get(3)
    with pytest.raises(TypeError):
        buf.get("0")


def test_sample_without_replacement_never_repeats_and_raises_when_short():
    buf = filled(10)
    for _ in range(50):
        got = [it.index for it in buf.sample(10)]
        assert sorted(got) == list(range(10))
    with pytest.raises(ValueError, match="ignore_insufficient"):
        buf.sample(11)
    assert len(buf.sample(11, ignore_insufficient=True)) == 10
    assert len(buf.sample(25, replace=True)) == 25


def test_sample_empty_and_bad_arguments():
    buf = DequeBuffer(4)
    with pytest.raises(ValueError):
        buf.sample(1)
    assert buf.sample(1, ignore_insufficient=True) == []
    assert buf.sample(3, replace=True, ignore_insufficient=True) == []
    buf.push(1)
    with pytest.raises(ValueError, match="size"):
        buf.sample()
    with pytest.raises(ValueError):
        buf.sample(-1)
    with pytest.raises(TypeError, match="unexpected keyword"):
        buf.sample(1, train_iter_sample_data=3)
    with pytest.raises(TypeError, match="slice"):
        buf.sample(1, sample_range=(0, 1))
    with pytest.raises(ValueError, match="groupby"):
        buf.sample(1, unroll_len=2)
    with pytest.raises(ValueError):
        DequeBuffer(0)


def test_sample_by_indices():
    buf = filled(6)
    got = buf.sample(indices=[4, 1, 4])
    assert [it.index for it in got] == [4, 1, 4]
    assert [it.data["x"] for it in got] == [4, 1, 4]
    with pytest.raises(KeyError, match="99"):
        buf.sample(indices=[1, 99])
    assert [it.index for it in buf.sample(indices=[1, 99], ignore_insufficient=True)] == [1]
    assert [it.index for it in buf.sample(indices=np.array([2, 3]))] == [2, 3]
    with pytest.raises(TypeError):
        buf.sample(indices=3)


def test_sample_range_restricts_to_slice_of_push_order():
    buf = filled(20)
    for _ in range(20):
        got = {it.index for it in buf.sample(5, sample_range=slice(-5, None))}
        assert got == {15, 16, 17, 18, 19}
    got = {it.index for it in buf.sample(3, sample_range=slice(0, 3))}
    assert got == {0, 1, 2}
    with pytest.raises(ValueError, match="sample_range"):
        buf.sample(6, sample_range=slice(0, 5))


def test_update_data_and_merge_meta():
    buf = filled(4)
    assert buf.update(2, data={"x": 20}, meta={"priority": 3.0})
    it = buf.sample(indices=[2])[0]
    assert it.data == {"x": 20}
    assert it.meta == {"env": 2, "priority": 3.0}
    assert buf.update(2, meta={"env": 0})
    assert buf.get_by_index(2).meta["env"] == 0
    assert buf.update(99, meta={"a": 1}) is False
    with pytest.raises(TypeError):
        buf.update(1, meta=5)


def test_delete_keeps_every_survivor_addressable():
    # DI-engine's defect: after deleting one of six items most survivors lost their index
    buf = filled(6)
    assert buf.delete(2) == 1
    for i in [0, 1, 3, 4, 5]:
        assert buf.update(i, meta={"touched": True}), i
        assert buf.get_by_index(i).meta["touched"]
    assert buf.indices() == [0, 1, 3, 4, 5]
    assert buf.delete([0, 5, 42]) == 2
    assert buf.indices() == [1, 3, 4]
    assert 3 in buf and 0 not in buf
    assert sorted(it.index for it in buf.sample(3)) == [1, 3, 4]
    assert buf.delete(np.array([1])) == 1


def test_delete_then_wraparound_refills_to_capacity():
    buf = filled(5)
    buf.delete([1, 3])
    for i in range(5, 9):
        buf.push({"x": i})
    # 3 survivors + 4 new, capacity 5: the two oldest survivors were evicted
    assert buf.count() == 5
    assert buf.indices() == [4, 5, 6, 7, 8]
    assert [buf.get(k).index for k in range(5)] == [4, 5, 6, 7, 8]


def test_clear():
    buf = filled(5)
    buf.clear()
    assert buf.count() == 0
    assert buf.indices() == []
    item = buf.push("again")
    assert item.index == 5  # indices are never reused
    assert buf.get(0).data == "again"


def test_view_shares_storage_but_not_middleware():
    buf = filled(5)
    calls = []

    def spy(action, chain, *args, **kwargs):
        calls.append(action)
        return chain(*args, **kwargs)

    v = buf.view()
    v.use(spy)
    assert v.count() == 5
    v.push({"x": 9})
    assert buf.count() == 5 and buf.get(-1).data == {"x": 9}
    buf.sample(1)
    assert calls == ["push"]
    assert v.middleware == [spy] and buf.middleware == []


def test_use_rejects_non_callable_and_runs_in_order():
    buf = DequeBuffer(4)
    order = []

    def mk(name):
        def mw(action, chain, *args, **kwargs):
            order.append(name)
            return chain(*args, **kwargs)
        return mw

    assert buf.use(mk("a")).use(mk("b")) is buf
    buf.push(1)
    assert order == ["a", "b"]
    with pytest.raises(TypeError):
        buf.use(3)


def test_groupby_and_unroll_len_return_contiguous_runs_of_one_group():
    buf = DequeBuffer(100, seed=3)
    for i in range(60):
        buf.push(i, meta={"env": i % 4})
    buf.delete([9, 13])  # interior deletes inside env 1
    for _ in range(30):
        groups = buf.sample(3, groupby="env", unroll_len=5)
        assert len(groups) == 3
        envs = [g[0].meta["env"] for g in groups]
        assert len(set(envs)) == 3  # without replacement: distinct groups
        for g in groups:
            assert len(g) == 5
            assert len({it.meta["env"] for it in g}) == 1
            live = [i for i in range(60) if i % 4 == g[0].meta["env"] and i not in (9, 13)]
            pos = live.index(g[0].index)
            assert [it.index for it in g] == live[pos:pos + 5]
    allg = buf.sample(groupby="env")
    assert sorted(len(g) for g in allg) == [13, 15, 15, 15]
    with pytest.raises(ValueError, match="groups"):
        buf.sample(5, groupby="env")
    assert len(buf.sample(5, groupby="env", ignore_insufficient=True)) == 4
    assert len(buf.sample(6, groupby="env", replace=True)) == 6


def test_groupby_index_tracks_push_evict_update_and_range():
    buf = DequeBuffer(6, seed=0)
    for i in range(6):
        buf.push(i, meta={"ep": i // 3})
    assert sorted(len(g) for g in buf.sample(groupby="ep")) == [3, 3]
    buf.push(6, meta={"ep": 2})  # evicts 0
    buf.update(5, meta={"ep": 2})
    groups = {g[0].meta["ep"]: [it.index for it in g] for g in buf.sample(groupby="ep")}
    assert groups == {0: [1, 2], 1: [3, 4], 2: [5, 6]}
    buf.push(7)  # no key: in no group
    groups = buf.sample(groupby="ep", sample_range=slice(-3, None))
    assert sorted([it.index for it in g] for g in groups) == [[5, 6]]
    with pytest.raises(ValueError):
        buf.sample(indices=[1], groupby="ep")
    buf.push(8, meta={"ep": [1]})  # unhashable group value
    with pytest.raises(TypeError, match="hashable"):
        buf.sample(groupby="ep", sample_range=slice(None))


def test_groups_shorter_than_unroll_len_are_not_eligible():
    buf = DequeBuffer(20)
    for i in range(3):
        buf.push(i, meta={"g": "short"})
    for i in range(6):
        buf.push(i, meta={"g": "long"})
    for _ in range(10):
        (g,) = buf.sample(1, groupby="g", unroll_len=4)
        assert g[0].meta["g"] == "long" and len(g) == 4


def test_update_many_forms():
    buf = filled(5)
    assert buf.update_many([0, 1, 77], meta={"p": np.array([1.0, 2.0, 3.0])}) == [True, True, False]
    assert buf.get_by_index(1).meta["p"] == 2.0
    assert buf.update_many([2, 3], meta=[{"p": 5}, None]) == [True, True]
    assert buf.get_by_index(2).meta["p"] == 5 and "p" not in buf.get_by_index(3).meta
    assert buf.update_many([4], data=[{"x": 40}]) == [True]
    assert buf.get_by_index(4).data == {"x": 40}
    with pytest.raises(ValueError, match="values for 2"):
        buf.update_many([0, 1], meta={"p": [1.0]})
    with pytest.raises(ValueError):
        buf.update_many([0, 1], data=[1])
    assert buf.update_many(torch.tensor([0]), meta={"p": torch.tensor([9.0])}) == [True]
    assert buf.get_by_index(0).meta["p"] == 9.0


def test_seeded_buffers_sample_identically():
    a, b = filled(50, size=50), filled(50, size=50)
    assert [i.index for i in a.sample(10)] == [i.index for i in b.sample(10)]
    np.random.seed(7)
    c = DequeBuffer(10)
    np.random.seed(7)
    d = DequeBuffer(10)
    for buf in (c, d):
        for i in range(10):
            buf.push(i)
    assert [i.index for i in c.sample(5)] == [i.index for i in d.sample(5)]


def test_uniform_sampling_is_uniform():
    buf = DequeBuffer(20, seed=5)
    for i in range(20):
        buf.push(i)
    counts = np.zeros(20)
    for _ in range(2000):
        for it in buf.sample(5):
            counts[it.data] += 1
    expect = 2000 * 5 / 20
    # each count is binomial(2000, 0.25): sd ~ 19.4; 6 sd is a loose, stable bound
    assert np.abs(counts - expect).max() < 6 * np.sqrt(2000 * 0.25 * 0.75), counts
    pairs = {tuple(sorted(it.index for it in buf.sample(2))) for _ in range(3000)}
    assert len(pairs) == 190  # every pair shows up: draws are not stuck in a cached block
