"""Issue 12, items 1, 3 and 4: sampled repeats do not alias, buffers copy, a failed load changes nothing."""
import copy
import pickle

import pytest
import torch

from pipeline.data import (DequeBuffer, PrioritizedSampler, clone_object, padding, staleness_check,
                           use_time_check)


def _filled(n=3, **kw):
    buf = DequeBuffer(10, seed=0, **kw)
    for i in range(n):
        buf.push({"obs": torch.full((2,), float(i)), "reward": float(i), "info": {"k": [i]}}, {"env": 0})
    return buf


def _assert_no_aliases(items):
    assert len({id(it) for it in items}) == len(items)
    assert len({id(it.data) for it in items}) == len(items)
    assert len({id(it.meta) for it in items}) == len(items)


# ------------------------------------------------------------------ 1. repeats are distinct objects
def test_sample_with_replacement_repeats_are_distinct_copies():
    buf = _filled(2)
    items = buf.sample(12, replace=True)  # 2 stored items, 12 draws: repeats for sure
    _assert_no_aliases(items)
    stored = {buf.get_by_index(i).data["reward"]: buf.get_by_index(i) for i in buf.indices()}
    repeat = next(it for it in items if it is not stored[it.data["reward"]])
    repeat.data["reward"] += 100.0  # n-step / HER style in-place post-processing of one copy
    repeat.data["obs"] += 100.0
    repeat.data["info"]["k"].append("x")
    repeat.meta["env"] = 7
    for it in stored.values():
        assert it.data["reward"] < 100 and float(it.data["obs"].max()) < 100
        assert it.data["info"]["k"] == [int(it.data["reward"])] and it.meta["env"] == 0
    # the first appearance of each item is the stored object itself (documented sharing)
    firsts = {}
    for it in items:
        firsts.setdefault(it.index, it)
    assert all(firsts[i] is buf.get_by_index(i) for i in firsts)


def test_repeated_indices_and_batches_with_replacement_are_distinct():
    buf = _filled(3)
    i0 = buf.indices()[0]
    _assert_no_aliases(buf.sample(indices=[i0, i0, i0]))
    sb = buf.sample_batch(9, replace=True)
    sb["obs"] += 1.0  # batch tensors are new memory
    assert all(float(buf.get_by_index(i).data["obs"][0]) == k for k, i in enumerate(buf.indices()))


def test_prioritized_replay_with_replacement_repeats_are_distinct():
    buf = _filled(2, sampler=PrioritizedSampler())
    items = buf.sample(10, replace=True)
    _assert_no_aliases(items)
    assert all("priority_IS" in it.meta for it in items)


def test_groups_with_replacement_and_padding_do_not_alias():
    buf = _filled(2)
    groups = buf.sample(4, groupby="env", replace=True)  # one group drawn four times
    _assert_no_aliases([it for g in groups for it in g])
    pbuf = _filled(1).use(padding("last", size=4))
    (g,) = pbuf.sample(1, groupby="env")
    _assert_no_aliases(g)
    g[3].data["obs"] += 5
    assert float(g[0].data["obs"][0]) == 0.0


def test_use_time_check_counts_repeats_on_the_stored_item():
    buf = DequeBuffer(10)
    buf.use(use_time_check(buf, max_use=5))
    buf.push("a")
    buf.sample(3, replace=True)
    assert buf.get(0).meta["use_count"] == 3


def test_clone_object_gives_full_copies():
    buf = _filled(2).use(clone_object())
    it = buf.sample(1)[0]
    it.data["obs"] += 9
    assert float(buf.get_by_index(it.index).data["obs"].max()) < 9


# ------------------------------------------------------------------ 3. copies of a buffer
@pytest.mark.parametrize("how", ["deepcopy", "pickle"])
def test_deepcopy_and_pickle_give_an_independent_buffer_with_its_own_lock(how):
    buf = _filled(4, sampler=PrioritizedSampler())
    per = buf.sampler
    buf.use(use_time_check(buf, max_use=100)).use(staleness_check(buf, max_staleness=100))
    buf.sample(2, train_iter_sample_data=0)
    buf.sample_batch(2, train_iter_sample_data=0)
    cp = copy.deepcopy(buf) if how == "deepcopy" else pickle.loads(pickle.dumps(buf))
    assert cp.count() == buf.count() and cp.indices() == buf.indices()
    assert cp._lock is not buf._lock and cp._lock is cp.storage.lock
    assert cp.storage is not buf.storage
    assert all(getattr(m, "buffer", cp) is cp for m in cp.middleware)  # middleware follow the copy
    assert cp.sampler is not per and cp.sampler.storage is cp.storage  # and so does the sampler
    cp.push({"obs": torch.zeros(2), "reward": 9.0, "info": {"k": []}}, {"train_iter_data_collected": 0})
    cp.update_many(cp.indices()[:2], meta={"priority": [5.0, 6.0]})
    cp.delete(cp.indices()[-1])
    assert buf.count() == 4 and per.priority(buf.indices()[0]) == 1.0
    assert cp.sampler.priority(cp.indices()[0]) == 5.0
    got = cp.sample(3, train_iter_sample_data=0)
    assert len(got) == 3 and cp.sample_batch(2, train_iter_sample_data=0).get("weight").shape == (2,)
    # a view of the copy shares the copy's storage and lock
    v = cp.view()
    assert v.storage is cp.storage and v._lock is cp._lock


def test_lock_is_held_and_released_independently():
    buf = _filled(2)
    cp = copy.deepcopy(buf)
    with buf._lock:  # held by this thread; the copy's lock is another one
        assert cp._lock.acquire(blocking=False)
        cp._lock.release()


# ------------------------------------------------------------------ 4. load_data
def _saved(tmp_path, **override):
    buf = _filled(3)
    path = str(tmp_path / "buf.pt")
    buf.save_data(path)
    if override:
        payload = torch.load(path, weights_only=True)
        for k, v in override.items():
            if v is KeyError:
                del payload[k]
            else:
                payload[k] = v
        torch.save(payload, path)
    return path


def _target():
    buf = DequeBuffer(10, sampler=PrioritizedSampler())
    per = buf.sampler
    for i in range(5):
        buf.push({"x": i}, {"priority": float(i + 1)})
    return buf, per


def _damage(payload, how):
    cols = payload["data"]["cols"]
    if how == "short column":
        cols["reward"]["v"] = cols["reward"]["v"][:-1]  # one row missing
    elif how == "unknown kind":
        cols["obs"]["kind"] = "no-such-kind"
    else:  # a nested list column whose lengths do not add up
        cols["info"]["cols"]["k"]["len"] = torch.tensor([1, 1, -1])


@pytest.mark.parametrize("how", ["short column", "unknown kind", "bad lengths"])
def test_failed_load_leaves_the_buffer_intact(tmp_path, how):
    payload_path = _saved(tmp_path)
    payload = torch.load(payload_path, weights_only=True)
    _damage(payload, how)
    torch.save(payload, payload_path)
    buf, per = _target()
    before = [(it.index, it.data, dict(it.meta)) for it in (buf.get(k) for k in range(buf.count()))]
    with pytest.raises(ValueError, match="does not decode"):
        buf.load_data(payload_path)
    after = [(it.index, it.data, dict(it.meta)) for it in (buf.get(k) for k in range(buf.count()))]
    assert after == before and per.priority(4) == 5.0
    assert len(buf.sample(5)) == 5


@pytest.mark.parametrize("key", ["ids", "data", "meta", "next_id", "count"])
def test_load_with_a_missing_key_is_a_clear_value_error(tmp_path, key):
    path = _saved(tmp_path, **{key: KeyError})
    buf, _ = _target()
    with pytest.raises(ValueError, match=f"missing '{key}'"):
        buf.load_data(path)
    assert buf.count() == 5


@pytest.mark.parametrize("ids", [[-1, 0, 1], [0, 0, 1], [0, 2, 1], [0, 1.5, 2], [True, False, True], [0, 1]])
def test_load_refuses_negative_duplicate_or_non_integer_ids(tmp_path, ids):
    path = _saved(tmp_path, ids=torch.tensor(ids))
    buf, _ = _target()
    with pytest.raises(ValueError, match="ids"):
        buf.load_data(path)
    assert buf.count() == 5


def test_a_newer_format_version_is_refused_with_a_clear_message(tmp_path):
    path = _saved(tmp_path, version=3)
    buf, _ = _target()
    with pytest.raises(ValueError, match="version 3.*newer rlpipe"):
        buf.load_data(path)
    assert buf.count() == 5


def test_good_load_still_replaces_contents_and_rebuilds_priorities(tmp_path):
    path = _saved(tmp_path)
    buf, per = _target()
    buf.load_data(path)
    assert buf.indices() == [0, 1, 2] and buf.get(0).data["reward"] == 0.0
    assert per.priority(0) is not None and len(buf.sample(3)) == 3
    assert buf.push({"x": 1}).index == 3
