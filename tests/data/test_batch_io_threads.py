"""sample_batch / collate, save_data / load_data, and thread safety."""
import os
import pickle
import threading
import time

import numpy as np
import pytest
import torch
from easydict import EasyDict

from pipeline.data import DequeBuffer, collate, to_treetensor, use_time_check


def transition(i):
    return {"obs": torch.full((4,), float(i)), "next_obs": torch.full((4,), float(i) + 0.5),
            "action": torch.tensor(i % 2), "reward": torch.tensor(float(i)), "done": torch.tensor(i % 5 == 0)}


def check_batch(b):
    ids = torch.tensor(b["indices"].tolist(), dtype=torch.float32)
    assert torch.equal(b["obs"], ids[:, None].expand(-1, 4))
    assert torch.equal(b["next_obs"], ids[:, None].expand(-1, 4) + 0.5)
    assert b["action"].dtype == torch.int64 and b["action"].tolist() == [i % 2 for i in b["indices"].tolist()]
    assert b["reward"].dtype == torch.float32 and torch.equal(b["reward"], ids)
    assert b["done"].dtype == torch.bool and b["done"].tolist() == [i % 5 == 0 for i in b["indices"].tolist()]


@pytest.mark.parametrize("columnar", [None, True, False])
def test_sample_batch_cartpole_transitions(columnar):
    buf = DequeBuffer(50, columnar=columnar, seed=0)
    for i in range(80):  # wraps around
        buf.push(transition(i))
    for _ in range(5):
        b = buf.sample_batch(16)
        assert len(set(b["indices"].tolist())) == 16 and min(b["indices"].tolist()) >= 30
        check_batch(b)
        assert "weight" not in b and b["indices"].dtype == torch.int64 and b["indices"].shape == (16,)
    buf.update(b["indices"].tolist()[0], data=transition(1000))
    b2 = buf.sample(indices=[b["indices"].tolist()[0]])
    assert b2[0].data["obs"][0].item() == 1000.0
    assert (buf._s.columns is not None) == (columnar is not False)


def test_sample_batch_uses_columns_and_matches_collate():
    buf = DequeBuffer(20, seed=0)
    for i in range(20):
        buf.push({"o": np.full(3, i, dtype=np.float32), "n": {"r": float(i), "k": i}, "f": np.int32(i)})
    b = buf.sample_batch(10)
    assert buf._s.columns is not None
    ref = collate([buf.get_by_index(i).data for i in b["indices"].tolist()])
    assert torch.equal(b["o"], ref["o"]) and torch.equal(b["n"]["r"], ref["n"]["r"])
    assert torch.equal(b["n"]["k"], ref["n"]["k"]) and torch.equal(b["f"], ref["f"])
    assert b["o"].dtype == torch.float32 and b["f"].dtype == torch.int32


def test_sample_batch_falls_back_for_non_conforming_items():
    buf = DequeBuffer(10, seed=0)
    for i in range(5):
        buf.push({"x": torch.tensor([float(i)])})
    buf.sample_batch(2)  # builds columns
    buf.push({"x": torch.tensor([1.0, 2.0])})  # different shape: flagged
    buf.push({"x": torch.tensor([7.0]), "extra": 1})  # different keys
    bad = buf.indices()[-2:]
    assert not buf._s.columns.ok[[buf._s.id2slot[i] for i in bad]].any()
    with pytest.raises((RuntimeError, ValueError)):
        for _ in range(50):
            buf.sample_batch(7)  # the odd item cannot be stacked: collate reports it
    buf.delete(bad)
    b = buf.sample_batch(5)
    assert b["x"].shape == (5, 1)
    assert sorted(b["x"].squeeze(1).tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_sample_batch_after_use_time_check_deletes():
    buf = DequeBuffer(20, seed=0)
    buf.use(use_time_check(buf, max_use=1))
    for i in range(20):
        buf.push(transition(i))
    b = buf.sample_batch(10)
    check_batch(b)
    assert buf.count() == 10
    with pytest.raises(ValueError):
        DequeBuffer(3).sample_batch(1)


def test_collate_variants():
    out = collate([{"a": 1, "b": [np.zeros(2), 1.5], "c": "s", "d": (True,)},
                   {"a": 2, "b": [np.ones(2), 2.5], "c": "t", "d": (False,)}])
    assert out["a"].tolist() == [1, 2]
    assert out["b"][0].shape == (2, 2) and out["b"][1].dtype == torch.float32
    assert out["c"] == ["s", "t"] and out["d"][0].tolist() == [True, False]
    with pytest.raises(ValueError):
        collate([])
    with pytest.raises(ValueError):
        collate([{"a": 1}, {"b": 1}])
    tt = to_treetensor({"a": torch.zeros(2, 3)})
    assert tuple(tt.a.shape) == (2, 3)


def test_save_load_round_trip(tmp_path):
    buf = DequeBuffer(5)
    payload = [
        {"obs": torch.arange(3.0), "np": np.arange(4, dtype=np.int16), "s": np.float32(2.5)},
        (1, "two", None),
        EasyDict({"a": 1}),
        {3: "int key"},
        [1.0, {"nested": np.ones((2, 2))}],
        "evicted later",
    ]
    for i, p in enumerate(payload):
        buf.push(p, meta={"env": i, "priority": float(i)})
    buf.delete(3)
    path = str(tmp_path / "b.pt")
    buf.save_data(path)
    other = DequeBuffer(5)
    other.push("stale")
    other.load_data(path)
    assert other.indices() == buf.indices() == [1, 2, 4, 5]
    for i in buf.indices():
        a, b = buf.get_by_index(i), other.get_by_index(i)
        assert a.meta == b.meta
        assert repr(a.data) == repr(b.data) and type(a.data) is type(b.data)
    assert other.push("new").index == 6
    small = DequeBuffer(2)
    small.load_data(path)
    assert small.indices() == [4, 5]


@pytest.mark.filterwarnings('ignore:Detected pickle protocol:UserWarning')  # torch's, on the raw pickle fed to it
def test_save_refuses_arbitrary_objects_and_load_refuses_pickles(tmp_path):
    class Thing:
        pass

    buf = DequeBuffer(2)
    buf.push(Thing())
    with pytest.raises(TypeError, match="safely"):
        buf.save_data(str(tmp_path / "x.pt"))

    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    bad = tmp_path / "evil.pt"
    torch.save({"format": "rlpipe.DequeBuffer", "version": 1, "size": 2, "next_id": 1, "ids": [0],
                "data": [Evil()], "meta": [{}]}, bad)
    with open(tmp_path / "evil.pkl", "wb") as f:
        pickle.dump(Evil(), f)
    for p in (bad, tmp_path / "evil.pkl"):
        with pytest.raises(ValueError, match="not allowed|not a buffer"):
            DequeBuffer(2).load_data(str(p))
    assert not marker.exists()
    torch.save({"something": "else"}, tmp_path / "other.pt")
    with pytest.raises(ValueError, match="not a buffer"):
        DequeBuffer(2).load_data(str(tmp_path / "other.pt"))


def test_concurrent_push_sample_update_delete_from_threads():
    buf = DequeBuffer(300, seed=0)
    errors = []
    stop = time.monotonic() + 2.0
    counts = {"push": 0}

    def pusher(k):
        try:
            i = 0
            while time.monotonic() < stop and i < 4000:
                buf.push(transition(k * 100000 + i), meta={"env": k})
                i += 1
            counts["push"] += i
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def sampler():
        try:
            n = 0
            while time.monotonic() < stop and n < 2000:
                n += 1
                if buf.count() < 64:
                    continue
                b = buf.sample_batch(32)
                assert len(set(b["indices"].tolist())) == 32
                assert torch.equal(b["reward"], b["obs"][:, 0])
                assert torch.equal(b["next_obs"], b["obs"] + 0.5)
                buf.update_many(b["indices"].tolist()[:4], meta={"seen": [True] * 4})
                buf.delete(b["indices"].tolist()[-1])
                for it in buf.sample(8):
                    assert float(it.data["reward"]) == float(it.data["obs"][0])
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=pusher, args=(k,)) for k in range(2)] + \
              [threading.Thread(target=sampler) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    s = buf._s
    # invariants of the storage after the storm
    assert s.count == len(s.id2slot) == len(buf.indices()) <= 300
    idx = buf.indices()
    assert idx == sorted(idx)
    assert all(s.items[s.id2slot[i]].index == i for i in idx)
    assert sorted(s.dense[: s.count].tolist()) == sorted(s.id2slot.values())


def test_sample_batch_fresh_pushes_deleted_during_the_sample_are_correct():
    buf = DequeBuffer(8, seed=0)
    buf.use(use_time_check(buf, max_use=1))
    for i in range(8):
        buf.push(transition(i))
    check_batch(buf.sample_batch(4))  # builds columns; 4 items deleted
    n = 8
    for rnd in range(20):
        for i in range(4):
            assert buf.push(transition(n)).index == n  # reuses freed slots; rows pending
            n += 1
        b = buf.sample_batch(4)
        check_batch(b)
        assert buf.count() == 4


def test_columnar_pending_rows_stay_bounded():
    buf = DequeBuffer(16, seed=0)
    for i in range(16):
        buf.push(transition(i))
    buf.sample_batch(2)
    for i in range(16, 216):
        buf.push(transition(i))
        assert len(buf._s.pending) <= 16
    check_batch(buf.sample_batch(16))


def test_sample_batch_is_the_batch_dict_with_the_items_indices():
    buf = DequeBuffer(8, seed=0)
    for i in range(8):
        buf.push(transition(i))
    b = buf.sample_batch(8)
    check_batch(b)
    assert type(b) is dict and set(b) == {"obs", "next_obs", "action", "reward", "done", "indices"}
    assert sorted(b["indices"].tolist()) == buf.indices()
    b2 = buf.sample_batch(8)
    buf.push(transition(8))  # evicts the oldest, reusing its slot: the batch already taken is unchanged
    assert torch.equal(b2["reward"], b2["indices"].float())
    with pytest.raises(ValueError):
        buf.sample_batch(9)
    assert len(buf.sample_batch(9, ignore_insufficient=True)["indices"].tolist()) == 8
    assert len(buf.sample_batch(20, replace=True)["indices"].tolist()) == 20


def test_to_treetensor_fast_path_shares_leaves_and_falls_back_for_arrays():
    import numpy as np
    import torch
    import treetensor.torch as ttorch

    from pipeline.data import to_treetensor

    d = {"obs": torch.randn(8, 4), "nested": {"a": torch.zeros(8), "b": torch.ones(8, 2)}}
    t = to_treetensor(d)
    assert isinstance(t, ttorch.Tensor)
    assert t.obs is d["obs"] and t.nested.b is d["nested"]["b"]  # shared, not copied
    assert to_treetensor(t) is t
    mixed = to_treetensor({"x": np.arange(3), "y": torch.ones(3)})
    assert isinstance(mixed.x, torch.Tensor) and mixed.x.tolist() == [0, 1, 2]


def test_sample_batch_is_the_train_batch_form_with_indices_always_and_weight_with_priorities():
    from pipeline.data import PrioritizedSampler, clone_object

    for sampler, weighted in ((None, False), (PrioritizedSampler(), True), (PrioritizedSampler(is_weight=False), False)):
        buf = DequeBuffer(10, seed=0, sampler=sampler)
        for i in range(10):
            buf.push(transition(i))
        for b in (buf.sample_batch(4), buf.view().use(clone_object()).sample_batch(4)):  # middleware: same form
            assert type(b) is dict and ("weight" in b) == weighted
            assert b["indices"].dtype == torch.int64 and b["indices"].shape == (4,)
            assert torch.equal(b["reward"], b["indices"].float())  # each row is the item of its index
            if weighted:
                assert b["weight"].dtype == torch.float32 and b["weight"].shape == (4,)


def test_sample_batch_refuses_items_it_cannot_batch_and_reserved_field_names():
    import pytest

    from pipeline.data import clone_object

    for items, kind in (([torch.zeros(3)] * 4, "Tensor"), ([(1.0, 2.0)] * 4, "tuple"), ([3] * 4, "int")):
        buf = DequeBuffer(8, seed=0)
        for it in items:
            buf.push(it)
        with pytest.raises(TypeError, match=f"holds {kind} items: use sample"):
            buf.sample_batch(2)
        assert len(buf.sample(2)) == 2  # the items are still there for sample()
    for name in ("indices", "weight"):
        buf = DequeBuffer(8, seed=0)
        for i in range(4):
            buf.push({"obs": np.zeros(2, np.float32), name: float(i)})
        for b in (buf, buf.view().use(clone_object())):
            with pytest.raises(ValueError, match=f"stored items have a field named '{name}'"):
                b.sample_batch(2)
