"""The replay buffer keeps one copy of each transition, and a long run's C heap stays flat.

Per-item arrays that live as long as the buffer, allocated between a learner's short-lived
tensors, fragmented glibc's heap, so resident memory grew with every update of a long run (see
docs/benchmarks.md, "Memory over long runs"). Items now keep their data in the buffer's columns only."""
from __future__ import annotations

import copy
import ctypes
import sys

import numpy as np
import pytest
import torch

from pipeline.data import DequeBuffer
from pipeline.data.item import BufferedData, RowItem


def _transition(rng: np.random.Generator, i: int) -> dict:
    return {"obs": rng.standard_normal(11).astype(np.float32), "action": torch.rand(3).numpy(),
            "reward": 0.1 * i, "next_obs": rng.standard_normal(11).astype(np.float32),
            "terminated": i % 7 == 0, "env_id": i % 3, "score": np.float32(i), "t": torch.tensor([i, -i])}


def _filled(n: int = 50, size: int = 100, first_batch: int = 4) -> tuple:
    rng = np.random.default_rng(0)
    pushed = [_transition(rng, i) for i in range(n)]
    buf = DequeBuffer(size, seed=0)
    for t in pushed:
        buf.push(copy.deepcopy(t))
    buf.sample_batch(first_batch)  # starts the columnar mirror: every item now lives in its row
    return buf, pushed


def _same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        assert type(a[k]) is type(b[k]), k
        if isinstance(a[k], torch.Tensor):
            assert torch.equal(a[k], b[k]), k
        else:
            np.testing.assert_array_equal(a[k], b[k])
            assert a[k] == b[k] if not isinstance(a[k], np.ndarray) else True


def test_items_live_in_the_columns_and_read_back_exactly():
    buf, pushed = _filled()
    storage = buf.storage
    assert all(type(storage.items[s]) is RowItem for s in storage.dense[:storage.count].tolist())
    items = buf.sample(indices=list(range(50)))
    for it, t in zip(items, pushed):
        _same(it.data, t)  # Python floats exact (0.1 * i), numpy scalars and tensors keep their type
        assert type(it) is BufferedData
    obs = storage.columns._leaves[0][2]
    assert not np.shares_memory(items[3].data["obs"], obs)  # a read item holds its own copy
    rng = np.random.default_rng(5)
    buf.push(_transition(rng, 50))
    buf.push(_transition(rng, 51))
    held = buf.sample(indices=[50])[0]
    buf.sample_batch(4)  # rows brought up to date
    assert type(held) is BufferedData  # held meanwhile: left as it was (its data dict is the caller's)
    assert type(storage.items[storage.id2slot[51]]) is RowItem

def _same_nested(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for k in a:
        if type(b[k]) is dict:
            assert type(a[k]) is dict, k
            _same_nested(a[k], b[k])
        else:
            _same({k: a[k]}, {k: b[k]})


def test_nested_dict_items_live_in_the_columns_too_and_read_back_exactly():
    rng = np.random.default_rng(3)
    pushed = [{"obs": {"image": rng.integers(0, 255, (2, 3), dtype=np.uint8), "state": torch.rand(4)},
               "action": i, "reward": 0.1 * i, "goal": {"xy": {"x": np.float32(i), "y": 0.5 * i}}, "done": i % 2 == 0}
              for i in range(12)]
    buf = DequeBuffer(16, seed=0)
    for t in pushed:
        buf.push(copy.deepcopy(t))
    batch = buf.sample_batch(5)
    storage = buf.storage
    assert all(type(storage.items[s]) is RowItem for s in storage.dense[:storage.count].tolist())
    assert batch["goal"]["xy"]["x"].shape == (5,) and batch["obs"]["image"].shape == (5, 2, 3)
    for it, t in zip(buf.sample(indices=list(range(12))), pushed):
        _same_nested(it.data, t)  # keys in push order at every level, leaves of their pushed types


def test_items_the_columns_cannot_rebuild_exactly_keep_their_own_data():
    from easydict import EasyDict
    inner = DequeBuffer(4, seed=0)
    empty = DequeBuffer(4, seed=0)
    for i in range(4):
        inner.push({"obs": EasyDict({"a": np.full(2, i)}), "reward": 1.0})  # an inner mapping that is not a dict
        empty.push({"x": np.full(2, i), "info": {}})  # an empty dict: no column holds it
    for buf in (inner, empty):
        assert buf.sample_batch(2)["x" if buf is empty else "reward"].shape[0] == 2
        storage = buf.storage
        assert storage.columns is not None
        assert not any(type(storage.items[s]) is RowItem for s in storage.dense[:storage.count].tolist())
    assert type(inner.get(0).data["obs"]) is EasyDict
    assert empty.get(3).data["info"] == {} and list(empty.get(3).data) == ["x", "info"]


def test_an_evicted_item_held_elsewhere_keeps_its_data():
    buf, pushed = _filled(n=10, size=10)
    held_lazy = buf.sample(indices=[0])[0]       # never read: still a RowItem when evicted
    held_read = buf.sample(indices=[1])[0]
    _ = held_read.data                           # read: a plain item again
    rng = np.random.default_rng(1)
    for i in range(25):                          # every row reused at least twice
        buf.push(_transition(rng, 100 + i))
        buf.sample_batch(4)
    _same(held_lazy.data, pushed[0])
    _same(held_read.data, pushed[1])


def test_update_clear_and_copies_keep_data_apart():
    buf, pushed = _filled(n=20, size=20)
    held = buf.sample(indices=[2])[0]
    twin = copy.deepcopy(buf)
    new = dict(pushed[2], reward=-5.0)
    assert buf.update(2, data=new)
    assert buf.sample(indices=[2])[0].data["reward"] == -5.0
    assert held.data["reward"] == -5.0           # the buffer's item object holds the new data...
    assert twin.sample(indices=[2])[0].data["reward"] == pushed[2]["reward"]  # ...the copy does not
    kept = buf.sample(indices=[3])[0]
    buf.clear()
    rng = np.random.default_rng(2)
    for i in range(20):
        buf.push(_transition(rng, 200 + i))
    buf.sample_batch(4)
    _same(kept.data, pushed[3])
    _same(twin.sample(indices=[3])[0].data, pushed[3])
    b = twin.sample_batch(20)
    assert b["reward"].dtype == torch.float32 and b["obs"].shape == (20, 11)


def test_items_of_another_shape_are_kept_as_pushed():
    buf, _ = _filled(n=5)
    odd = {"obs": np.zeros(4, np.float32), "x": "text"}
    buf.push(odd)
    buf.storage.ensure_columns()  # what sample_batch does first: rows written, items moved into them
    assert buf.sample(indices=[5])[0].data is odd


def _heap_bytes() -> int:
    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                   "fsmblks", "uordblks", "fordblks", "keepcost")]
    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2().arena


def _has_mallinfo2() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "mallinfo2")
    except OSError:
        return False


@pytest.mark.skipif(not _has_mallinfo2(), reason="reads glibc's heap size (mallinfo2): Linux with glibc >= 2.33 only")
def test_heap_stays_flat_while_pushing_and_training():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(14, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(net.parameters())
    buf = DequeBuffer(100_000, seed=0)
    rng = np.random.default_rng(0)

    def push(i: int) -> None:
        buf.push({"obs": rng.standard_normal(11).astype(np.float32), "action": torch.rand(3).numpy(),
                  "reward": 1.0, "next_obs": rng.standard_normal(11).astype(np.float32), "terminated": False})

    for i in range(1000):
        push(i)
    n, start = 2000, 500
    for i in range(n):  # one push and one update per step, as SAC does
        push(i)
        b = buf.sample_batch(256)
        loss = (net(torch.cat([b["obs"], b["action"]], -1)).squeeze(-1) - b["reward"]).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == start:
            h0 = _heap_bytes()
    growth = (_heap_bytes() - h0) / (n - start - 1)
    assert growth < 2048, f"the C heap grew by {growth:.0f} bytes per step"


def test_saving_reads_the_rows_and_leaves_the_items_in_them(tmp_path):
    buf, pushed = _filled(n=30, size=40)
    path = str(tmp_path / "b.buffer")
    buf.save_data(path)
    storage = buf.storage
    assert all(type(storage.items[s]) is RowItem for s in storage.dense[:storage.count].tolist())
    back = DequeBuffer(40, seed=0)
    back.load_data(path)
    for i in (0, 17, 29):
        _same(back.sample(indices=[i])[0].data, pushed[i])
