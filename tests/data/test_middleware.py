"""Each shipped buffer middleware."""
import pytest
import torch

from pipeline.data import (DequeBuffer, clone_object, group_sample, padding, sample_range_view,
                           staleness_check, use_time_check)


def test_clone_object_isolates_producer_and_consumer():
    buf = DequeBuffer(4).use(clone_object())
    obs = torch.zeros(3)
    buf.push({"obs": obs}, meta={"m": [1]})
    obs += 1  # producer mutates after push
    (it,) = buf.sample(1)
    assert torch.equal(it.data["obs"], torch.zeros(3))
    it.data["obs"] += 5  # consumer mutates the sample
    it.meta["m"].append(2)
    (again,) = buf.sample(1)
    assert torch.equal(again.data["obs"], torch.zeros(3))
    assert again.meta["m"] == [1]
    new = {"obs": torch.ones(3)}
    buf.update(again.index, data=new)
    new["obs"] += 1
    assert torch.equal(buf.sample(1)[0].data["obs"], torch.ones(3))
    groups = buf.sample(1, groupby="missing", ignore_insufficient=True)
    assert groups == []


def test_clone_object_sample_batch_falls_back_to_collate_correctly():
    buf = DequeBuffer(8, seed=0).use(clone_object())
    for i in range(8):
        buf.push({"x": torch.tensor([float(i)]), "a": i})
    b = buf.sample_batch(8)
    assert sorted(b["x"].squeeze(1).tolist()) == [float(i) for i in range(8)]
    assert b["a"].tolist() == [int(v) for v in b["x"].squeeze(1).tolist()]


def test_use_time_check_deletes_after_max_use():
    buf = DequeBuffer(10)
    buf.use(use_time_check(buf, max_use=2))
    for i in range(3):
        buf.push(i)
    assert buf.get(0).meta["use_count"] == 0
    first = buf.sample(3)
    assert all(it.meta["use_count"] == 1 for it in first)
    assert buf.count() == 3
    buf.sample(3)
    assert buf.count() == 0
    with pytest.raises(ValueError):
        use_time_check(buf, max_use=0)


def test_use_time_check_with_groups_and_replacement():
    buf = DequeBuffer(10)
    buf.use(use_time_check(buf, max_use=2))
    buf.push("a", meta={"g": 1})
    buf.sample(2, replace=True)  # the same item twice counts twice
    assert buf.count() == 0
    buf.push("b", meta={"g": 1})
    buf.push("c", meta={"g": 1})
    (g,) = buf.sample(1, groupby="g")
    assert [it.meta["use_count"] for it in g] == [1, 1]


def test_staleness_check_drops_stale_items_before_sampling():
    buf = DequeBuffer(10)
    buf.use(staleness_check(buf, max_staleness=5))
    for it in range(6):
        buf.push(it, meta={"train_iter_data_collected": it})
    got = buf.sample(6, train_iter_sample_data=5)
    assert len(got) == 6
    got = buf.sample(3, train_iter_sample_data=8)  # items collected at 0,1,2 are stale
    assert sorted(buf.get(k).data for k in range(buf.count())) == [3, 4, 5]
    with pytest.raises(ValueError, match="train_iter_sample_data"):
        buf.sample(1)
    with pytest.raises(ValueError, match="train_iter_data_collected"):
        buf.push(9)


def test_staleness_check_out_of_order_pushes_use_full_scan():
    buf = DequeBuffer(10)
    buf.use(staleness_check(buf, max_staleness=2))
    for it in [5, 1, 6, 0]:
        buf.push(it, meta={"train_iter_data_collected": it})
    buf.sample(1, train_iter_sample_data=6)
    assert sorted(buf.get(k).data for k in range(buf.count())) == [5, 6]


def test_group_sample_trims_groups():
    buf = DequeBuffer(50)
    buf.use(group_sample(3))
    for i in range(10):
        buf.push(i, meta={"ep": 0})
    buf.push(100, meta={"ep": 1})
    for _ in range(10):
        groups = {g[0].meta["ep"]: [it.data for it in g] for g in buf.sample(2, groupby="ep")}
        long = groups[0]
        assert len(long) == 3 and long == list(range(long[0], long[0] + 3))
        assert groups[1] == [100]
    with pytest.raises(ValueError, match="groupby"):
        buf.sample(1)
    unordered = DequeBuffer(50).use(group_sample(4, ordered_in_group=False))
    for i in range(10):
        unordered.push(i, meta={"ep": 0})
    (g,) = unordered.sample(1, groupby="ep")
    assert len(g) == 4 and len({it.index for it in g}) == 4
    with pytest.raises(ValueError):
        group_sample(0)


@pytest.mark.parametrize("policy", ["random", "last", "zero"])
def test_padding_fills_short_groups(policy):
    buf = DequeBuffer(50)
    buf.use(padding(policy=policy))
    for i in range(5):
        buf.push({"v": torch.tensor([float(i + 1)])}, meta={"ep": 0})
    buf.push({"v": torch.tensor([7.0])}, meta={"ep": 1})
    groups = {g[0].meta["ep"]: g for g in buf.sample(2, groupby="ep")}
    short = groups[1]
    assert len(short) == 5 and len(groups[0]) == 5
    assert not any(it.meta.get("padding") for it in groups[0])
    assert short[0].meta.get("padding") is None and all(it.meta["padding"] for it in short[1:])
    vals = [float(it.data["v"]) for it in short[1:]]
    assert vals == ([0.0] * 4 if policy == "zero" else [7.0] * 4)
    assert buf.sample(1, sample_range=slice(0, 1))[0].data["v"].item() == 1.0  # non-group passes


def test_padding_to_fixed_size_and_bad_policy():
    buf = DequeBuffer(10).use(padding("last", size=4))
    buf.push(1, meta={"ep": 0})
    (g,) = buf.sample(1, groupby="ep")
    assert [it.data for it in g] == [1, 1, 1, 1]
    with pytest.raises(ValueError):
        padding("nope")


def test_sample_range_view_on_a_view():
    buf = DequeBuffer(100)
    for i in range(50):
        buf.push(i)
    recent = buf.view().use(sample_range_view(buf, -10))
    for _ in range(10):
        assert all(it.data >= 40 for it in recent.sample(10))
    assert {it.data for it in recent.sample(3, sample_range=slice(0, 3))} == {0, 1, 2}
    assert len(buf.sample(50)) == 50  # the base buffer is unrestricted
    with pytest.raises(ValueError):
        sample_range_view(buf, "x")


def test_group_sample_max_use_in_group_false_allows_short_tail_runs():
    import random as _random

    from pipeline.data import group_sample as _group_sample

    buf = DequeBuffer(50)
    buf.use(_group_sample(3, max_use_in_group=False))
    for i in range(5):
        buf.push(i, meta={"g": 0})
    _random.seed(0)
    runs = [[it.data for it in buf.sample(1, groupby="g")[0]] for _ in range(200)]
    assert all(r == list(range(r[0], r[0] + len(r))) for r in runs)  # contiguous, in push order
    assert {len(r) for r in runs} == {1, 2, 3} and {r[0] for r in runs} == set(range(5))
    full = DequeBuffer(50).use(_group_sample(3))
    for i in range(5):
        full.push(i, meta={"g": 0})
    assert all(len(full.sample(1, groupby="g")[0]) == 3 for _ in range(50))


def test_padding_none_adds_placeholders_without_data():
    from pipeline.data import padding as _padding

    buf = DequeBuffer(10).use(_padding("none", size=3))
    buf.push("a", meta={"g": 0})
    (g,) = buf.sample(1, groupby="g")
    assert [it.data for it in g] == ["a", None, None]
    assert [it.index for it in g[1:]] == [-1, -1] and all(it.meta["padding"] for it in g[1:])
