"""The sum/min tree of prioritized replay: :class:`SumMinTree`, built for few numpy calls per batch.

Layout: the leaves are cut into blocks of ``B = 32``; level ``l + 1`` holds the sums of the
blocks of level ``l``; levels are added until the top has at most ``_TOP`` nodes
(one block level for up to 65,536 leaves). Every block level also keeps ``C``, the inclusive
prefix sums inside each block (``C[b, -1]`` is block ``b``'s sum).

Sampling ``k`` leaves proportionally to their values (:meth:`SumMinTree.sample_iid`) draws one
uniform number per level: the top node by ``searchsorted`` over the top level's cumulative sums,
then at every level below a child with probability ``child / block sum``, found branch-free by
comparing a uniform share of the block's sum against the block's row of ``C`` (one gather, one
comparison, one ``argmax`` for the whole batch). The product of these conditional probabilities
is exactly ``leaf / total``. Exact sampling *without* replacement
(:meth:`SumMinTree.sample_distinct`) keeps the first ``k`` distinct leaves of an i.i.d. stream,
which is successive sampling (each next distinct leaf is drawn proportionally to the values of
the leaves not drawn yet).

Updates are lazy: :meth:`SumMinTree.set` / :meth:`SumMinTree.set_many` write the leaves and
remember them; :meth:`SumMinTree.flush` (run by every query) recomputes only the blocks above the
changed leaves (a gather, a small matrix product for the prefix sums and a scatter per level)
plus the top level's cumulative sum. Sums are recomputed from the children, never updated by
deltas, so they do not drift. Cost per flushed batch of ``m`` leaves: ``O(m * B * levels + _TOP)``.
When more leaves are queued than the tree holds (a user that never queries it, e.g. PER's
rejection sampler), the queue is dropped and the next flush rebuilds every level.

The smallest positive leaf and the largest leaf (:attr:`SumMinTree.min`, :attr:`SumMinTree.max`)
are not tree queries: they are kept exact on every write (a new extreme replaces the old one) and
recomputed only after a write overwrote the current extreme leaf: the min by one vectorised pass
over the leaves, the max from the blocks' maxima (kept by every flush) or, before a flush, from
the leaves. Neither needs a flush. :attr:`SumMinTree.max_bound` is an upper bound that is never
recomputed (enough for rejection sampling).

With the compiled kernels (``pipeline/data/_per_kernels.c``, see ``_accel``) a flush refreshes
each touched block in one call and :meth:`SumMinTree.sample_distinct` draws in C (one uniform word
per level, branch-free searches, distinctness by a scratch mark array); the layout and the laws
are the same as with numpy. The C samplers read raw 64-bit words of the generator
(:class:`RawWords`, drawn ahead in blocks and shared through :meth:`SumMinTree.words`).

Empty leaves (0) have zero width and are never returned; a draw that rounding puts on one (a
``u`` within one ulp of a block's end) is redrawn exactly.
"""
from __future__ import annotations

from types import ModuleType
from typing import List, Optional, Tuple

import numpy as np

from . import _accel

__all__ = ["SumMinTree", "RawWords"]

_DEFAULT = ModuleType("_accel.EXT")  # SumMinTree(ext=...) not given: the kernels _accel.EXT holds then

_SHIFT = 5  # log2 of the block size (the tree's fanout B)
_B = 1 << _SHIFT
_TOP = 2048


class _Level:
    """One block level: ``vals`` of its nodes (padded to whole blocks) and ``C``, the
    inclusive prefix sums inside every block (``C[b, -1]`` is block ``b``'s sum)."""

    __slots__ = ("n", "nb", "vals", "v2", "C")

    def __init__(self, n: int) -> None:
        self.n = n
        self.nb = nb = -(-n // _B)
        self.vals = np.zeros(nb * _B)
        self.v2 = self.vals.reshape(nb, _B)
        self.C = np.zeros((nb, _B))


class RawWords:
    """Raw 64-bit words of a numpy ``Generator``, drawn ahead in blocks for the compiled samplers
    (which turn them into uniform integers and floats). ``buf[pos:]`` are the unused words."""

    __slots__ = ("rng", "buf", "pos")

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.buf = np.zeros(0, dtype=np.uint64)
        self.pos = 0

    def ensure(self, need: int) -> None:
        """Make at least ``need`` unused words available (the few left of a block are dropped)."""
        if len(self.buf) - self.pos < need:
            self.refill(need)

    def refill(self, need: int = 0) -> None:
        """A new block of at least ``need`` words (the unused rest of the old one is dropped)."""
        self.buf = self.rng.bit_generator.random_raw(max(16384, need))
        self.pos = 0


class SumMinTree:
    """A sum tree and a min tree over ``capacity`` non-negative leaves (see the module docstring).

    Empty leaves hold 0 (they are never sampled and are ignored by :attr:`min`). Not thread-safe
    by itself: the owner (a :class:`~pipeline.data.prioritized_sampler.PrioritizedSampler`) calls it
    under the storage's lock. ``ext``: the compiled kernels or None for numpy (default: ``_accel.EXT``).
    """

    def __init__(self, capacity: int, fanout: int = _B, ext: Optional[ModuleType] = _DEFAULT) -> None:
        if capacity < 1:
            raise ValueError(f"SumMinTree capacity must be >= 1, got {capacity}")
        if fanout != _B:
            raise ValueError(f"SumMinTree fanout is fixed at {_B}, got {fanout}")
        self.capacity = int(capacity)
        self.B = _B
        self._tri = np.triu(np.ones((_B, _B)))  # x @ tri == inclusive prefix sums of x's rows
        self._levels: List[_Level] = []
        n = self.capacity
        while True:
            lvl = _Level(n)
            self._levels.append(lvl)
            n = lvl.nb
            if n <= _TOP:
                break
        self._bmax = np.zeros(self._levels[0].nb)  # the largest leaf of every block (when flushed)
        self._top = np.zeros(n)  # block sums of the last level
        self._top_cum = np.zeros(n)
        self._top_inner = self._top_cum[:-1]  # searching these boundaries never leaves [0, n)
        self._leaf = self._levels[0].vals
        self._total = 0.0
        self._dirty: List[np.ndarray] = []
        self._dirty_scalar: List[int] = []
        self._is_dirty = False
        self._ndirty = 0  # leaves queued in _dirty/_dirty_scalar; past capacity: rebuild everything
        self._full = False
        # exact largest / smallest positive leaf, kept without the tree: updated on every write and
        # recomputed from the leaves only when the current extreme leaf is overwritten
        self._lmax = 0.0  # an upper bound on every leaf; the largest leaf when _max_ok
        self._lmin = np.inf
        self._max_ok = True
        self._min_ok = True
        self._ext = _accel.EXT if ext is _DEFAULT else ext
        self._Cs = [lvl.C for lvl in self._levels]
        self._mark = np.zeros(len(self._leaf), dtype=np.uint8)  # zeroed scratch for the C samplers
        self._words: Optional[RawWords] = None

    def __getstate__(self) -> dict:  # copy.deepcopy / pickle: the kernels module is not copied
        return _accel.state_without_ext(self)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(_accel.ext_from_state(state))

    @property
    def kernel(self) -> str:
        """``"C"`` (compiled kernels) or ``"numpy"``."""
        return _accel.kernel_name(self._ext)

    def words(self, rng: np.random.Generator) -> RawWords:
        """The block of raw words drawn ahead from ``rng`` (shared by the C samplers)."""
        w = self._words
        if w is None or w.rng is not rng:
            w = self._words = RawWords(rng)
        return w

    # ------------------------------------------------------------------ updates
    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (read-only by convention; write through :meth:`set`)."""
        return self._leaf[: self.capacity]

    def set(self, index: int, value: float) -> None:
        """Set one leaf (``value >= 0``; 0 means empty)."""
        if not 0 <= index < self.capacity:
            raise IndexError(f"leaf {index} out of range for a tree of capacity {self.capacity}")
        value = float(value)
        old = float(self._leaf[index])
        self._leaf[index] = value
        if old >= self._lmax and value < old:
            self._max_ok = False
        elif value > self._lmax:
            self._lmax = value
        if 0 < old <= self._lmin and not 0 < value <= old:
            self._min_ok = False
        elif 0 < value < self._lmin:
            self._lmin = value
        self._is_dirty = True
        if self._full:
            return
        self._dirty_scalar.append(index)
        self._ndirty += 1
        if self._ndirty > self.capacity:
            self._overflow()

    def set_many(self, indices: np.ndarray, values: np.ndarray, positive: bool = False,
                 distinct: bool = False) -> None:
        """Set many leaves at once (vectorised); ``positive`` promises every value is > 0 and
        ``distinct`` that no index repeats. ``indices`` must be in ``[0, capacity)``."""
        indices = np.asarray(indices, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if not len(indices):
            return
        leaf = self._leaf
        old = leaf.take(indices)
        leaf[indices] = values
        # what was stored (with repeated indices the last write wins)
        cur = values if distinct else leaf.take(indices)
        if self._min_ok:
            vmin = float(np.minimum.reduce(cur)) if positive else _pos_min(cur)
        else:
            vmin = np.inf  # not needed
        self.wrote(indices, float(np.minimum.reduce(old)), float(np.maximum.reduce(old)), vmin,
                   float(np.maximum.reduce(cur)))

    def wrote(self, indices: np.ndarray, old_lo: float, old_hi: float, new_lo: float, new_hi: float) -> None:
        """Bookkeeping after the leaves at ``indices`` (int64 array, ``[0, capacity)``) were written
        directly (e.g. by the compiled ``update`` kernel): ``old_lo`` / ``old_hi`` are the smallest /
        largest value they held before, ``new_lo`` the smallest positive (``inf`` if none) and
        ``new_hi`` the largest value they hold now."""
        if new_hi > self._lmax:  # a new largest leaf (the bound stays exact if it was)
            self._lmax = new_hi
        elif self._max_ok and old_hi >= self._lmax:
            self._max_ok = False  # the largest leaf may be overwritten: _lmax is only a bound now
        if self._min_ok:
            if old_lo <= self._lmin:  # the smallest leaf may be overwritten
                self._min_ok = False
            elif new_lo < self._lmin:
                self._lmin = new_lo
        self._is_dirty = True
        if self._full:
            return
        self._dirty.append(indices)
        self._ndirty += len(indices)
        if self._ndirty > self.capacity:
            self._overflow()

    def _overflow(self) -> None:
        # more queued leaves than the tree has: forget them and rebuild every level at the next flush
        self._dirty = []
        self._dirty_scalar = []
        self._ndirty = 0
        self._full = True

    def clear(self) -> None:
        """Empty every leaf."""
        for lvl in self._levels:
            lvl.vals[:] = 0.0
            lvl.C[:] = 0.0
        self._bmax[:] = 0.0
        self._top[:] = 0.0
        self._top_cum[:] = 0.0
        self._total = 0.0
        self._dirty.clear()
        self._dirty_scalar.clear()
        self._is_dirty = False
        self._ndirty = 0
        self._full = False
        self._lmax = 0.0
        self._lmin = np.inf
        self._max_ok = self._min_ok = True

    def flush(self) -> None:
        """Recompute the blocks above all leaves changed since the last flush."""
        if not self._is_dirty:
            return
        parts = self._dirty
        if self._dirty_scalar:
            parts.append(np.array(self._dirty_scalar, dtype=np.int64))
        d: Optional[np.ndarray]
        if self._full or not parts:
            d = None
        else:
            d = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self._dirty = []
        self._dirty_scalar = []
        self._ndirty = 0
        self._full = False
        self._is_dirty = False
        levels, tri, ext = self._levels, self._tri, self._ext
        cum_done = False
        for li, lvl in enumerate(levels):
            top = li + 1 == len(levels)
            up_vals = self._top if top else levels[li + 1].vals
            bmax = self._bmax if li == 0 else None
            if d is None or len(d) * 2 >= lvl.nb:  # many blocks touched: redo the whole level
                d = None
                np.matmul(lvl.v2, tri, out=lvl.C)
                up_vals[: lvl.nb] = lvl.C[:, -1]
                if bmax is not None:
                    np.maximum.reduce(lvl.v2, axis=1, out=bmax)
                continue
            if ext is not None:  # compiled: each touched block's prefix sums (and max), in one call
                blocks = np.empty(len(d), dtype=np.int64)
                d = blocks[: ext.tree_refresh(lvl.vals, lvl.C, up_vals, d, blocks, bmax,
                                              self._top_cum if top else None)]
                cum_done = top  # the top's cumulative sums too
                continue
            p = d >> _SHIFT
            rows = lvl.v2.take(p, 0)
            c = rows @ tri
            lvl.C[p] = c
            up_vals[p] = c[:, -1]
            if bmax is not None:
                bmax[p] = np.maximum.reduce(rows, axis=1)
            d = p
        if not cum_done:
            np.add.accumulate(self._top, out=self._top_cum)
        self._total = float(self._top_cum[-1])

    # ------------------------------------------------------------------ queries
    @property
    def total(self) -> float:
        """Sum of all leaves."""
        self.flush()
        return self._total

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when the tree is empty). Exact; needs no flush: it is
        kept up to date on every write and recomputed from the leaves (one vectorised pass) only
        after the smallest leaf was overwritten."""
        if not self._min_ok:
            self._lmin = _pos_min(self._leaf)
            self._min_ok = True
        return self._lmin

    @property
    def max_bound(self) -> float:
        """An upper bound on every leaf, free to read: :attr:`max` or more (after the largest leaf
        was lowered, until :attr:`max` is read again)."""
        return self._lmax

    @property
    def max(self) -> float:
        """Largest leaf (0 when the tree is empty); exact, maintained like :attr:`min`."""
        if not self._max_ok:  # from the blocks' maxima when they are up to date, else from the leaves
            self._lmax = float(np.maximum.reduce(self._leaf if self._is_dirty else self._bmax))
            self._max_ok = True
        return self._lmax

    # ------------------------------------------------------------------ draws
    def find_prefixsum(self, u: np.ndarray) -> np.ndarray:
        """For each ``u`` in ``[0, total)``, return the leaf ``i`` with
        ``sum(leaves[:i]) <= u < sum(leaves[:i+1])`` (vectorised; at a boundary, rounding may
        return a neighbouring non-empty leaf)."""
        self.flush()
        u = np.asarray(u, dtype=np.float64)
        j = self._top_inner.searchsorted(u, "right")
        res = u - (self._top_cum[j] - self._top[j])  # mass left inside top node j
        ar = np.arange(len(u))
        for li in range(len(self._levels) - 1, -1, -1):
            lvl = self._levels[li]
            rows = lvl.C.take(j, 0)
            k = (rows > res[:, None]).argmax(1)
            k[rows[:, -1] <= res] = _B - 1  # rounding pushed res to the block's end
            j = (j << _SHIFT) + k
            if li:
                res = res - (rows[ar, k] - lvl.vals[j])
        return _nearest_nonempty(self._leaf, j)

    def sample_iid(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` independent draws, leaf ``i`` with probability ``leaves[i] / total``.

        One uniform number per level: the top node by ``searchsorted`` over the top's cumulative
        sums, then at every block level a child with probability ``child / block sum`` (a branch-free
        comparison against the block's prefix sums). Raises ``ValueError`` when the tree is empty.
        """
        self.flush()
        total = self._total
        if not total > 0:
            raise ValueError("cannot sample from an empty priority tree")
        levels = self._levels
        r = rng.random((len(levels) + 1, n))
        r0 = r[0]
        r0 *= total
        j = self._top_inner.searchsorted(r0, "right")
        for li in range(len(levels) - 1, -1, -1):
            rows = levels[li].C.take(j, 0)
            q = r[li + 1]
            q *= rows[:, -1]  # uniform in [0, block sum)
            j = (j << _SHIFT) + (rows > q[:, None]).argmax(1)
        if not np.minimum.reduce(self._leaf.take(j)) > 0:  # rounding at an edge (~1e-16): redraw those
            bad = self._leaf.take(j) <= 0
            j[bad] = _exact_draw(self.leaves, int(bad.sum()), rng)
        return j

    def sample(self, n: int, rng: np.random.Generator, stratified: bool = True) -> np.ndarray:
        """Draw ``n`` leaves with probability proportional to their value (with replacement).

        With ``stratified`` the mass is cut into ``n`` equal segments and one draw is made from each
        (lower variance, as in the PER paper; the expected count of every leaf is still
        ``n * leaf / total``); otherwise the draws are independent. Returns leaf indices; raises
        ``ValueError`` when the tree is empty.
        """
        if not stratified:
            return self.sample_iid(n, rng)
        total = self.total
        if not total > 0:
            raise ValueError("cannot sample from an empty priority tree")
        u = (np.arange(n, dtype=np.float64) + rng.random(n)) * (total / n)
        return self.find_prefixsum(u)

    def sample_distinct(self, k: int, rng: np.random.Generator, chosen: Optional[List[int]] = None) -> np.ndarray:
        """``k`` distinct leaves by successive sampling: the first with probability ``leaf / total``,
        every next one proportionally to the leaves not drawn yet (the law of numpy's
        ``choice(replace=False, p=...)``).

        The first ``k`` distinct leaves of a stream of independent draws (with a few spare draws, so
        a duplicate rarely costs a second round). When duplicates keep it short (very skewed values)
        the leaves taken are set to 0 while the rest are drawn, then restored: the same law.
        ``chosen``: the distinct leaves (in order) of a stream drawn elsewhere (e.g. by rejection
        sampling), continued here: the law is unchanged. With the compiled kernels the stream is
        drawn in C. ``ValueError`` when fewer than ``k`` leaves are non-empty.
        """
        if k <= 0:
            return np.zeros(0, dtype=np.int64)
        if self._ext is not None:
            return self._sample_distinct_c(k, rng, chosen)
        if chosen is None:
            idx = self.sample_iid(k + 2 + (k >> 3), rng)
            lst = idx.tolist()
            if len(set(lst[:k])) == k:
                return idx[:k]
            chosen = list(dict.fromkeys(lst))
        else:
            chosen = list(dict.fromkeys(chosen))
        for _ in range(2):
            if len(chosen) >= k:
                return np.array(chosen[:k], dtype=np.int64)
            chosen = list(dict.fromkeys(chosen + self.sample_iid(2 * (k - len(chosen)) + 8, rng).tolist()))
        if len(chosen) >= k:
            return np.array(chosen[:k], dtype=np.int64)
        # very skewed: take the chosen leaves out of the tree while drawing the rest
        saved: List[Tuple[np.ndarray, np.ndarray]] = []
        try:
            taken = np.array(chosen, dtype=np.int64)
            while len(chosen) < k:
                self._take_out(taken, saved, k)
                seen = set(chosen)
                new = [i for i in dict.fromkeys(self.sample_iid(k - len(chosen), rng).tolist()) if i not in seen]
                chosen.extend(new)
                taken = np.array(new, dtype=np.int64)
        finally:
            self._put_back(saved)
        return np.array(chosen[:k], dtype=np.int64)

    def _take_out(self, taken: np.ndarray, saved: List[Tuple[np.ndarray, np.ndarray]], k: int) -> None:
        """Set the leaves ``taken`` to 0, remembering them in ``saved`` (for :meth:`_put_back`);
        ``ValueError`` when no non-empty leaf is left for the rest of ``k`` distinct draws."""
        saved.append((taken, self._leaf[taken].copy()))
        self.set_many(taken, np.zeros(len(taken)))
        if not self.total > 0:
            have = sum(len(t) for t, _ in saved)
            raise ValueError(f"cannot draw {k} distinct leaves: only {have} are non-empty")

    def _put_back(self, saved: List[Tuple[np.ndarray, np.ndarray]]) -> None:
        for taken, values in reversed(saved):
            self.set_many(taken, values, positive=True)

    def _draw_c(self, out: np.ndarray, got: int, k: int, rng: np.random.Generator, limit: int) -> int:
        """Continue the distinct prefix ``out[:got]`` with at most ``limit`` compiled tree draws."""
        ext = self._ext
        assert ext is not None
        words = self.words(rng)
        per = len(self._levels) + 1  # words per draw
        while got < k and limit > 0:
            words.ensure(per * min(limit, 4 * k + 64))
            got, words.pos, d = ext.tree_draw(self._top, self._top_cum, self._Cs, words.buf, words.pos,
                                              self._leaf, k, out, got, self._mark, limit)
            limit -= d
        return got

    def _sample_distinct_c(self, k: int, rng: np.random.Generator, chosen: Optional[List[int]]) -> np.ndarray:
        """:meth:`sample_distinct` with the compiled sampler (same law, same skewed fallback)."""
        self.flush()
        if not self._total > 0:
            raise ValueError("cannot sample from an empty priority tree")
        out = np.empty(k, dtype=np.int64)
        got = 0
        if chosen:
            pre = list(dict.fromkeys(chosen))[:k]
            got = len(pre)
            out[:got] = pre
        got = self._draw_c(out, got, k, rng, 2 * k + 16)
        if got >= k:
            return out
        # very skewed: take the leaves drawn so far out of the tree while drawing the rest (after
        # removing them, the next distinct draw is proportional to the remaining leaves: same law)
        saved: List[Tuple[np.ndarray, np.ndarray]] = []
        try:
            start = 0
            for _ in range(64):
                if got >= k:
                    return out
                self._take_out(out[start:got].copy(), saved, k)
                start = got
                got = self._draw_c(out, got, k, rng, 2 * (k - got) + 16)
        finally:
            self._put_back(saved)
        if got >= k:
            return out
        raise RuntimeError("SumMinTree: the compiled sampler made no progress (please report this)")


def _pos_min(a: np.ndarray) -> float:
    """Smallest positive value of ``a`` (``inf`` if none)."""
    return float(np.min(a, where=a > 0, initial=np.inf))


def _nearest_nonempty(leaves: np.ndarray, j: np.ndarray) -> np.ndarray:
    """``j`` with every index of an empty leaf (rounding put a ``u`` on it, maybe in the padding
    after the last leaf) replaced by the nearest non-empty leaf at or after it, else the last one."""
    bad = leaves.take(j) <= 0
    if bad.any():
        pos = np.flatnonzero(leaves > 0)
        if len(pos):
            k = np.minimum(pos.searchsorted(j[bad]), len(pos) - 1)
            j[bad] = pos[k]
    return j


def _exact_draw(leaves: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` draws proportional to ``leaves`` from a fresh cumulative sum: slow, O(capacity); the
    rounding fallback of :meth:`SumMinTree.sample_iid` only."""
    pos = np.flatnonzero(leaves > 0)
    cum = np.cumsum(leaves[pos])
    k = np.minimum(cum.searchsorted(rng.random(n) * cum[-1], "right"), len(pos) - 1)
    return pos[k]
