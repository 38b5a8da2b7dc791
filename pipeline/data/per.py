"""Prioritized experience replay as buffer middleware: :class:`PriorityExperienceReplay`.

It keeps per-slot state (raw priorities, a sum/min tree of ``priority ** alpha``) beside a buffer's
:class:`~pipeline.data.storage.SlotStorage`, through the storage interface documented there: it
listens to the storage (``on_push``/``on_remove``/``on_clear``/``on_load``, ``sync_meta``) and reads
``size``, ``count``, ``dense``, ``slot_id``, ``id2slot``, ``items``, ``version``, ``rng``. How it
draws slots and weighs them lives in :mod:`.per_sampling`.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import numpy as np
import torch

from . import _accel
from .batching import SampledBatch
from .buffer import DequeBuffer
from .buffer_chain import _args2, _args3
from .collate import collate
from .item import BufferedData, _Sampled, _SlotIds
from .per_sampling import PrioritySampling
from .per_update import PriorityUpdates, _check_priority, _valid_priority
from .segment_tree import SumMinTree
from .storage import SlotStorage

__all__ = ["PriorityExperienceReplay"]


class PriorityExperienceReplay(PrioritySampling, PriorityUpdates):
    """Prioritized experience replay (Schaul et al. 2016) on sum/min segment trees.

    - push: the priority is ``meta["priority"]`` if given, else the largest priority seen so far
      (written back into ``meta["priority"]``).
    - sample: items are drawn with probability ``p**priority_power_factor / sum``; with
      ``IS_weight`` every returned item gets ``meta["priority_IS"]`` (the importance-sampling weight
      ``(p_i / p_min) ** -beta``, at most 1) and ``sample_batch`` returns them as ``.weight``.
      ``beta`` goes linearly from ``IS_weight_power_factor`` to 1 over
      ``IS_weight_anneal_train_iter`` sample calls. Without replacement the sample is exact
      successive sampling (each next item proportional to the priorities of those not drawn yet):
      the first distinct items of an i.i.d. stream, drawn by rejection sampling (a uniform item
      accepted with probability ``leaf / bound``; no tree query) while the acceptance rate is at
      least 0.2 and ``size * 8 <= count``, else from the sum tree. With replacement: stratified
      draws from the sum tree, as in the paper. The smallest priority for the weights is kept
      exactly without the tree (recomputed only when the smallest item is overwritten).
    - update / update_many: a ``"priority"`` in meta (finite, ``>= 0``) becomes the new priority.
      ``update_many`` writes ``meta["priority"]`` lazily: items get it when next read through the
      buffer (``sample``, ``get``, ``get_by_index``, ``save_data``); :meth:`priority` reads it
      directly. The items returned by the last ``sample()`` get it at once; items in
      ``sample_batch(...).items`` may carry the previous value.
    - deletes, evictions, ``clear`` and ``load_data`` are tracked through the storage, also when
      they happen through a view. ``groupby`` sampling is not supported.

    Hot loops (the rejection sampler, the tree's refresh and draws, the weights, the pass over the
    sampled items that writes their meta, the priority update) run in the compiled extension
    ``pipeline/data/_per_kernels.c`` when it is built, else in numpy (also with ``RLPIPE_NO_EXT=1``):
    :attr:`kernel` says which. Both draw from the same laws; for one seed their samples differ.

    Use one per buffer: ``buf.use(PriorityExperienceReplay(buf))``.
    """

    _FLOOR = 1e-10
    #: the capability pipeline middleware look for (``pipeline.data.protocols.PriorityFeedback``): the
    #: fetcher writes the learner's per-row priorities back after each train step
    wants_priorities = True

    def __init__(self, buffer: DequeBuffer, IS_weight: bool = True, priority_power_factor: float = 0.6,
                 IS_weight_power_factor: float = 0.4, IS_weight_anneal_train_iter: float = 1e5) -> None:
        storage = getattr(buffer, "storage", None)
        if not isinstance(storage, SlotStorage):
            raise TypeError("PriorityExperienceReplay needs a DequeBuffer (or a view of one): a buffer whose "
                            f"`storage` is a SlotStorage; got {type(buffer).__name__}")
        if not priority_power_factor >= 0:
            raise ValueError(f"priority_power_factor must be >= 0, got {priority_power_factor}")
        if not 0 <= IS_weight_power_factor <= 1:
            raise ValueError(f"IS_weight_power_factor must be in [0, 1], got {IS_weight_power_factor}")
        if not IS_weight_anneal_train_iter > 0:
            raise ValueError(f"IS_weight_anneal_train_iter must be > 0, got {IS_weight_anneal_train_iter}")
        self.buffer = buffer
        self.IS_weight = bool(IS_weight)
        self.alpha = float(priority_power_factor)
        self.beta0 = float(IS_weight_power_factor)
        self.anneal = float(IS_weight_anneal_train_iter)
        self._s = storage
        # the compiled kernels (pipeline/data/_per_kernels.c) or None: the same work in numpy
        self._ext = _accel.EXT
        self._tree = SumMinTree(self._s.size, ext=self._ext)
        self.max_priority = 1.0
        self.sample_count = 0
        self._acc = 0.5  # running estimate of the rejection sampler's acceptance rate
        self._ri = self._ru = np.zeros(0)  # random blocks for the rejection sampler
        self._rpos = 0
        self._rn = -1
        self._ntight = 64
        # the last sample: (ids, slots, storage version, slots distinct?, the stored items or None)
        self._last: Optional[tuple] = None
        self._prange: Optional[tuple] = None  # (array, min, max) of the priorities being written
        self._raw = np.zeros(self._s.size)  # raw priority per slot
        self._stale = np.zeros(self._s.size, dtype=bool)  # meta["priority"] not yet written
        with storage.lock:
            storage.add_listener(self)  # on_push/on_remove/on_clear/on_load, and sync_meta
            self.on_load()

    def __getstate__(self) -> dict:  # copy.deepcopy / pickle (with the buffer): not the kernels module
        return _accel.state_without_ext(self)

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(_accel.ext_from_state(state))

    @property
    def kernel(self) -> str:
        """Which hot loops run: ``"C"`` (the compiled ``_per_kernels`` extension) or ``"numpy"``
        (extension not built, or ``RLPIPE_NO_EXT=1``). Both draw from the same laws."""
        return _accel.kernel_name(self._ext)

    @property
    def _fast_owner(self) -> Any:
        """The storage this PER serves: a buffer whose only middleware is this PER on the same
        storage calls :meth:`_sample_batch` and :meth:`_update_many` directly (no chain)."""
        return self._s

    def _sample_batch(self, cols: Any, k: int) -> Optional[SampledBatch]:
        """``sample_batch(k)`` (without replacement, whole buffer) for a buffer whose only middleware
        is this PER: the same draw, weights and bookkeeping as the chain, with the batch gathered
        straight from the columns. Returns None (nothing drawn) when it does not apply."""
        s = self._s
        if len(s.syncers) != 1:
            return None
        slots = self._draw(k, False)
        if cols.ok.take(slots).all():
            items = None
            data = cols.gather(slots)
            index = s.slot_id.take(slots).tolist()
        else:  # rare (data replaced since the last write-through): build items the usual way
            items = s.result(slots)
            data = collate([it.data for it in items])
            index = [it.index for it in items]
        weight = torch.from_numpy(self._weights(slots)) if self.IS_weight else None
        self.sample_count += 1
        self._last = (list(index), slots, s.version, True, None)
        if items is not None:
            return SampledBatch(data, index, weight, items)
        return SampledBatch(data, index, weight, _storage=s, _slots=slots)

    def _sample_items(self, k: int) -> "_Sampled":
        """``sample(k)`` (without replacement, whole buffer, ``0 < k <= count``) for a buffer whose
        only middleware is this PER: what :meth:`_sample` does in that case, minus the chain."""
        s = self._s
        ext = self._ext
        if ext is not None:  # the draw, then items, weights and meta in one compiled pass
            slots = (self._draw_rejection_c(k) if k * 8 <= s.count and self._acc >= self._ACC_MIN
                     else self._draw(k, False))
            tree = self._tree
            res = _Sampled()
            if self.IS_weight:
                beta = self.beta0 + (1.0 - self.beta0) * self.sample_count / self.anneal  # self.beta, inlined
                ext.take_items(s.items, slots, res, None, tree._leaf, tree._lmin if tree._min_ok else tree.min,
                               beta if beta < 1.0 else 1.0, np.empty(k, dtype=np.float32), self._stale, self._raw)
            else:
                ext.take_items(s.items, slots, res, None, tree._leaf, 1.0, 0.0, None, self._stale, self._raw)
            # returned to the caller only (no middleware or sample_batch reads these): the slots; no
            # reference copy (an empty `ref` means "check nothing, rebuild" to any reader) and no columns
            res.slots = slots
            res.ref = ()
            res.columns = None
            res.pushes = s.pushes
            res.version = v = s.version
            self.sample_count += 1
            self._last = (None, slots, v, True, res)  # ids: those of res (see _last_ids)
            return res
        slots = self._draw(k, False)
        weights = self._weights(slots) if self.IS_weight else None
        self.sample_count += 1
        res = s.result(slots, False)
        self._write_meta(res, slots, weights)
        self._last = (s.slot_id.take(slots).tolist(), slots, s.version, True, res)
        return res

    # ------------------------------------------------------------------ storage listener
    def _leaf(self, p: float) -> float:
        return max(p, self._FLOOR) ** self.alpha

    def on_push(self, slot: int, item: BufferedData) -> None:
        p = item.meta.get("priority")
        if p is None or not _valid_priority(p):
            p = self.max_priority
            item.meta["priority"] = p
        else:
            p = float(p)
            if p > self.max_priority:
                self.max_priority = p
        self._raw[slot] = p
        self._stale[slot] = False
        self._tree.set(slot, self._leaf(p))

    def on_remove(self, slot: int) -> None:
        self._stale[slot] = False
        self._tree.set(slot, 0.0)

    def on_clear(self) -> None:
        self._stale[:] = False
        self._tree.clear()

    def sync_meta(self, slots: np.ndarray) -> None:
        """Write priorities set by ``update_many`` into the items' ``meta["priority"]``."""
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

    def on_load(self) -> None:
        self._tree.clear()
        s = self._s
        for slot in s.dense[: s.count].tolist():
            self.on_push(slot, s.items[slot])

    # ------------------------------------------------------------------ middleware
    @property
    def beta(self) -> float:
        """Current IS exponent."""
        return min(1.0, self.beta0 + (1.0 - self.beta0) * self.sample_count / self.anneal)

    def __call__(self, action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action == "sample":
            return self._sample(chain, *args, **kwargs)
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            if meta and "priority" in meta:
                _check_priority(meta["priority"])
            return chain(data, meta)
        if action == "update":
            index, data, meta = _args3(args, kwargs, "index", "data", "meta")
            if meta and "priority" in meta:
                p = _check_priority(meta["priority"])
                ok = chain(index, data, meta)
                if ok:
                    slot = self._s.id2slot.get(index)
                    if slot is not None:
                        if p > self.max_priority:
                            self.max_priority = p
                        self._raw[slot] = p
                        self._stale[slot] = False
                        self._tree.set(slot, self._leaf(p))
                return ok
            return chain(index, data, meta)
        if action == "update_many":
            indices, data, meta = _args3(args, kwargs, "indices", "data", "meta")
            return self._update_many(chain, indices, data, meta)
        return chain(*args, **kwargs)

    def _sample(self, chain: Callable, size: Optional[int] = None, indices: Any = None, replace: bool = False,
                sample_range: Optional[slice] = None, ignore_insufficient: bool = False,
                groupby: Optional[str] = None, unroll_len: Optional[int] = None, **kw: Any) -> Any:
        if groupby is not None:
            raise ValueError("PriorityExperienceReplay does not support groupby sampling")
        s = self._s
        if indices is not None:
            if hasattr(indices, "tolist"):
                indices = indices.tolist()
            known = [i for i in indices if i in s.id2slot] if self.IS_weight else []
            weights = self._weights(np.array([s.id2slot[i] for i in known], dtype=np.int64)) if known else None
            res = chain(size, indices=indices, replace=replace, sample_range=sample_range,
                        ignore_insufficient=ignore_insufficient, groupby=None, unroll_len=unroll_len, **kw)
            if weights is not None:
                self._attach(res, known, weights)
            return res
        if size is None:
            raise ValueError("sample() needs a size (or indices=[...])")
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise ValueError(f"sample size must be an integer >= 0, got {size!r}")
        if sample_range is not None and not isinstance(sample_range, slice):
            raise TypeError(f"sample_range must be a slice (e.g. slice(-1000, None)), got {sample_range!r}")
        pool = None if sample_range is None else s.ordered_slots()[sample_range].copy()
        n = s.count if pool is None else len(pool)
        k = int(size)
        if k > 0 and (n == 0 or (not replace and k > n)):
            if not ignore_insufficient:
                raise ValueError(f"cannot sample {k} items{'' if replace else ' without replacement'}: the "
                                 f"buffer holds {n}{'' if pool is None else ' in sample_range'}; push more "
                                 "data first or pass ignore_insufficient=True")
            k = 0 if n == 0 else (k if replace else n)
        if k == 0:
            return chain(None, indices=[], replace=replace, sample_range=None, ignore_insufficient=False,
                         groupby=None, unroll_len=None, **kw)
        slots = self._draw(k, replace) if pool is None else self._draw_pool(pool, k, replace)
        ids = _SlotIds(s.slot_id.take(slots).tolist())
        ids.slots, ids.version = slots, s.version
        weights = self._weights(slots) if self.IS_weight else None
        self.sample_count += 1
        # innermost middleware: nothing between us and the storage can read meta, so the storage
        # skips its lazy priority sync and we write priority and priority_IS in one pass below
        fused = (getattr(chain, "__func__", None) is DequeBuffer._sample and not kw.get("_columns_only")
                 and len(s.syncers) == 1)
        if fused:
            kw["_columns_only"] = True
        res = chain(None, indices=ids, replace=replace, sample_range=None, ignore_insufficient=False,
                    groupby=None, unroll_len=None, **kw)
        if fused:
            if type(res) is _Sampled and res.slots is slots:
                self._write_meta(res, slots, weights)
            else:  # pragma: no cover - the storage always returns the slots it was given
                s.sync(slots)
                if weights is not None:
                    self._attach(res, ids, weights)
        elif weights is not None:
            if kw.get("_columns_only") and type(res) is _Sampled and res.slots is slots:
                res.columns = {"priority_IS": weights}  # sample_batch: weights go to .weight only
            else:
                self._attach(res, ids, weights)
        self._last = (list(ids), slots, s.version, not replace, res if fused else None)
        return res

    def _write_meta(self, res: "_Sampled", slots: np.ndarray, weights: Optional[np.ndarray]) -> None:
        """One pass over the sampled items: ``meta["priority_IS"]`` and any priority that
        ``update_many`` left to be written lazily (``meta["priority"]``)."""
        stale = self._stale.take(slots)
        if stale.any():
            pl = self._raw.take(slots).tolist()
            if weights is not None:
                for it, w, st, p in zip(res, weights.tolist(), stale.tolist(), pl):
                    m = it.meta
                    m["priority_IS"] = w
                    if st:
                        m["priority"] = p
            else:
                for it, st, p in zip(res, stale.tolist(), pl):
                    if st:
                        it.meta["priority"] = p
            self._stale[slots] = False
        elif weights is not None:
            for it, w in zip(res, weights.tolist()):
                it.meta["priority_IS"] = w
        if weights is not None:
            res.columns = {"priority_IS": weights}

    def _attach(self, res: Any, ids: List[int], weights: np.ndarray) -> None:
        wl = weights.tolist()
        if type(res) is _Sampled and (res.slots is getattr(ids, "slots", None)
                                      or [it.index for it in res] == list(ids)):
            for it, w in zip(res, wl):
                it.meta["priority_IS"] = w
            res.columns = {"priority_IS": weights}
        else:
            by = dict(zip(ids, wl))
            for it in res:
                if it.index in by:
                    it.meta["priority_IS"] = by[it.index]


    # ------------------------------------------------------------------ state
    def state_dict(self) -> Dict[str, Any]:
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

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (priorities of indices no longer stored are ignored)."""
        for key in ("max_priority", "sample_count", "indices", "priorities"):
            if key not in state:
                raise ValueError(f"PriorityExperienceReplay.load_state_dict: missing {key!r}")
        with self._s.lock:
            self.max_priority = float(state["max_priority"])
            self.sample_count = int(state["sample_count"])
            s = self._s
            for i, p in zip(state["indices"], state["priorities"]):
                slot = s.id2slot.get(int(i))
                if slot is not None:
                    p = _check_priority(p)
                    s.items[slot].meta["priority"] = p
                    self._raw[slot] = p
                    self._stale[slot] = False
                    self._tree.set(slot, self._leaf(p))
