"""The compiled PER kernels (pipeline/data/_per_kernels.c) called directly: bad input raises clear
errors and writes nothing, references are neither leaked nor stolen, scratch arrays are restored,
and the results agree with numpy. Plus PER-level checks that run with both kernels: the switch
itself, thread safety and agreement between the two paths."""
import gc
import os
import subprocess
import sys
import threading
import time
from collections.abc import MutableMapping

import numpy as np
import pytest
import torch

from kernel_switch import kernels, use_kernel
from pipeline.data import DequeBuffer, PrioritizedSampler, _accel
from pipeline.data.buffer import BufferedData


@pytest.fixture
def ext():
    return kernels("C")


def _items(n):
    return [BufferedData({"x": i}, 1000 + i, {"priority": 1.0}) for i in range(n)]


def _arrays(n):
    return {
        "leaf": np.linspace(0.5, 2.0, n),
        "stale": np.zeros(n, dtype=bool),
        "raw": np.linspace(1.0, 3.0, n),
        "mark": np.zeros(n, dtype=np.uint8),
    }


# ---------------------------------------------------------------------- bad input


def test_argument_count_types_and_dtypes_are_checked(ext):
    a = _arrays(8)
    slots = np.array([1, 2], dtype=np.int64)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        ext.is_weights(a["leaf"], slots)
    with pytest.raises(TypeError, match="slots must be a int64 array"):
        ext.is_weights(a["leaf"], slots.astype(np.int32), 1.0, 0.5, np.empty(2, np.float32))
    with pytest.raises(TypeError, match="leaf must be a float64 array"):
        ext.is_weights(a["leaf"].astype(np.float32), slots, 1.0, 0.5, np.empty(2, np.float32))
    with pytest.raises(TypeError, match="out must be a C-contiguous writable float32"):
        ext.is_weights(a["leaf"], slots, 1.0, 0.5, np.empty(4, np.float32)[::2])
    with pytest.raises(TypeError, match="slots must be a C-contiguous"):
        ext.is_weights(a["leaf"], [1, 2], 1.0, 0.5, np.empty(2, np.float32))
    ro = np.empty(2, np.float32)
    ro.flags.writeable = False
    with pytest.raises(TypeError, match="writable"):
        ext.is_weights(a["leaf"], slots, 1.0, 0.5, ro)
    with pytest.raises(TypeError, match="mn must be a float"):
        ext.is_weights(a["leaf"], slots, "1", 0.5, np.empty(2, np.float32))
    with pytest.raises(ValueError, match="min leaf > 0"):
        ext.is_weights(a["leaf"], slots, 0.0, 0.5, np.empty(2, np.float32))
    with pytest.raises(ValueError, match="out has 3 entries for 2 slots"):
        ext.is_weights(a["leaf"], slots, 1.0, 0.5, np.empty(3, np.float32))


@pytest.mark.parametrize("bad", [-1, 8, 2**40])
def test_out_of_range_slots_raise_index_error_and_write_nothing(ext, bad):
    a = _arrays(8)
    items = _items(8)
    slots = np.array([0, bad, 3], dtype=np.int64)
    w = np.full(3, -7.0, dtype=np.float32)
    with pytest.raises(IndexError, match=f"slots\\[1\\] = {bad} is out of range \\[0, 8\\)"):
        ext.is_weights(a["leaf"], slots, 0.5, 0.5, w)
    res = []
    with pytest.raises(IndexError, match="out of range"):
        ext.take_items(items, slots, res, [], a["leaf"], 0.5, 0.5, w, a["stale"], a["raw"])
    assert res == [] and (w == -7.0).all()
    assert all("priority_IS" not in it.meta for it in items)
    raw0, leaf0 = a["raw"].copy(), a["leaf"].copy()
    with pytest.raises(IndexError, match="out of range"):
        ext.update(slots, np.ones(3), a["raw"], a["leaf"], 0.6, 1e-10, None, a["stale"])
    assert np.array_equal(a["raw"], raw0) and np.array_equal(a["leaf"], leaf0) and not a["stale"].any()
    nodes = np.array([5, bad if bad < 0 else bad + 32], dtype=np.int64)  # 32 nodes in the level
    with pytest.raises(IndexError, match="nodes\\[1\\]"):
        ext.tree_refresh(np.ones(32), np.zeros(32), np.zeros(1), nodes, np.empty(2, np.int64), None, None)


def test_update_checks_priorities_before_writing(ext):
    a = _arrays(8)
    items = _items(8)
    slots = np.array([0, 1, 2], dtype=np.int64)
    raw0, leaf0 = a["raw"].copy(), a["leaf"].copy()
    for bad in (np.nan, np.inf, -0.5):
        prio = np.array([1.0, bad, 2.0])
        with pytest.raises(ValueError, match="position 1"):
            ext.update(slots, prio, a["raw"], a["leaf"], 0.6, 1e-10, items[:3], a["stale"])
        assert np.array_equal(a["raw"], raw0) and np.array_equal(a["leaf"], leaf0)
        assert all(it.meta["priority"] == 1.0 for it in items)
    with pytest.raises(ValueError, match="2 priorities for 3 indices"):
        ext.update(slots, np.ones(2), a["raw"], a["leaf"], 0.6, 1e-10, None, a["stale"])
    with pytest.raises(TypeError, match="list of 3 items"):
        ext.update(slots, np.ones(3), a["raw"], a["leaf"], 0.6, 1e-10, items[:2], a["stale"])


def test_take_items_refuses_empty_slots_and_bad_lists(ext):
    a = _arrays(4)
    items = _items(4)
    items[2] = None
    with pytest.raises(ValueError, match="slot 2 .* holds no item"):
        ext.take_items(items, np.array([1, 2], np.int64), [], None, a["leaf"], 1.0, 0.5,
                       np.empty(2, np.float32), a["stale"], a["raw"])
    with pytest.raises(TypeError, match="items must be a list"):
        ext.take_items(tuple(_items(4)), np.array([1], np.int64), [], None, a["leaf"], 1.0, 0.5, None,
                       a["stale"], a["raw"])
    with pytest.raises(ValueError, match="res holds 0 items for 1 slots"):
        ext.take_items(None, np.array([1], np.int64), [], None, a["leaf"], 1.0, 0.5, None, a["stale"], a["raw"])


def test_reject_and_tree_draw_check_their_arguments_and_restore_mark(ext):
    a = _arrays(64)
    raw = np.random.default_rng(0).bit_generator.random_raw(1000)
    out = np.empty(8, np.int64)
    with pytest.raises(ValueError, match="n = 65"):
        ext.reject(raw, 0, 65, None, a["leaf"], 2.0, 8, out, a["mark"], 0.5)
    with pytest.raises(ValueError, match="k \\(9\\)"):
        ext.reject(raw, 0, 64, None, a["leaf"], 2.0, 9, out, a["mark"], 0.5)
    with pytest.raises(IndexError, match="pos = 1001"):
        ext.reject(raw, 1001, 64, None, a["leaf"], 2.0, 8, out, a["mark"], 0.5)
    with pytest.raises(ValueError, match="bound"):
        ext.reject(raw, 0, 64, None, a["leaf"], np.nan, 8, out, a["mark"], 0.5)
    with pytest.raises(ValueError, match="mark has 10"):
        ext.reject(raw, 0, 64, None, a["leaf"], 2.0, 8, out, np.zeros(10, np.uint8), 0.5)
    with pytest.raises(TypeError, match="raw must be a uint64"):
        ext.reject(raw.view(np.int64), 0, 64, None, a["leaf"], 2.0, 8, out, a["mark"], 0.5)
    bad_dense = np.full(64, 70, dtype=np.int64)  # every offset maps to a slot past the leaves
    with pytest.raises(IndexError, match="dense\\[.*\\] = 70 is out of range"):
        ext.reject(raw, 0, 64, bad_dense, a["leaf"], 2.0, 8, out, a["mark"], 0.5)
    assert not a["mark"].any()
    got, pos, acc, loose = ext.reject(raw, 0, 64, None, a["leaf"], 2.0, 8, out, a["mark"], 0.5)
    assert got == 8 and len(set(out.tolist())) == 8 and 0 < pos <= 1000 and 0 < acc <= 1
    assert not a["mark"].any()  # the scratch array is zeroed again
    got, _, acc, _ = ext.reject(raw, 0, 64, None, a["leaf"], 2.0, 8, out, a["mark"], 1.0 + 1e-15)
    assert got == 8 and acc <= 1  # an estimate rounded past 1 is taken as 1
    with pytest.raises(ValueError, match="acc > 0"):
        ext.reject(raw, 0, 64, None, a["leaf"], 2.0, 8, out, a["mark"], 0.0)
    # tree_draw: shapes must form a tree; a repeated prefix is refused; mark restored on every path
    C = np.cumsum(np.ones((2, 32)), axis=1)
    top = C[:, -1].copy()
    leaf = np.ones(64)
    mark = np.zeros(64, np.uint8)
    with pytest.raises(ValueError, match="do not form a tree"):
        ext.tree_draw(top, np.cumsum(top), [C[:1]], raw, 0, leaf, 4, out, 0, mark, 100)
    out[:2] = [3, 3]
    with pytest.raises(ValueError, match="repeats slot 3"):
        ext.tree_draw(top, np.cumsum(top), [C], raw, 0, leaf, 4, out, 2, mark, 100)
    assert not mark.any()
    with pytest.raises(ValueError, match="empty priority tree"):
        ext.tree_draw(np.zeros(2), np.zeros(2), [np.zeros((2, 32))], raw, 0, leaf, 4, out, 0, mark, 100)
    out[:1] = [5]
    got, pos, draws = ext.tree_draw(top, np.cumsum(top), [C], raw, 0, leaf, 8, out, 1, mark, 1000)
    assert got == 8 and out[0] == 5 and len(set(out.tolist())) == 8 and draws >= 7
    assert not mark.any()


def test_set_item_type_needs_a_class(ext):
    with pytest.raises(TypeError, match="needs a class"):
        ext.set_item_type(3)
    assert ext.set_item_type(BufferedData) is True  # restores the buffer's item class


# ---------------------------------------------------------------------- references and leaks


def test_no_reference_leaks_or_thefts(ext):
    n = 16
    a = _arrays(n)
    items = _items(n)
    slots = np.arange(0, n, 2, dtype=np.int64)
    idx_objs = [it.index for it in items]
    before_items = [sys.getrefcount(it) for it in items]
    before_meta = [sys.getrefcount(it.meta) for it in items]
    before_idx = [sys.getrefcount(i) for i in idx_objs]

    def once():
        res, ids = [], []
        w = np.empty(len(slots), np.float32)
        a["stale"][slots[:3]] = True
        ext.take_items(items, slots, res, ids, a["leaf"], 0.5, 0.4, w, a["stale"], a["raw"])
        assert ext.ids_match(ids, res)
        ext.take_items(None, slots, res, None, a["leaf"], 0.5, 0.4, w, a["stale"], a["raw"])
        ext.update(slots, np.full(len(slots), 2.0), a["raw"], a["leaf"], 0.6, 1e-10, list(res), a["stale"])
        ext.update(slots, np.full(len(slots), 2.0), a["raw"], a["leaf"], 0.6, 1e-10, None, a["stale"])
        with pytest.raises(IndexError):
            ext.take_items(items, np.array([0, n], np.int64), [], [], a["leaf"], 0.5, 0.4, None, a["stale"],
                           a["raw"])

    for _ in range(50):
        once()
    gc.collect()
    blocks = sys.getallocatedblocks()
    for _ in range(2000):
        once()
    gc.collect()
    assert sys.getallocatedblocks() - blocks < 200  # nothing grows with the number of calls
    assert [sys.getrefcount(it) for it in items] == before_items
    assert [sys.getrefcount(it.meta) for it in items] == before_meta
    assert [sys.getrefcount(i) for i in idx_objs] == before_idx


# ---------------------------------------------------------------------- semantics


def test_take_items_writes_weights_meta_and_lazy_priorities(ext):
    n = 10
    a = _arrays(n)
    items = _items(n)
    slots = np.array([7, 2, 5], dtype=np.int64)
    a["stale"][[2, 3]] = True
    res, ids = [], []
    w = np.empty(3, np.float32)
    ext.take_items(items, slots, res, ids, a["leaf"], 0.25, 0.7, w, a["stale"], a["raw"])
    expect = (a["leaf"][slots] / 0.25) ** -0.7
    assert np.allclose(w, expect, rtol=1e-6)
    assert [it.index for it in res] == ids == [1007, 1002, 1005]
    assert [it.meta["priority_IS"] for it in res] == w.tolist()
    assert items[2].meta["priority"] == a["raw"][2] and not a["stale"][2]  # stale: written now
    assert a["stale"][3] and items[3].meta["priority"] == 1.0  # not sampled: still lazy
    assert items[7].meta["priority"] == 1.0
    assert ext.ids_match([1007, 1002, 1005], res) and not ext.ids_match([1007, 1002], res)
    assert not ext.ids_match([1007, 1002, 1006], res)


def test_update_matches_numpy_and_reports_extremes(ext):
    n = 12
    a = _arrays(n)
    items = _items(n)
    slots = np.array([3, 9, 3, 0], dtype=np.int64)  # slot 3 twice: the last write wins
    prio = np.array([5.0, 0.0, 2.0, 1e-12])
    old_leaf = a["leaf"][slots].copy()
    lo, hi, olo, ohi, nlo, nhi = ext.update(slots, prio, a["raw"], a["leaf"], 0.6, 1e-10,
                                            [items[s] for s in slots], a["stale"])
    assert (lo, hi) == (0.0, 5.0) and (olo, ohi) == (old_leaf.min(), old_leaf.max())
    leaf = np.maximum(np.array([2.0, 0.0, 1e-12]), 1e-10) ** 0.6
    assert np.allclose(a["leaf"][[3, 9, 0]], leaf, rtol=1e-15)
    assert a["raw"][[3, 9, 0]].tolist() == [2.0, 0.0, 1e-12]
    assert (nlo, nhi) == (a["leaf"][[3, 9, 0]].min(), a["leaf"][[3, 9, 0]].max())
    assert items[3].meta["priority"] == 2.0 and items[9].meta["priority"] == 0.0
    assert not a["stale"].any()


class _Raising(MutableMapping):
    """A meta mapping that refuses writes of one key."""

    def __init__(self, refuse):
        self.d, self.refuse = {"priority": 1.0}, refuse

    def __getitem__(self, k):
        return self.d[k]

    def __setitem__(self, k, v):
        if k == self.refuse:
            raise RuntimeError(f"no {k} here")
        self.d[k] = v

    def __delitem__(self, k):
        del self.d[k]

    def __iter__(self):
        return iter(self.d)

    def __len__(self):
        return len(self.d)


def test_a_failing_meta_write_leaves_priorities_consistent(ext):
    n = 6
    a = _arrays(n)
    items = _items(n)
    items[4].meta = _Raising("priority")
    slots = np.array([1, 4, 2], dtype=np.int64)
    raw0, leaf0 = a["raw"].copy(), a["leaf"].copy()
    with pytest.raises(RuntimeError, match="no priority here"):
        ext.update(slots, np.array([7.0, 8.0, 9.0]), a["raw"], a["leaf"], 1.0, 1e-10,
                   [items[s] for s in slots], a["stale"])
    # nothing numeric was written; the meta already changed (item 1) gets the stored value back lazily
    assert np.array_equal(a["raw"], raw0) and np.array_equal(a["leaf"], leaf0)
    assert a["stale"].tolist() == [False, True, False, False, False, False]
    items[4].meta = _Raising("priority_IS")
    with pytest.raises(RuntimeError, match="no priority_IS here"):
        ext.take_items(items, slots, [], None, a["leaf"], 0.5, 0.5, np.empty(3, np.float32), a["stale"], a["raw"])
    items[4].meta = _Raising("nothing")  # a working non-dict mapping is written through __setitem__
    res = []
    ext.take_items(items, slots, res, None, a["leaf"], 0.5, 0.5, np.empty(3, np.float32), a["stale"], a["raw"])
    assert "priority_IS" in items[4].meta and len(res) == 3


def test_tree_refresh_recomputes_prefix_sums(ext):
    vals = np.random.default_rng(0).random(96)
    C = np.zeros(96)
    up = np.zeros(3)
    nodes = np.array([40, 41, 70, 5], dtype=np.int64)
    blocks = np.empty(4, dtype=np.int64)
    bmax = np.zeros(3)
    cum = np.full(3, np.nan)
    cnt = ext.tree_refresh(vals, C, up, nodes, blocks, bmax, cum)
    assert blocks[:cnt].tolist() == [1, 2, 0]  # consecutive repeats dropped
    ref = np.cumsum(vals.reshape(3, 32), axis=1)
    assert np.allclose(C.reshape(3, 32), ref, rtol=1e-15) and np.allclose(up, ref[:, -1])
    assert bmax.tolist() == vals.reshape(3, 32).max(1).tolist()
    assert cum.tolist() == np.add.accumulate(up).tolist()  # from block 0: all of it, same sums
    vals[70] += 1.0
    cum[:2] = [-1.0, -2.0]  # left alone: only the sums from the first changed block (2) are redone
    ext.tree_refresh(vals, C, up, np.array([70], np.int64), blocks, None, cum)
    assert cum.tolist() == [-1.0, -2.0, -2.0 + up[2]]
    assert ext.tree_refresh(vals, C, up, nodes, nodes, None, None) == 3  # in place is allowed
    with pytest.raises(ValueError, match="bmax has 2 entries for 3 blocks"):
        ext.tree_refresh(vals, C, up, nodes, blocks, np.zeros(2), None)
    with pytest.raises(ValueError, match="cum has 4 entries, up only 3"):
        ext.tree_refresh(vals, C, up, nodes, blocks, None, np.zeros(4))


# ---------------------------------------------------------------------- through the buffer


@pytest.mark.multiprocess
def test_environment_variable_selects_numpy():
    code = "from pipeline.data import _accel, DequeBuffer, PrioritizedSampler as P; " \
           "p = DequeBuffer(4, sampler=P()).sampler; print(_accel.EXT, p.kernel, p._tree.kernel)"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, RLPIPE_NO_EXT="1", PYTHONPATH=root)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["None", "numpy", "numpy"]


def _filled(kernel, n=200, seed=0):
    with use_kernel(kernel):
        buf = DequeBuffer(n, seed=seed, sampler=PrioritizedSampler(alpha=0.6, anneal=100))
        per = buf.sampler
    rng = np.random.default_rng(seed)
    for i in range(n + 30):  # wrap around
        buf.push({"x": torch.tensor([float(i)])}, meta={"priority": float(rng.random() * 3 + 0.01)})
    return buf, per


def test_both_kernels_give_the_same_weights_priorities_and_meta():
    (b1, p1), (b2, p2) = _filled("C"), _filled("numpy")
    assert p1.kernel == "C" and p2.kernel == "numpy"
    rng = np.random.default_rng(1)
    for step in range(30):
        idx = rng.choice(b1.indices(), 16, replace=False).tolist()
        s1, s2 = b1.sample(indices=idx), b2.sample(indices=idx)
        assert np.allclose([it.meta["priority_IS"] for it in s1], [it.meta["priority_IS"] for it in s2],
                           rtol=1e-6)
        new = rng.random(16) * 4
        b1.update_many(idx, meta={"priority": new})
        b2.update_many(idx, meta={"priority": new})
        items1 = b1.sample(8)  # the direct route (compiled: one pass for items, weights and meta)
        b1.update_many([it.index for it in items1], meta={"priority": np.full(8, 0.5 + step)})
        b2.update_many([it.index for it in items1], meta={"priority": np.full(8, 0.5 + step)})
        assert all(it.meta["priority"] == 0.5 + step for it in items1)
        p2.sample_count = p1.sample_count
    for i in b1.indices():
        assert p1.priority(i) == p2.priority(i)
        assert b1.get_by_index(i).meta["priority"] == b2.get_by_index(i).meta["priority"] == p1.priority(i)
    assert np.allclose(p1._tree.leaves, p2._tree.leaves, rtol=1e-15)
    assert p1._tree.total == pytest.approx(p2._tree.total, rel=1e-12)
    assert p1._tree.min == p2._tree.min and p1._tree.max == p2._tree.max
    assert p1.max_priority == p2.max_priority


@pytest.mark.usefixtures("kernel")
def test_same_seed_same_samples_and_weights():
    name = "C" if _accel.EXT is not None else "numpy"
    runs = []
    for _ in range(2):
        buf, per = _filled(name, n=120, seed=7)
        out = []
        for step in range(20):
            items = buf.sample(10) if step % 3 else buf.sample(40)  # rejection / tree (40 * 8 > 120)
            out.append([(it.index, it.meta["priority_IS"]) for it in items])
            buf.update_many([it.index for it in items], meta={"priority": np.linspace(0.1, 5, len(items))})
            b = buf.sample_batch(6)
            out.append((b["indices"].tolist(), b.get("weight").tolist()))
        runs.append(out)
    assert runs[0] == runs[1]


@pytest.mark.usefixtures("kernel")
def test_update_many_with_odd_priority_arrays_takes_the_general_route():
    name = "C" if _accel.EXT is not None else "numpy"  # set by the kernel fixture
    buf, per = _filled(name, n=50)
    assert per.kernel == name
    items = buf.sample(6)
    ids = [it.index for it in items]
    strided = np.arange(12, dtype=np.float64)[::2] + 1.0
    buf.update_many(ids, meta={"priority": strided})  # not contiguous
    assert [per.priority(i) for i in ids] == strided.tolist()
    items = buf.sample(6)
    ids = [it.index for it in items]
    buf.update_many(np.array(ids), meta={"priority": torch.arange(6.0) + 2})  # array ids, tensor priorities
    assert [per.priority(i) for i in ids] == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    assert [buf.get_by_index(i).meta["priority"] for i in ids] == [2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    items = buf.sample(3)
    with pytest.raises(ValueError, match="priorities must be finite"):
        buf.update_many([it.index for it in items], meta={"priority": np.array([1.0, np.nan, 1.0])})


@pytest.mark.usefixtures("kernel")
def test_threads_pushing_sampling_and_updating_priorities_keep_the_tree_consistent():
    buf, per = _filled("C" if _accel.EXT is not None else "numpy", n=300)
    errors = []
    stop = time.monotonic() + 1.5

    def pusher(k):
        try:
            i = 0
            while time.monotonic() < stop and i < 3000:
                buf.push({"x": torch.tensor([float(i)])}, meta={"priority": 0.1 + (i % 7)})
                i += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    def learner():
        try:
            rng = np.random.default_rng(threading.get_ident() % 1000)
            n = 0
            while time.monotonic() < stop and n < 1500:
                n += 1
                if n % 2:
                    items = buf.sample(16)
                    assert len({it.index for it in items}) == 16
                    assert all(0 < it.meta["priority_IS"] <= 1.0 + 1e-6 for it in items)
                    buf.update_many([it.index for it in items], meta={"priority": rng.random(16) + 0.01})
                else:
                    b = buf.sample_batch(16)
                    assert len(set(b["indices"].tolist())) == 16 and b.get("weight").shape == (16,)
                    buf.update_many(b["indices"].tolist(), meta={"priority": rng.random(16) + 0.01})
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=pusher, args=(k,)) for k in range(2)] + \
              [threading.Thread(target=learner) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    s = buf._s
    live = s.dense[: s.count]
    tree = per._tree
    leaves = tree.leaves
    assert (leaves[live] > 0).all() and (np.delete(leaves, live) == 0).all()
    assert np.allclose(leaves[live], np.maximum(per._raw[live], 1e-10) ** 0.6, rtol=1e-12)
    assert tree.total == pytest.approx(leaves.sum(), rel=1e-9)
    assert tree.min == leaves[live].min() and tree.max == leaves.max()
    assert not tree._mark.any()
    for slot in live.tolist():  # every priority reaches meta when the item is read
        it = buf.get_by_index(s.items[slot].index)
        assert it.meta["priority"] == per._raw[slot]
