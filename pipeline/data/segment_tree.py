"""Vectorised sum/min segment trees for prioritized replay.

The tree has a fan-out of ``B`` (32) instead of 2: every internal node holds the sum (and the
minimum) of a block of ``B`` children. The top level (at most a few thousand nodes) is searched with
a cumulative sum and ``np.searchsorted``; below it, the in-block prefix sums of the visited blocks
are computed on the fly with one small matrix product. A buffer of 20,000 items therefore needs
one block level plus the top, and every operation works on whole batches of leaves with a handful
of numpy calls, which is what makes prioritized ``sample(64)`` affordable in Python.

Leaf updates are lazy: :meth:`SumMinTree.set` / :meth:`set_many` only write the leaves and remember
them; the internal nodes above all dirty leaves are recomputed together by :meth:`flush` (called
by :meth:`sample`, :attr:`total` and :attr:`min`). Sums are always recomputed from the children,
never updated by deltas, so they do not drift.
"""
from __future__ import annotations

from typing import Dict, List

import numpy as np

__all__ = ["SumMinTree"]

_TOP = 4096


class SumMinTree:
    """A sum tree and a min tree over ``capacity`` non-negative leaves.

    Empty leaves hold 0 (they are never sampled and are ignored by :attr:`min`).
    """

    def __init__(self, capacity: int, fanout: int = 32) -> None:
        if capacity < 1:
            raise ValueError(f"SumMinTree capacity must be >= 1, got {capacity}")
        self.capacity = int(capacity)
        self.B = B = int(fanout)
        self._tri = np.triu(np.ones((B, B)))  # x @ tri == cumsum(x, axis=1)
        self._ones = np.ones(B)
        # level 0 holds the leaves; every level but the top is padded to a multiple of B
        self._vals: List[np.ndarray] = []
        self._mins: List[np.ndarray] = []
        n = self.capacity
        while n > _TOP or (not self._vals and n > B):
            padded = -(-n // B) * B
            self._vals.append(np.zeros(padded))
            self._mins.append(np.full(padded, np.inf))
            n = padded // B
        self._vals.append(np.zeros(n))
        self._mins.append(np.full(n, np.inf))
        self._nblocks = [len(v) // B for v in self._vals[:-1]]
        top = len(self._vals[-1])
        self._top_cum = np.zeros(top)
        self._top_prev = np.zeros(top)  # exclusive prefix sums of the top level
        self._top_min = np.inf
        self._offsets: Dict[int, np.ndarray] = {}
        self._arange_cache: Dict[int, np.ndarray] = {}
        self._dirty: List[np.ndarray] = []
        self._dirty_scalar: List[int] = []
        self._is_dirty = False

    # ------------------------------------------------------------------ updates
    @property
    def leaves(self) -> np.ndarray:
        """The leaf values (read-only by convention; write through :meth:`set`)."""
        return self._vals[0][: self.capacity]

    def set(self, index: int, value: float) -> None:
        """Set one leaf (``value >= 0``; 0 means empty)."""
        self._vals[0][index] = value
        self._mins[0][index] = value if value > 0 else np.inf
        self._dirty_scalar.append(index)
        self._is_dirty = True

    def set_many(self, indices: np.ndarray, values: np.ndarray, positive: bool = False) -> None:
        """Set many leaves at once (vectorised); ``positive`` promises every value is > 0."""
        indices = np.asarray(indices, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        self._vals[0][indices] = values
        self._mins[0][indices] = values if positive else np.where(values > 0, values, np.inf)
        self._dirty.append(indices)
        self._is_dirty = True

    def clear(self) -> None:
        """Empty every leaf."""
        for v in self._vals:
            v[:] = 0.0
        for m in self._mins:
            m[:] = np.inf
        self._top_cum[:] = 0.0
        self._top_prev[:] = 0.0
        self._top_min = np.inf
        self._dirty.clear()
        self._dirty_scalar.clear()
        self._is_dirty = False

    def _block_offsets(self, n: int) -> np.ndarray:
        off = self._offsets.get(n)
        if off is None:
            off = self._offsets[n] = np.arange(0, n * self.B, self.B)
        return off

    def flush(self) -> None:
        """Recompute the internal nodes above all leaves changed since the last flush."""
        if not self._is_dirty:
            return
        parts = self._dirty
        if self._dirty_scalar:
            parts.append(np.array(self._dirty_scalar, dtype=np.int64))
        d = parts[0] if len(parts) == 1 else np.concatenate(parts)
        self._dirty = []
        self._dirty_scalar = []
        self._is_dirty = False
        B = self.B
        full = False
        for lvl, nblocks in enumerate(self._nblocks):
            vals, mins = self._vals[lvl], self._mins[lvl]
            if not full and len(d) * 4 >= nblocks:
                full = True
            if full:
                self._vals[lvl + 1][:nblocks] = vals.reshape(nblocks, B) @ self._ones
                self._mins[lvl + 1][:nblocks] = mins.reshape(nblocks, B).min(1)
            else:
                p = d // B
                self._vals[lvl + 1][p] = vals.reshape(nblocks, B).take(p, axis=0) @ self._ones
                m = mins.reshape(nblocks, B).take(p, axis=0).ravel()
                self._mins[lvl + 1][p] = np.minimum.reduceat(m, self._block_offsets(len(p)))
                d = p
        np.add.accumulate(self._vals[-1], out=self._top_cum)
        self._top_prev[1:] = self._top_cum[:-1]
        self._top_min = float(self._mins[-1].min())

    # ------------------------------------------------------------------ queries
    @property
    def total(self) -> float:
        """Sum of all leaves."""
        self.flush()
        return float(self._top_cum[-1])

    @property
    def min(self) -> float:
        """Smallest positive leaf (``inf`` when the tree is empty)."""
        self.flush()
        return self._top_min

    def find_prefixsum(self, u: np.ndarray) -> np.ndarray:
        """For each ``u`` in ``[0, total)``, return the leaf ``i`` with
        ``sum(leaves[:i]) <= u < sum(leaves[:i+1])`` (vectorised)."""
        self.flush()
        u = np.asarray(u, dtype=np.float64)
        top = self._vals[-1]
        j = np.searchsorted(self._top_cum, u, side="right")
        np.minimum(j, len(top) - 1, out=j)
        if not self._nblocks:
            return j
        u = u - self._top_prev[j]
        B = self.B
        for lvl in range(len(self._nblocks) - 1, -1, -1):
            x = self._vals[lvl].reshape(self._nblocks[lvl], B).take(j, axis=0)
            c = x @ self._tri  # inclusive in-block prefix sums of the visited blocks
            if lvl:
                excl = c - x
            c[:, -1] = np.inf  # rounding can leave u at a block's total: then take the last child
            k = (c > u[:, None]).argmax(1)
            if lvl:
                u = u - excl[np.arange(len(u)), k]
            j *= B
            j += k
        return j

    def sample(self, n: int, rng: np.random.Generator, stratified: bool = True) -> np.ndarray:
        """Draw ``n`` leaves with probability proportional to their value (with replacement).

        With ``stratified`` the mass is cut into ``n`` equal segments and one draw is made from each
        (lower variance, as in the PER paper). Returns leaf indices; raises ``ValueError`` when the
        tree is empty.
        """
        total = self.total
        if not total > 0:
            raise ValueError("cannot sample from an empty priority tree")
        if stratified:
            ar = self._arange_cache.get(n)
            if ar is None:
                ar = self._arange_cache[n] = np.arange(n, dtype=np.float64)
            u = (ar + rng.random(n)) * (total / n)
        else:
            u = rng.random(n) * total
        idx = self.find_prefixsum(u)
        leaves = self._vals[0]
        bad = leaves[idx] <= 0
        tries = 0
        while bad.any():  # only on floating point edge cases
            tries += 1
            if tries > 20:
                pos = np.flatnonzero(leaves[: self.capacity] > 0)
                idx[bad] = pos[rng.integers(0, len(pos), int(bad.sum()))]
                break
            idx[bad] = self.find_prefixsum(rng.random(int(bad.sum())) * total)
            bad = leaves[idx] <= 0
        return idx
