"""The blocked sum/min tree against brute-force numpy references, and the exact laws of its samplers."""
import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data.segment_tree import SumMinTree

pytestmark = pytest.mark.usefixtures("kernel")

values = st.one_of(st.just(0.0), st.floats(1e-9, 1e9, allow_nan=False, allow_infinity=False))


@settings(max_examples=60, deadline=None)
@given(cap=st.integers(1, 3000), data=st.data())
def test_tree_matches_numpy_reference(cap, data):
    tree = SumMinTree(cap)
    ref = np.zeros(cap)
    for _ in range(data.draw(st.integers(1, 6))):
        n = data.draw(st.integers(1, min(cap, 80)))
        idx = np.array(data.draw(st.lists(st.integers(0, cap - 1), min_size=n, max_size=n)))
        val = np.array(data.draw(st.lists(values, min_size=n, max_size=n)))
        if data.draw(st.booleans()):
            tree.set_many(idx, val)
        else:
            for i, v in zip(idx.tolist(), val.tolist()):
                tree.set(i, v)
        for i, v in zip(idx.tolist(), val.tolist()):
            ref[i] = v  # last write wins, as in the tree
        assert tree.total == pytest.approx(ref.sum(), rel=1e-9, abs=1e-300)
        pos = ref[ref > 0]
        assert tree.min == (pos.min() if len(pos) else np.inf)  # exact: no arithmetic involved
        assert np.array_equal(tree.leaves, ref)
        lvl = tree._levels[0]
        assert (np.diff(lvl.C, axis=1) >= 0).all()  # in-block prefix sums are monotone
        assert np.allclose(lvl.C[:, -1], lvl.v2.sum(1), rtol=1e-12, atol=0)
        if len(pos):
            got = tree.sample_iid(50, np.random.default_rng(0))
            assert (ref[got] > 0).all()
            k = data.draw(st.integers(1, len(pos)))
            d = tree.sample_distinct(k, np.random.default_rng(1))
            assert len(set(d.tolist())) == k and (ref[d] > 0).all()
            u = np.random.default_rng(2).random(40) * ref.sum()
            cum = np.cumsum(ref)
            got = tree.find_prefixsum(u)
            assert (ref[got] > 0).all()
            far = np.abs(cum[:, None] - u[None, :]).min(0) > 1e-9 * ref.sum()  # not at a boundary
            assert (got[far] == np.searchsorted(cum, u[far], side="right")).all()
        else:
            with pytest.raises(ValueError):
                tree.sample_iid(1, np.random.default_rng(0))


def test_multi_level_tree():
    cap = 70000  # 2188 blocks > _TOP: two block levels
    tree = SumMinTree(cap)
    assert len(tree._levels) == 2
    rng = np.random.default_rng(0)
    ref = rng.random(cap) * 1e-3
    heavy = np.array([5, 40000, 69999])
    ref[heavy] = [10.0, 20.0, 30.0]
    tree.set_many(np.arange(cap), ref)
    assert tree.total == pytest.approx(ref.sum())
    got = tree.sample_iid(20000, rng)
    share = np.array([(got == h).mean() for h in heavy])
    assert np.allclose(share, ref[heavy] / ref.sum(), atol=0.015)
    tree.set(40000, 0.0)
    assert 40000 not in set(tree.sample_iid(5000, rng).tolist())
    assert tree.min == ref[ref > 0][np.arange(cap)[ref > 0] != 40000].min()


def test_sample_iid_frequencies_follow_values():
    tree = SumMinTree(100)
    p = np.zeros(100)
    p[[0, 31, 32, 63, 99]] = [1.0, 2.0, 3.0, 4.0, 10.0]
    tree.set_many(np.arange(100), p)
    got = tree.sample_iid(40000, np.random.default_rng(3))
    freq = np.bincount(got, minlength=100) / len(got)
    assert np.allclose(freq, p / p.sum(), atol=0.01)


def _successive_set_probs(p, k):
    """Exact law of the set drawn by successive sampling (draw proportionally, remove, repeat)."""
    out = {}
    for perm in itertools.permutations(range(len(p)), k):
        rest, pr = p.sum(), 1.0
        for i in perm:
            pr *= p[i] / rest
            rest -= p[i]
        key = frozenset(perm)
        out[key] = out.get(key, 0.0) + pr
    return out


@pytest.mark.parametrize("p,k", [
    ([1.0, 2.0, 3.0, 4.0], 2),
    ([1000.0, 1000.0, 1.0, 1.0, 1.0], 3),  # duplicates keep the stream short: exclusion rounds
    ([1e6, 1.0, 2.0, 3.0], 2),
])
def test_sample_distinct_is_exact_successive_sampling(p, k):
    p = np.array(p)
    tree = SumMinTree(len(p))
    tree.set_many(np.arange(len(p)), p)
    rng = np.random.default_rng(4)
    n = 4000
    counts = {}
    for _ in range(n):
        s = tree.sample_distinct(k, rng)
        assert len(set(s.tolist())) == k
        key = frozenset(s.tolist())
        counts[key] = counts.get(key, 0) + 1
    assert np.array_equal(tree.leaves, p)  # leaves taken out during exclusion rounds are restored
    for key, pr in _successive_set_probs(p, k).items():
        assert abs(counts.get(key, 0) / n - pr) < 0.02, (key, counts.get(key, 0) / n, pr)


def test_sample_distinct_takes_everything_and_refuses_too_many():
    tree = SumMinTree(10)
    tree.set_many(np.arange(10), np.array([1e9] + [1e-9] * 9))
    rng = np.random.default_rng(0)
    assert sorted(tree.sample_distinct(10, rng).tolist()) == list(range(10))
    tree.set(3, 0.0)
    with pytest.raises(ValueError, match="distinct"):
        tree.sample_distinct(10, rng)
    assert tree.leaves[4] == 1e-9 and tree.leaves[0] == 1e9  # restored after the failure


def test_bad_construction_and_index():
    with pytest.raises(ValueError):
        SumMinTree(0)
    with pytest.raises(ValueError, match="fanout"):
        SumMinTree(10, fanout=2)
    with pytest.raises(IndexError):
        SumMinTree(10).set(10, 1.0)
