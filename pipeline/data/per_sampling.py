"""How prioritized replay draws slots and weighs them: the sampling half of
:class:`~pipeline.data.prioritized_sampler.PrioritizedSampler` (a mixin; the state it reads is set up there).

Uses ``self._tree`` (the :class:`~pipeline.data.segment_tree.SumMinTree` of leaves
``priority ** alpha``), ``self._s`` (the :mod:`slot storage <pipeline.data.storage>`: ``count``,
``size``, ``dense``, ``rng``), ``self._ext`` (compiled kernels or None) and the rejection
sampler's running state (``_acc``, ``_ntight``, ``_ri``/``_ru``/``_rpos``/``_rn``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["PrioritySampling"]


class PrioritySampling:
    """Slot draws (with / without replacement, whole buffer or a pool) and IS weights."""

    _ACC_MIN = 0.2  # below this rejection-sampling acceptance rate, draw from the tree instead

    def _weights(self, slots: np.ndarray) -> np.ndarray:
        """``(leaf / min leaf) ** -beta`` as float32 (``leaf`` = priority ** alpha)."""
        return self._weights_at(slots, self._tree.min, self.beta)

    def _weights_at(self, slots: np.ndarray, mn: float, b: float) -> np.ndarray:
        """``(leaf / mn) ** -b`` as float32."""
        if self._ext is not None:
            out = np.empty(len(slots), dtype=np.float32)
            self._ext.is_weights(self._tree._leaf, slots, mn, b, out)
            return out
        return np.multiply(np.power(self._tree._leaf.take(slots), -b), mn ** b, dtype=np.float32)

    def _draw(self, k: int, replace: bool) -> np.ndarray:
        tree, rng = self._tree, self._s.rng
        if replace:
            return tree.sample(k, rng)  # stratified, as in the PER paper
        s = self._s
        if k * 8 <= s.count:
            if self._acc >= self._ACC_MIN:
                return self._draw_rejection(k) if self._ext is None else self._draw_rejection_c(k)
            out = tree.sample_distinct(k, rng)  # exact successive sampling
            mx = tree.max
            if mx > 0:  # the expected acceptance rate, to switch back when priorities even out
                self._acc = min(1.0, tree.total / (s.count * mx))
            return out
        return tree.sample_distinct(k, rng)

    def _draw_rejection(self, k: int) -> np.ndarray:
        """``k`` distinct slots by successive sampling, without the tree: a stream of independent
        draws, each a uniformly chosen stored item accepted with probability ``leaf / bound``
        (``bound`` >= every leaf, so accepted items are i.i.d. with probability ``leaf / total``);
        its first ``k`` distinct items are the sample. A stream cut short by duplicates or
        rejections is extended by more rounds and, if still short, continued by the tree
        (:meth:`SumMinTree.sample_distinct` with ``chosen``); either keeps the law exact."""
        tree = self._tree
        self._ntight += 1
        if self._ntight >= 64:  # now and then (or after a poor acceptance): the exact largest leaf
            self._ntight = 0
            bound = tree.max
        else:
            bound = tree.max_bound  # >= every leaf: still exact sampling, maybe fewer acceptances
        got = self._rejection_round(k + 8 + (k >> 2), bound)
        lst = got.tolist()
        if len(lst) >= k and len(set(lst[:k])) == k:
            return got[:k]
        chosen = dict.fromkeys(lst)
        for _ in range(3):
            if len(chosen) >= k:
                return np.array(list(chosen)[:k], dtype=np.int64)
            chosen.update(dict.fromkeys(self._rejection_round(k - len(chosen) + 8, bound).tolist()))
        if len(chosen) >= k:
            return np.array(list(chosen)[:k], dtype=np.int64)
        return tree.sample_distinct(k, self._s.rng, list(chosen))

    def _draw_rejection_c(self, k: int) -> np.ndarray:
        """:meth:`_draw_rejection` with the compiled sampler (``_per_kernels.reject``): the same
        stream (a uniformly chosen stored item accepted with probability ``leaf / bound``, here from
        raw words of the storage's generator) cut at its ``k``-th distinct item, the same four
        rounds and acceptance-rate bookkeeping; then the tree continues the stream."""
        s, tree = self._s, self._tree
        self._ntight += 1
        if self._ntight >= 64:  # now and then (or after a poor acceptance): the exact largest leaf
            self._ntight = 0
            bound = tree.max
        else:
            bound = tree._lmax  # max_bound: >= every leaf, maybe loose (fewer acceptances, same law)
        words = tree._words
        if words is None or words.rng is not s.rng:
            words = tree.words(s.rng)
        need = int(7 * (k + 8 + (k >> 2)) / self._acc) + 64  # more than four rounds can propose
        if len(words.buf) - words.pos < need:
            words.refill(need)
        n = s.count
        out = np.empty(k, dtype=np.int64)
        got, words.pos, self._acc, loose = self._ext.reject(words.buf, words.pos, n, None if n == s.size else s.dense,
                                                            tree._leaf, bound, k, out, tree._mark, self._acc)
        if loose:
            self._ntight = 64  # a round's acceptance fell: the bound may be loose, tighten it next time
        if got < k:
            return tree.sample_distinct(k, s.rng, out[:got].tolist())
        return out

    def _rejection_round(self, want: int, bound: float) -> np.ndarray:
        """The accepted draws (in order) of about ``want / acceptance`` uniform proposals."""
        s = self._s
        n = s.count
        acc = self._acc
        m = int(want / acc) + 8
        p = self._rpos
        if n != self._rn or p + m > len(self._ri):
            # blocks of random offsets in [0, n) and uniforms, drawn ahead (one generator call per
            # ~8k draws instead of two per sample)
            size = max(8192, m)
            self._ri = s.rng.integers(0, n, size)
            self._ru = s.rng.random(size)
            self._rn = n
            p = 0
        self._rpos = p + m
        cand = self._ri[p:p + m]
        if n != s.size:  # a full buffer occupies every slot: offsets are slots already
            cand = s.dense.take(cand)
        u = self._ru[p:p + m] * bound
        got = cand[u < self._tree._leaf.take(cand)]
        rate = len(got) / m
        if rate < 0.5 * acc:
            self._ntight = 64  # the bound may have become loose: tighten it next time
        self._acc = 0.75 * acc + 0.25 * rate
        return got

    def _draw_pool(self, pool: np.ndarray, k: int, replace: bool) -> np.ndarray:
        p = self._tree.leaves[pool]
        if replace:
            cum = np.cumsum(p)
            u = self._s.rng.random(k) * cum[-1]
            j = np.minimum(np.searchsorted(cum, u, side="right"), len(pool) - 1)
            return pool[j]
        return self._gumbel_topk(pool, p, k)

    def _gumbel_topk(self, pos: np.ndarray, p: np.ndarray, k: int) -> np.ndarray:
        g = -np.log(-np.log(self._s.rng.random(len(pos))))
        keys = np.log(np.maximum(p, 1e-300)) + g
        top = np.argpartition(-keys, k - 1)[:k]
        return pos[top]

