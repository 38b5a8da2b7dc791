"""PER's tree-free sampler (rejection sampling), the tree's lazily kept min/max, and the direct
route a buffer takes when PER is its only middleware: exact laws against brute-force numpy."""
import itertools

import numpy as np
import pytest
import torch

from pipeline.data import DequeBuffer, PrioritizedSampler
from pipeline.data.segment_tree import SumMinTree

pytestmark = pytest.mark.usefixtures("kernel")


def _pair_law(p):
    """Exact law of the ordered pair drawn by successive sampling (first i, then j != i)."""
    p = np.asarray(p, dtype=np.float64)
    p = p / p.sum()
    n = len(p)
    law = np.zeros((n, n))
    for i, j in itertools.permutations(range(n), 2):
        law[i, j] = p[i] * p[j] / (1 - p[i])
    return law


def _chi2(counts, law, total):
    exp = law * total
    m = exp > 0
    assert counts[~m].sum() == 0, "a pair with probability 0 was drawn"
    return float(((counts[m] - exp[m]) ** 2 / exp[m]).sum()), int(m.sum()) - 1


def _per_buffer(pri, seed=3, alpha=1.0):
    buf = DequeBuffer(len(pri), seed=seed, sampler=PrioritizedSampler(alpha=alpha))
    per = buf.sampler
    for i, p in enumerate(pri):
        buf.push(i, meta={"priority": float(p)})
    return buf, per


def _rejection(per):
    """The name of the rejection sampler of ``per``'s distinct draws: the compiled one or the numpy one."""
    return "rejection_c" if per.kernel == "C" else "rejection"


def _count_calls(per, name):
    calls = [0]
    orig = getattr(per, name)

    def wrapped(*a, **kw):
        calls[0] += 1
        return orig(*a, **kw)

    setattr(per, name, wrapped)
    return calls


def test_rejection_sampler_is_exact_successive_sampling():
    pri = np.arange(1, 17, dtype=np.float64)  # acceptance ~0.53: the rejection path is used
    buf, per = _per_buffer(pri)
    calls = _count_calls(per._distinct, _rejection(per))
    n = 24000
    counts = np.zeros((16, 16))
    for _ in range(n):
        a, b = (it.data for it in buf.sample(2))
        counts[a, b] += 1
    assert calls[0] == n
    stat, df = _chi2(counts, _pair_law(pri), n)
    assert stat < df + 6 * np.sqrt(2 * df), (stat, df)


def test_rejection_stream_continued_by_the_tree_keeps_the_law():
    # very skewed: the first item has 2/3 of the mass, so the forced short rejection stream keeps
    # hitting duplicates / rejections and the tree continues it (sample_distinct(chosen=...))
    pri = np.array([30.0] + [1.0] * 15)
    buf, per = _per_buffer(pri, seed=5)
    cont = _count_calls(per._tree, "sample_distinct")
    n = 20000
    counts = np.zeros((16, 16))
    for _ in range(n):
        per._distinct._acc = 1.0  # force the rejection sampler with a minimal stream
        slots = getattr(per._distinct, _rejection(per))(2)
        a, b = (buf._s.items[s].data for s in slots.tolist())
        counts[a, b] += 1
    assert cont[0] > n // 100  # the tree continuation really ran (after 4 short rounds)
    stat, df = _chi2(counts, _pair_law(pri), n)
    assert stat < df + 6 * np.sqrt(2 * df), (stat, df)


def test_tree_sample_distinct_continues_a_given_prefix():
    p = np.array([5.0, 1.0, 2.0, 3.0, 4.0])
    tree = SumMinTree(5)
    tree.set_many(np.arange(5), p)
    rng = np.random.default_rng(0)
    n = 20000
    counts = np.zeros(5)
    for _ in range(n):
        s = tree.sample_distinct(2, rng, [0]).tolist()
        assert s[0] == 0 and s[1] != 0
        counts[s[1]] += 1
    exp = p[1:] / p[1:].sum() * n
    assert ((counts[1:] - exp) ** 2 / exp).sum() < 3 + 6 * np.sqrt(6)
    assert np.allclose(tree.leaves, p)  # leaves restored after the skewed path


def test_low_acceptance_switches_to_the_tree_and_back():
    pri = np.array([1000.0] + [1.0] * 63)
    buf, per = _per_buffer(pri, seed=2)
    rej = _count_calls(per._distinct, _rejection(per))
    for _ in range(50):
        assert len({it.index for it in buf.sample(4)}) == 4
    assert per._distinct._acc < per._distinct.ACC_MIN and rej[0] < 10  # mostly the tree
    idx = [buf.get(k).index for k in range(64)]
    buf.update_many(idx, meta={"priority": np.ones(64)})  # priorities even out
    before = rej[0]
    for _ in range(20):
        buf.sample(4)
    assert rej[0] - before >= 19 and per._distinct._acc > 0.5


def test_tree_min_max_stay_exact_under_random_writes():
    rng = np.random.default_rng(0)
    cap = 300
    tree = SumMinTree(cap)
    ref = np.zeros(cap)
    for step in range(400):
        r = rng.random()
        if r < 0.45:
            idx = rng.integers(0, cap, 20)  # duplicates: the last write wins
            vals = rng.random(20) * (rng.random(20) > 0.1)
            tree.set_many(idx, vals)
            for i, v in zip(idx, vals):
                ref[i] = v
        elif r < 0.7:
            idx = rng.integers(0, cap, 10)
            vals = rng.random(10) + 0.01
            tree.set_many(idx, vals, positive=True)
            for i, v in zip(idx, vals):
                ref[i] = v
        elif r < 0.98:
            i = int(rng.integers(0, cap))
            v = float(rng.random()) if rng.random() > 0.2 else 0.0
            tree.set(i, v)
            ref[i] = v
        else:
            tree.clear()
            ref[:] = 0
        pos = ref[ref > 0]
        assert tree.min == (pos.min() if len(pos) else np.inf)
        assert tree.max == (ref.max() if len(pos) else 0.0)
        if step % 37 == 0:
            assert tree.total == pytest.approx(ref.sum())


def test_tree_dirty_overflow_rebuilds():
    tree = SumMinTree(100)
    ref = np.zeros(100)
    rng = np.random.default_rng(1)
    for _ in range(30):  # 30 * 10 queued leaves > capacity without a query in between
        idx = rng.choice(100, 10, replace=False)
        vals = rng.random(10) + 0.1
        tree.set_many(idx, vals, positive=True)
        ref[idx] = vals
    assert tree.total == pytest.approx(ref.sum())
    cum = np.cumsum(ref)
    u = rng.random(100) * cum[-1]
    assert (tree.find_prefixsum(u) == np.searchsorted(cum, u, side="right")).mean() > 0.97


def _weights_ref(per, buf, indices, alpha):
    raw = np.array([per.priority(i) for i in buf.indices()])
    leaf = np.maximum(raw, 1e-10) ** alpha
    mine = np.array([per.priority(i) for i in indices])
    return (np.maximum(mine, 1e-10) ** alpha / leaf.min()) ** -per.beta


@pytest.mark.parametrize("columnar", [True, False])
def test_direct_route_weights_and_priorities_match_brute_force(columnar):
    rng = np.random.default_rng(4)
    buf = DequeBuffer(64, columnar=columnar, seed=4, sampler=PrioritizedSampler(alpha=0.6, anneal=50))
    per = buf.sampler
    for i in range(80):  # wrap-around: evictions
        buf.push({"x": torch.tensor([float(i)])}, meta={"priority": float(rng.random() * 3 + 0.1)})
    for step in range(40):
        if step % 2:
            b = buf.sample_batch(8)
            beta = per.beta  # sample_count has advanced: the weights used the previous beta
            assert b.get("weight").dtype == torch.float32
            per.sample_count -= 1
            ref = _weights_ref(per, buf, b["indices"].tolist(), 0.6)
            per.sample_count += 1
            assert np.allclose(b.get("weight").numpy(), ref, rtol=1e-5), (b.get("weight"), ref)
            assert beta == per.beta
            assert [float(x) for x in b["x"][:, 0]] == [float(buf.get_by_index(i).data["x"][0])
                                                            for i in b["indices"].tolist()]
            new = rng.random(8) * 5
            if step % 3 == 0:  # raise the current minimum: the lazy min must notice
                lo = min(buf.indices(), key=per.priority)
                b_idx = list(b["indices"].tolist()) + [lo]
                new = np.append(new, 10.0)
            else:
                b_idx = b["indices"].tolist()
            buf.update_many(b_idx, meta={"priority": new})
            for i, p in zip(b_idx, new):
                assert per.priority(i) == p
                assert buf.get_by_index(i).meta["priority"] == p
        else:
            items = buf.sample(8)
            per.sample_count -= 1
            ref = _weights_ref(per, buf, [it.index for it in items], 0.6)
            per.sample_count += 1
            assert np.allclose([it.meta["priority_IS"] for it in items], ref, rtol=1e-5)
            new = rng.random(8) * 5 + 0.01
            buf.update_many([it.index for it in items], meta={"priority": new})
            for it, p in zip(items, new):  # written into the sampled items right away
                assert it.meta["priority"] == p == per.priority(it.index)
        if step % 5 == 4:
            buf.push({"x": torch.tensor([-1.0])})  # default priority = max seen
            assert per.priority(buf.get(-1).index) == per.max_priority
    st = per.state_dict()
    buf2 = DequeBuffer(64, seed=0, sampler=PrioritizedSampler())
    per2 = buf2.sampler
    for i in buf.indices():
        buf2._s.next_id = i
        buf2.push(buf.get_by_index(i).data)
    per2.load_state_dict(st)
    assert [per2.priority(i) for i in buf.indices()] == [per.priority(i) for i in buf.indices()]
