"""Prioritized replay as a sampler: :class:`PrioritizedSampler` (Schaul et al. 2016).

The sampler keeps per-slot state beside a buffer's :class:`~pipeline.data.storage.SlotStorage`
(raw priorities, which slots' ``meta["priority"]`` is not written yet) through the storage interface
documented there: it listens to the storage (``on_push``/``on_remove``/``on_clear``/``on_load``,
``sync_meta``) and reads ``size``, ``count``, ``dense``, ``slot_id``, ``id2slot``, ``items``,
``version``, ``rng``. It holds two collaborators, each with its own state:

* the sum/min tree of ``priority ** alpha`` (:class:`~pipeline.data.segment_tree.SumMinTree`): sums,
  extremes and draws with replacement or from the tree;
* :class:`DistinctDraws` (below): draws without replacement, by rejection sampling while that pays
  (it keeps the acceptance-rate estimate and the random blocks drawn ahead), else from the tree.

Use it as ``DequeBuffer(size, sampler=PrioritizedSampler(alpha=0.6, beta=0.4, anneal=1e5))`` and
reach it as ``buffer.sampler``.
"""
from __future__ import annotations

from types import ModuleType
from typing import Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from . import _accel
from .item import BufferedData
from .sampler import Priorities, _bind, check_priority, priority_array
from .segment_tree import SumMinTree
from .storage import SlotStorage

__all__ = ["PrioritizedSampler", "DistinctDraws"]

_F64 = np.dtype(np.float64)


class PrioritizedSampler:
    """Draws stored items with probability ``p ** alpha / sum`` and weighs them for the loss.

    - ``alpha``: how much the priorities count (0: uniform). ``beta``: the importance-sampling (IS)
      exponent at the start; it goes linearly to 1 over ``anneal`` draws. ``is_weight=False``: no
      weights (``sample_batch`` gives no ``weight`` field).
    - A pushed item's priority is ``meta["priority"]`` if given (finite, ``>= 0``), else the largest
      priority seen so far (written back into ``meta["priority"]``).
    - :meth:`update_priority` (``buffer.update_priority``) sets new priorities; the items'
      ``meta["priority"]`` follows lazily (written when an item is next read through the buffer;
      at once for the items of the last ``sample()``). :meth:`priority` reads the current value.
    - Weights: ``(p_i / p_min) ** -beta`` on the ``p ** alpha`` leaves (at most 1), as float32.
    - Without replacement the draw is exact successive sampling (each next item proportional to the
      priorities of those not drawn yet): see :class:`DistinctDraws`. With replacement: stratified
      draws from the sum tree. From a ``sample_range`` pool: Gumbel top-k / inverse CDF.
    - ``groupby`` sampling is not supported (``supports_groupby`` is False).

    Hot loops (rejection sampler, tree refresh and draws, weights, meta writes, priority updates) run
    in the compiled extension ``pipeline/data/_per_kernels.c`` when it is built, else in numpy (also
    with ``RLPIPE_NO_EXT=1``): :attr:`kernel` says which. Both draw from the same laws; for one seed
    their samples differ. One sampler serves one storage (and the buffer views that share it).
    """

    _FLOOR = 1e-10
    wants_priorities = True
    supports_groupby = False

    # set by attach(): the storage served (``storage``, typed as bound), the tree of its slots'
    # leaves ``max(p, _FLOOR) ** alpha`` and the draws without replacement over both
    _s: SlotStorage
    _tree: SumMinTree
    _distinct: DistinctDraws

    def __init__(self, alpha: float = 0.6, beta: float = 0.4, anneal: float = 1e5, is_weight: bool = True) -> None:
        if not alpha >= 0:
            raise ValueError(f"alpha (priority_power_factor) must be >= 0, got {alpha}")
        if not 0 <= beta <= 1:
            raise ValueError(f"beta (IS_weight_power_factor) must be in [0, 1], got {beta}")
        if not anneal > 0:
            raise ValueError(f"anneal (IS_weight_anneal_train_iter) must be > 0, got {anneal}")
        self.alpha = float(alpha)
        self.beta0 = float(beta)
        self.anneal = float(anneal)
        self.IS_weight = bool(is_weight)
        self.storage: Optional[SlotStorage] = None
        # the compiled kernels (pipeline/data/_per_kernels.c) or None: the same work in numpy
        self._ext: Optional[ModuleType] = _accel.EXT
        self.max_priority = 1.0
        self.sample_count = 0
        # the last draw: (ids, slots, storage version, slots distinct?, the stored items or None)
        self._last: Optional[tuple] = None
        self._wargs = (1.0, 0.0)  # (smallest leaf, beta) the last draw's weights were computed with
        self._raw = np.zeros(0)  # raw priority per slot
        self._stale = np.zeros(0, dtype=bool)  # per slot: meta["priority"] not yet written

    def __repr__(self) -> str:
        return (f"PrioritizedSampler(alpha={self.alpha}, beta={self.beta0}, anneal={self.anneal:g}, "
                f"is_weight={self.IS_weight})")

    def __getstate__(self) -> dict:  # copy.deepcopy / pickle (with the buffer): not the kernels module
        return _accel.state_without_ext(self)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(_accel.ext_from_state(state))

    def attach(self, storage: SlotStorage) -> None:
        """Bind to ``storage``: size the tree, listen to the storage, take the priorities of what it
        holds (``meta["priority"]``, else the largest seen)."""
        if not isinstance(storage, SlotStorage):
            raise TypeError(f"PrioritizedSampler needs a SlotStorage, got {type(storage).__name__}")
        with storage.lock:
            if not _bind(self, storage):
                return
            self._s = storage
            self._tree = SumMinTree(storage.size, ext=self._ext)
            self._distinct = DistinctDraws(storage, self._tree, self._ext)
            self._raw = np.zeros(storage.size)
            self._stale = np.zeros(storage.size, dtype=bool)
            storage.add_listener(self)  # on_push/on_remove/on_clear/on_load, and sync_meta
            self.on_load()

    @property
    def kernel(self) -> str:
        """Which hot loops run: ``"C"`` (the compiled ``_per_kernels`` extension) or ``"numpy"``
        (extension not built, or ``RLPIPE_NO_EXT=1``). Both draw from the same laws."""
        return _accel.kernel_name(self._ext)

    @property
    def beta(self) -> float:
        """Current IS exponent."""
        return min(1.0, self.beta0 + (1.0 - self.beta0) * self.sample_count / self.anneal)

    # ------------------------------------------------------------------ the sampler interface
    def draw(self, k: int, replace: bool, pool: Optional[np.ndarray] = None
             ) -> Tuple[np.ndarray, Optional[List[int]], Optional[np.ndarray]]:
        """``k`` slots drawn by priority (see the class docstring), their items' indices (remembered:
        :meth:`update_priority` with exactly these indices skips the index -> slot lookups) and their
        IS weights; one sample."""
        s = self._s
        if pool is not None:
            slots = _draw_pool(pool, self._tree.leaves[pool], k, replace, s.rng)
        elif replace:
            slots = self._tree.sample(k, s.rng)  # stratified, as in the PER paper
        else:
            slots = self._distinct.draw(k)
        w = None
        if self.IS_weight:
            mn, b = self._tree.min, self.beta
            self._wargs = (mn, b)
            w = self._weights_at(slots, mn, b)
        self.sample_count += 1
        ids = s.slot_id.take(slots).tolist()
        self._last = (list(ids), slots, s.version, not replace, None)  # a copy: the caller may change its list
        return slots, ids, w

    def weights(self, slots: np.ndarray) -> Optional[np.ndarray]:
        """The IS weights of these slots now (``sample(indices=...)``), or None without ``is_weight``."""
        return self._weights_at(slots, self._tree.min, self.beta) if self.IS_weight else None

    def _weights_at(self, slots: np.ndarray, mn: float, b: float) -> np.ndarray:
        """``(leaf / mn) ** -b`` as float32 (``leaf`` = priority ** alpha)."""
        leaf = self._tree._leaf
        if self._ext is not None:
            out = np.empty(len(slots), dtype=np.float32)
            self._ext.is_weights(leaf, slots, mn, b, out)
            return out
        return np.multiply(np.power(leaf.take(slots), -b), mn ** b, dtype=np.float32)

    def items(self, slots: np.ndarray, weights: Optional[np.ndarray], replace: bool,
              meta_weights: bool) -> List[BufferedData]:
        """The stored items of the slots just drawn (the storage's sample list), their lazily kept
        ``meta["priority"]`` written, and ``meta["priority_IS"]`` from ``weights`` when ``meta_weights``.
        With the compiled kernels one pass takes the items and writes their meta."""
        s = self._s
        w = weights if meta_weights else None
        if replace or len(s.syncers) != 1:  # repeats are copied, other listeners sync their meta: the storage
            res = s.result(slots, True, replace)
            if w is not None:
                for it, x in zip(res, w.tolist()):
                    it.meta["priority_IS"] = x
            return res
        ext = self._ext
        if ext is not None:
            res = []
            leaf = self._tree._leaf
            if w is not None:  # rewrites the same weights (same leaves, min and beta) into meta
                mn, b = self._wargs
                ext.take_items(s.items, slots, res, None, leaf, mn, b, w, self._stale, self._raw)
            else:
                ext.take_items(s.items, slots, res, None, leaf, 1.0, 0.0, None, self._stale, self._raw)
        else:
            res = s.result(slots, False, False)
            self._write_meta(res, slots, w)
        last = self._last
        if last is not None and last[1] is slots:
            self._last = (last[0], slots, last[2], True, res)  # distinct stored items: an update writes their meta
        return res

    def _write_meta(self, res: List[BufferedData], slots: np.ndarray, weights: Optional[np.ndarray]) -> None:
        stale = self._stale.take(slots)
        if stale.any():
            pl = self._raw.take(slots).tolist()
            wl = weights.tolist() if weights is not None else None
            for j, (it, st) in enumerate(zip(res, stale.tolist())):
                m = it.meta
                if wl is not None:
                    m["priority_IS"] = wl[j]
                if st:
                    m["priority"] = pl[j]
            self._stale[slots] = False
        elif weights is not None:
            for it, w in zip(res, weights.tolist()):
                it.meta["priority_IS"] = w

    # ------------------------------------------------------------------ storage listener
    def _leaf(self, p: float) -> float:
        return max(p, self._FLOOR) ** self.alpha

    def _set(self, slot: int, p: float) -> None:
        if p > self.max_priority:
            self.max_priority = p
        self._raw[slot] = p
        self._stale[slot] = False
        self._tree.set(slot, self._leaf(p))

    def on_push(self, slot: int, item: BufferedData) -> None:
        """A new item: its ``meta["priority"]``, or the largest priority so far (written to its meta)."""
        p = item.meta.get("priority")
        try:
            p = check_priority(p) if p is not None else None
        except ValueError:
            p = None
        if p is None:
            p = self.max_priority
            item.meta["priority"] = p
        self._set(slot, p)

    def on_remove(self, slot: int) -> None:
        """A slot emptied: it is never drawn."""
        self._stale[slot] = False
        self._tree.set(slot, 0.0)

    def on_clear(self) -> None:
        """Every slot emptied."""
        self._stale[:] = False
        self._tree.clear()

    def on_load(self) -> None:
        """The storage's contents replaced: rebuild from the stored items' meta."""
        self._tree.clear()
        s = self._s
        for slot in s.dense[: s.count].tolist():
            self.on_push(slot, s.items[slot])

    def sync_meta(self, slots: np.ndarray) -> None:
        """Write priorities set by :meth:`update_priority` into these items' ``meta["priority"]``."""
        st = self._stale[slots]
        if st.any():
            todo = slots[st]
            items = self._s.items
            for slot, p in zip(todo.tolist(), self._raw[todo].tolist()):
                items[slot].meta["priority"] = p
            self._stale[todo] = False

    def priority(self, index: int) -> Optional[float]:
        """The current priority of item ``index`` (None if it is not stored)."""
        with self._s.lock:
            slot = self._s.id2slot.get(index)
            return None if slot is None else float(self._raw[slot])

    # ------------------------------------------------------------------ new priorities
    def update_priority(self, indices: Sequence[int], priorities: Priorities) -> List[bool]:
        """New priorities (finite, ``>= 0``; an array, tensor or list with one value per index) for the
        items ``indices``. Returns one bool per index: was it stored (others are skipped).
        ``ValueError`` for a length mismatch or a NaN, infinite or negative priority (nothing written)."""
        if not hasattr(indices, "__len__"):
            raise TypeError(f"update_priority() takes a sequence of indices, got {type(indices).__name__}")
        ids = indices if type(indices) is list else (indices.tolist() if hasattr(indices, "tolist") else list(indices))
        n = len(ids)
        lo: Optional[float]
        hi: Optional[float]
        if (self._ext is not None and type(priorities) is np.ndarray and priorities.dtype is _F64
                and priorities.ndim == 1):
            if len(priorities) != n:
                raise ValueError(f"update_priority: {len(priorities)} priorities for {n} indices")
            arr, lo, hi = priorities, None, None  # checked by the kernel before it writes anything
        else:
            arr, lo, hi = priority_array(priorities, n)
        if not n:
            return []
        slots, items, distinct = self._known_slots(ids)
        if slots is None:
            get = self._s.id2slot.get
            slots = np.array([get(i, -1) for i in ids], dtype=np.int64)
            if lo is None:  # check every value, also those of indices no longer stored
                arr, lo, hi = priority_array(arr, n)
            keep = slots >= 0
            ok = keep.tolist()
            if not keep.all():
                slots, arr = slots[keep], arr[keep]
                lo = hi = None
                if not len(slots):
                    return ok
        else:
            ok = [True] * n
        self._write(slots, arr, items, distinct, lo, hi)
        return ok

    def _known_slots(self, ids: List[int]) -> Tuple[Optional[np.ndarray], Optional[list], bool]:
        """``(slots, items, distinct)`` when ``ids`` are those of the last draw and the storage is
        unchanged since (its stored items too when they are known), else ``(None, None, False)``."""
        last = self._last
        if last is None or last[2] != self._s.version or len(ids) != len(last[1]):
            return None, None, False
        if not ids == last[0]:  # the list handed out with the draw: mostly the very same int objects
            return None, None, False
        return last[1], last[4], last[3]

    def _write(self, slots: np.ndarray, arr: np.ndarray, items: Optional[list], distinct: bool,
               lo: Optional[float], hi: Optional[float]) -> None:
        """Store the checked priorities ``arr`` of the stored ``slots`` (``lo``/``hi``: their extremes,
        or None): raw values, meta (now for ``items``, else lazily), ``max_priority`` and the leaves."""
        ext = self._ext
        if ext is not None:
            try:
                lo, hi, olo, ohi, nlo, nhi = ext.update(slots, arr, self._raw, self._tree._leaf, self.alpha,
                                                        self._FLOOR, items, self._stale)
            except TypeError:  # not a contiguous float64 array (nothing was written): a copy that is
                arr = np.ascontiguousarray(arr, dtype=np.float64)
                lo, hi, olo, ohi, nlo, nhi = ext.update(slots, arr, self._raw, self._tree._leaf, self.alpha,
                                                        self._FLOOR, items, self._stale)
            if hi > self.max_priority:
                self.max_priority = hi
            self._tree.wrote(slots, olo, ohi, nlo, nhi)
            return
        self._raw[slots] = arr
        if items is not None:
            # the items of the last sample(): write meta["priority"] now, while they are in cache
            # (none of them is stale: the sample wrote their meta; raw holds the latest value)
            for it, p in zip(items, arr.tolist()):
                it.meta["priority"] = p
        else:
            self._stale[slots] = True  # meta["priority"] is written lazily (sync_meta) when next read
        if lo is None or hi is None:
            lo, hi = float(np.minimum.reduce(arr)), float(np.maximum.reduce(arr))
        if hi > self.max_priority:
            self.max_priority = hi
        if lo < self._FLOOR:
            arr = np.maximum(arr, self._FLOOR)
        if self.alpha != 1.0:
            arr = np.power(arr, self.alpha)
        self._tree.set_many(slots, arr, positive=True, distinct=distinct)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> Dict[str, object]:
        """Counters plus every live item's priority (by index); loads with ``torch.load(weights_only=True)``."""
        with self._s.lock:
            s = self._s
            slots = s.ordered_slots().tolist()
            return {
                "max_priority": float(self.max_priority),
                "sample_count": int(self.sample_count),
                "indices": [s.items[k].index for k in slots],
                "priorities": self._raw[np.asarray(slots, dtype=np.int64)].tolist(),
            }

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Restore :meth:`state_dict` (priorities of indices no longer stored are ignored)."""
        for key in ("max_priority", "sample_count", "indices", "priorities"):
            if key not in state:
                raise ValueError(f"PrioritizedSampler.load_state_dict: missing {key!r}")
        with self._s.lock:
            self.max_priority = float(cast(float, state["max_priority"]))
            self.sample_count = int(cast(int, state["sample_count"]))
            s = self._s
            for i, p in zip(cast(List[int], state["indices"]), cast(List[float], state["priorities"])):
                slot = s.id2slot.get(int(i))
                if slot is None:
                    continue
                item = s.items[slot]
                assert item is not None  # the slot of a stored index holds its item
                p = check_priority(p)
                item.meta["priority"] = p
                self._raw[slot] = p
                self._stale[slot] = False
                self._tree.set(slot, self._leaf(p))


class DistinctDraws:
    """``k`` distinct occupied slots of ``storage`` by successive sampling over ``tree``'s leaves (each
    next slot proportional to the leaves of the slots not drawn yet): the draws without replacement
    of a :class:`PrioritizedSampler`, which holds one.

    While its acceptance rate is at least :attr:`ACC_MIN` and ``k * 8 <= count``, the first distinct
    items of an i.i.d. stream made by rejection sampling (a uniformly chosen stored item accepted with
    probability ``leaf / bound``; ``bound`` >= every leaf, so accepted items are i.i.d. with
    probability ``leaf / total``); else from the tree (:meth:`SumMinTree.sample_distinct`, which
    also continues a rejection stream cut short). Owns the running estimate of the acceptance rate
    and, for numpy, blocks of random offsets and uniforms drawn ahead from the storage's generator
    (the compiled sampler takes raw words from the tree's :meth:`SumMinTree.words`).
    """

    ACC_MIN = 0.2  # below this rejection-sampling acceptance rate, draw from the tree instead

    def __init__(self, storage: SlotStorage, tree: SumMinTree, ext: Optional[ModuleType]) -> None:
        self._s = storage
        self._tree = tree
        self._ext = ext
        self._acc = 0.5  # running estimate of the rejection sampler's acceptance rate
        self._ntight = 64  # draws since the bound was last the exact largest leaf (64: tighten now)
        self._ri: np.ndarray = np.zeros(0, dtype=np.int64)  # random offsets drawn ahead (numpy)
        self._ru: np.ndarray = np.zeros(0)  # and uniforms
        self._rpos = 0  # the next unused entry of _ri / _ru
        self._rn = -1  # the count _ri's offsets were drawn for

    def __getstate__(self) -> dict:
        """``copy.deepcopy`` / pickle: not the kernels module, and not the random blocks drawn ahead
        from the original's stream (a copy draws from its storage's own stream)."""
        state = _accel.state_without_ext(self)
        state["_ri"], state["_ru"] = np.zeros(0, dtype=np.int64), np.zeros(0)
        state["_rpos"] = 0
        state["_rn"] = -1
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(_accel.ext_from_state(state))

    def draw(self, k: int) -> np.ndarray:
        """``k`` distinct slots (``k <= count``) by rejection or from the tree (see the class docstring)."""
        tree, s = self._tree, self._s
        if k * 8 <= s.count:
            if self._acc >= self.ACC_MIN:
                return self.rejection(k) if self._ext is None else self.rejection_c(k)
            out = tree.sample_distinct(k, s.rng)  # exact successive sampling
            mx = tree.max
            if mx > 0:  # the expected acceptance rate, to switch back when priorities even out
                self._acc = min(1.0, tree.total / (s.count * mx))
            return out
        return tree.sample_distinct(k, s.rng)

    def _bound(self) -> float:
        """A bound on every leaf: now and then (or after a poor acceptance) the exact largest leaf,
        else :attr:`SumMinTree.max_bound` (maybe loose: fewer acceptances, the same law)."""
        self._ntight += 1
        if self._ntight >= 64:
            self._ntight = 0
            return self._tree.max
        return self._tree.max_bound

    def rejection(self, k: int) -> np.ndarray:
        """``k`` distinct slots by rejection sampling in numpy: the first ``k`` distinct items of the
        stream. A stream cut short by duplicates or rejections is extended by more rounds and, if
        still short, continued by the tree (:meth:`SumMinTree.sample_distinct` with ``chosen``);
        either keeps the law exact."""
        bound = self._bound()
        got = self._round(k + 8 + (k >> 2), bound)
        lst = got.tolist()
        if len(lst) >= k and len(set(lst[:k])) == k:
            return got[:k]
        chosen = dict.fromkeys(lst)
        for _ in range(3):
            if len(chosen) >= k:
                return np.array(list(chosen)[:k], dtype=np.int64)
            chosen.update(dict.fromkeys(self._round(k - len(chosen) + 8, bound).tolist()))
        if len(chosen) >= k:
            return np.array(list(chosen)[:k], dtype=np.int64)
        return self._tree.sample_distinct(k, self._s.rng, list(chosen))

    def rejection_c(self, k: int) -> np.ndarray:
        """:meth:`rejection` with the compiled sampler (``_per_kernels.reject``): the same stream (here
        from raw words of the storage's generator) cut at its ``k``-th distinct item, the same four
        rounds and acceptance-rate bookkeeping; then the tree continues the stream."""
        s, tree, ext = self._s, self._tree, self._ext
        assert ext is not None
        bound = self._bound()
        words = tree.words(s.rng)
        words.ensure(int(7 * (k + 8 + (k >> 2)) / self._acc) + 64)  # more than four rounds can propose
        n = s.count
        out = np.empty(k, dtype=np.int64)
        got, words.pos, self._acc, loose = ext.reject(words.buf, words.pos, n, None if n == s.size else s.dense,
                                                      tree._leaf, bound, k, out, tree._mark, self._acc)
        if loose:
            self._ntight = 64  # a round's acceptance fell: the bound may be loose, tighten it next time
        if got < k:
            return tree.sample_distinct(k, s.rng, out[:got].tolist())
        return out

    def _round(self, want: int, bound: float) -> np.ndarray:
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


def _draw_pool(pool: np.ndarray, leaves: np.ndarray, k: int, replace: bool, rng: np.random.Generator) -> np.ndarray:
    """``k`` slots of ``pool`` (``leaves``: their tree leaves), proportionally to the leaves: with
    replacement by inverse CDF, else by successive sampling (Gumbel top-k)."""
    if replace:
        cum = np.cumsum(leaves)
        u = rng.random(k) * cum[-1]
        j = np.minimum(np.searchsorted(cum, u, side="right"), len(pool) - 1)
        return pool[j]
    g = -np.log(-np.log(rng.random(len(pool))))
    keys = np.log(np.maximum(leaves, 1e-300)) + g
    top = np.argpartition(-keys, k - 1)[:k]
    return pool[top]
