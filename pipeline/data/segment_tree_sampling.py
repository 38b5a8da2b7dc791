"""Drawing leaves from a :class:`~pipeline.data.segment_tree.SumMinTree`: the sampling half of
the tree (a mixin; the levels, leaves and bookkeeping it reads are set up in :mod:`.segment_tree`,
whose docstring describes the layout and the laws)."""
from __future__ import annotations

from typing import List, Optional

import numpy as np

__all__ = ["TreeSampling"]

_SHIFT = 5  # log2 of the block size (the tree's fanout B)
_B = 1 << _SHIFT


class TreeSampling:
    """``find_prefixsum``, ``sample_iid``, ``sample`` (stratified) and ``sample_distinct``."""

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
        return self._fix_empty(j)

    def _fix_empty(self, j: np.ndarray) -> np.ndarray:
        bad = self._leaf.take(j) <= 0
        if bad.any():  # rounding put u on an empty leaf: take the nearest non-empty one
            pos = np.flatnonzero(self._leaf[: self.capacity] > 0)
            if len(pos):
                k = np.minimum(pos.searchsorted(j[bad]), len(pos) - 1)
                j[bad] = pos[k]
        return j

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
            j[bad] = self._exact_draw(int(bad.sum()), rng)
        return j

    def _exact_draw(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Slow O(capacity) draw from a fresh cumulative sum (rounding fallback only)."""
        leaves = self._leaf[: self.capacity]
        pos = np.flatnonzero(leaves > 0)
        cum = np.cumsum(leaves[pos])
        k = np.minimum(cum.searchsorted(rng.random(n) * cum[-1], "right"), len(pos) - 1)
        return pos[k]

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
        """``k`` distinct leaves by successive sampling: the first is drawn with probability
        ``leaf / total``, every next one proportionally to the leaves not drawn yet (exactly what
        drawing one at a time and removing it does; the law of numpy's
        ``choice(replace=False, p=...)``).

        Implementation: the first ``k`` distinct leaves of a stream of independent draws (a few
        spare draws are made up front, so a duplicate rarely costs a second round); when
        duplicates keep it short (very skewed values), the leaves already taken are set to 0 while
        the rest are drawn and restored afterwards -- the same law, since after removing them the
        next distinct draw is proportional to the remaining leaves. ``chosen``: the distinct
        leaves (in order) of a stream of independent draws made elsewhere (e.g. by rejection
        sampling); the stream is continued from there, so the law is unchanged. Raises ``ValueError`` when
        fewer than ``k`` leaves are non-empty.
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
        saved_idx: List[np.ndarray] = []
        saved_val: List[np.ndarray] = []
        try:
            taken = np.array(chosen, dtype=np.int64)
            while len(chosen) < k:
                saved_idx.append(taken)
                saved_val.append(self._leaf[taken].copy())
                self.set_many(taken, np.zeros(len(taken)))
                if not self.total > 0:
                    raise ValueError(f"cannot draw {k} distinct leaves: only {len(chosen)} are non-empty")
                seen = set(chosen)
                new = [i for i in dict.fromkeys(self.sample_iid(k - len(chosen), rng).tolist()) if i not in seen]
                chosen.extend(new)
                taken = np.array(new, dtype=np.int64)
        finally:
            for ti, tv in zip(reversed(saved_idx), reversed(saved_val)):
                self.set_many(ti, tv, positive=True)
        return np.array(chosen[:k], dtype=np.int64)

    def _draw_c(self, out: np.ndarray, got: int, k: int, rng: np.random.Generator, limit: int) -> int:
        """Continue the distinct prefix ``out[:got]`` with at most ``limit`` compiled tree draws."""
        ext = self._ext
        words = self._words
        if words is None or words.rng is not rng:
            words = self.words(rng)
        per = len(self._levels) + 1  # words per draw
        while got < k and limit > 0:
            need = per * min(limit, 4 * k + 64)
            if len(words.buf) - words.pos < need:
                words.refill(need)
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
        saved: List[tuple] = []
        try:
            start = 0
            for _ in range(64):
                if got >= k:
                    return out
                taken = out[start:got].copy()
                saved.append((taken, self._leaf[taken].copy()))
                self.set_many(taken, np.zeros(len(taken)))
                self.flush()
                if not self._total > 0:
                    raise ValueError(f"cannot draw {k} distinct leaves: only {got} are non-empty")
                start = got
                got = self._draw_c(out, got, k, rng, 2 * (k - got) + 16)
        finally:
            for ti, tv in reversed(saved):
                self.set_many(ti, tv, positive=True)
        if got >= k:
            return out
        raise RuntimeError("SumMinTree: the compiled sampler made no progress (please report this)")
