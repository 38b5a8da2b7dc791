"""Blocked sum/min trees for prioritized replay, built for few numpy calls per batch.

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
are the same as with numpy.

Empty leaves (0) have zero width and are never returned; a draw that rounding puts on one (a
``u`` within one ulp of a block's end) is redrawn exactly.
"""
from __future__ import annotations

from types import ModuleType
from typing import List, Optional

import numpy as np

from . import _accel
from .segment_tree_sampling import _B, _SHIFT, TreeSampling

__all__ = ["SumMinTree", "RawWords"]

_DEFAULT = object()

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


def _pos_min(a: np.ndarray) -> float:
    """Smallest positive value of ``a`` (``inf`` if none)."""
    return float(np.min(a, where=a > 0, initial=np.inf))


class SumMinTree(TreeSampling):
    """A sum tree and a min tree over ``capacity`` non-negative leaves.

    Empty leaves hold 0 (they are never sampled and are ignored by :attr:`min`). Not thread-safe
    by itself: the owner (the PER middleware) calls it under the buffer's lock.
    """

    def __getstate__(self) -> dict:  # copy.deepcopy / pickle: the kernels module is not copied
        return _accel.state_without_ext(self)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(_accel.ext_from_state(state))

    def __init__(self, capacity: int, fanout: int = _B, ext: Optional[ModuleType] = _DEFAULT) -> None:  # type: ignore[assignment]
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
        # compiled kernels (pipeline/data/_per_kernels.c) or None for numpy; default: _accel.EXT
        self._ext = _accel.EXT if ext is _DEFAULT else ext
        self._Cs = [lvl.C for lvl in self._levels]
        self._mark = np.zeros(len(self._leaf), dtype=np.uint8)  # zeroed scratch for the C samplers
        self._words: Optional[RawWords] = None

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
        levels = self._levels
        tri = self._tri
        ext = self._ext
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
