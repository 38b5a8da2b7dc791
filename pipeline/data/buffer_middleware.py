"""Middleware for :class:`~pipeline.data.DequeBuffer` (``buffer.use(mw)``).

A buffer middleware is ``mw(action, chain, *args, **kwargs)``: ``action`` is one of ``"push"``,
``"sample"``, ``"update"``, ``"update_many"``, ``"delete"``, ``"clear"``; ``chain(*args,
**kwargs)`` runs the rest of the chain. Middleware passes actions it does not handle on unchanged.
"""
from __future__ import annotations

import copy
import math
import random
from collections.abc import Mapping
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import torch

from . import _accel
from .buffer import Buffer, BufferedData, DequeBuffer, SampledBatch, _Sampled, _SlotIds
from .columns import collate
from .segment_tree import SumMinTree

__all__ = [
    "clone_object",
    "use_time_check",
    "staleness_check",
    "PriorityExperienceReplay",
    "group_sample",
    "padding",
    "sample_range_view",
]


def _is_grouped(kwargs: Dict[str, Any]) -> bool:
    return kwargs.get("groupby") is not None


def _flat(result: Any, grouped: bool) -> List[BufferedData]:
    return [it for g in result for it in g] if grouped else result


def clone_object() -> Callable:
    """Deep-copy data on the way in (push, update) and items on the way out (sample), so that
    neither the producer nor the consumer can change what the buffer holds by mutating objects."""

    def _clone(item: BufferedData) -> BufferedData:
        return BufferedData(copy.deepcopy(item.data), item.index, copy.deepcopy(item.meta))

    def clone_object_mw(action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            return chain(copy.deepcopy(data), copy.deepcopy(meta))
        if action == "sample":
            res = chain(*args, **kwargs)
            if _is_grouped(kwargs):
                return [[_clone(it) for it in g] for g in res]
            return [_clone(it) for it in res]
        if action == "update":
            index, data, meta = _args3(args, kwargs, "index", "data", "meta")
            return chain(index, copy.deepcopy(data), copy.deepcopy(meta))
        if action == "update_many":
            indices, data, meta = _args3(args, kwargs, "indices", "data", "meta")
            return chain(indices, copy.deepcopy(data), copy.deepcopy(meta))
        return chain(*args, **kwargs)

    return clone_object_mw


def _args2(args: tuple, kwargs: dict, a: str, b: str) -> tuple:
    x = args[0] if len(args) > 0 else kwargs.get(a)
    y = args[1] if len(args) > 1 else kwargs.get(b)
    return x, y


def _args3(args: tuple, kwargs: dict, a: str, b: str, c: str) -> tuple:
    x = args[0] if len(args) > 0 else kwargs.get(a)
    y = args[1] if len(args) > 1 else kwargs.get(b)
    z = args[2] if len(args) > 2 else kwargs.get(c)
    return x, y, z


def use_time_check(buffer: Buffer, max_use: float = float("inf")) -> Callable:
    """Delete an item once it has been sampled ``max_use`` times.

    Push sets ``meta["use_count"] = 0``; every time an item is returned by ``sample`` its
    ``meta["use_count"]`` grows by one, and items reaching ``max_use`` are deleted from ``buffer``
    (after being returned by that sample).
    """
    if not (isinstance(max_use, (int, float)) and max_use >= 1):
        raise ValueError(f"use_time_check: max_use must be a number >= 1, got {max_use!r}")

    def use_time_check_mw(action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            meta = dict(meta) if meta else {}
            meta["use_count"] = 0
            return chain(data, meta)
        if action == "sample":
            res = chain(*args, **kwargs)
            dead = []
            for it in _flat(res, _is_grouped(kwargs)):
                c = it.meta.get("use_count", 0) + 1
                it.meta["use_count"] = c
                if c >= max_use:
                    dead.append(it.index)
            if dead:
                buffer.delete(dead)
            return res
        return chain(*args, **kwargs)

    return use_time_check_mw


def staleness_check(buffer: Buffer, max_staleness: float = float("inf")) -> Callable:
    """Drop data collected too many training iterations ago.

    Push needs ``meta["train_iter_data_collected"]`` (the learner's train iteration when the data
    was collected); sample needs ``sample(..., train_iter_sample_data=<current train iter>)``.
    Before sampling, items with ``train_iter_sample_data - train_iter_data_collected >
    max_staleness`` are deleted. Stale items are found from the oldest end, so the cost is the
    number deleted as long as pushes come in non-decreasing collection order (otherwise a full scan
    is made).
    """
    if not (isinstance(max_staleness, (int, float)) and max_staleness >= 0):
        raise ValueError(f"staleness_check: max_staleness must be a number >= 0, got {max_staleness!r}")
    key = "train_iter_data_collected"
    state = {"last": -math.inf, "monotonic": True}

    def staleness_check_mw(action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            if not meta or key not in meta:
                raise ValueError(f"staleness_check: push(data, meta={{{key!r}: <train iter>}}) is required")
            it = meta[key]
            if it < state["last"]:
                state["monotonic"] = False
            state["last"] = max(state["last"], it)
            return chain(data, meta)
        if action == "sample":
            if "train_iter_sample_data" not in kwargs:
                raise ValueError("staleness_check: call sample(..., train_iter_sample_data=<current train iter>)")
            now = kwargs.pop("train_iter_sample_data")
            if state["monotonic"]:
                while buffer.count():
                    oldest = buffer.get(0)
                    c = oldest.meta.get(key)
                    if c is None or now - c <= max_staleness:
                        break
                    buffer.delete(oldest.index)
            else:
                stale = [i for i in _all_items(buffer)
                         if i.meta.get(key) is not None and now - i.meta[key] > max_staleness]
                buffer.delete([i.index for i in stale])
            return chain(*args, **kwargs)
        return chain(*args, **kwargs)

    return staleness_check_mw


def _all_items(buffer: Buffer) -> List[BufferedData]:
    return [buffer.get(k) for k in range(buffer.count())]


class PriorityExperienceReplay:
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
    _ACC_MIN = 0.2  # below this rejection-sampling acceptance rate, draw from the tree instead

    def __init__(self, buffer: DequeBuffer, IS_weight: bool = True, priority_power_factor: float = 0.6,
                 IS_weight_power_factor: float = 0.4, IS_weight_anneal_train_iter: float = 1e5) -> None:
        if not isinstance(buffer, DequeBuffer):
            raise TypeError("PriorityExperienceReplay needs a DequeBuffer (or a view of one)")
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
        self._s = buffer._s
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
        with buffer._lock:
            self._s.listeners.append(self)
            self._s.syncers.append(self)
            self.on_load()

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
            items = s._result(slots)
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
        res = s._result(slots, False)
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
        with self.buffer._lock:
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

    def _update_many(self, chain: Callable, indices: Any, data: Any, meta: Any) -> Any:
        """``update_many`` through this PER: the rest of the chain, then the new priorities."""
        if self._ext is not None and data is None and getattr(chain, "__func__", None) is DequeBuffer._update_many:
            ok = self._update_direct(indices, meta)
            if ok is not None:
                return ok
        last = self._last
        pri = self._priorities(meta, len(indices))
        if pri is None:
            return chain(indices, data, meta)
        s = self._s
        ids = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        known = last is not None and last[2] == s.version and ids == self._last_ids(last)
        if known:
            # the indices of the last sample, nothing pushed or removed since: slots are known
            slots = last[1]
            ids = _SlotIds(ids)
            ids.slots, ids.version = slots, s.version
        else:
            get = s.id2slot.get
            slots = np.array([get(i, -1) for i in ids], dtype=np.int64)
        if isinstance(meta, Mapping):  # the priorities are written here, in one pass
            rest = None if len(meta) == 1 else {k: v for k, v in meta.items() if k != "priority"}
            if known and rest is None and data is None and getattr(chain, "__func__", None) is DequeBuffer._update_many:
                ok = [True] * len(ids)  # what the storage answers for ids it vouches for (known)
            else:
                ok = chain(ids, data, rest or None)
        else:
            ok = chain(ids, data, meta)
        if isinstance(pri, list):
            arr = np.array([np.nan if p is None else p for p in pri], dtype=np.float64)
            keep = (slots >= 0) & ~np.isnan(arr)
        elif not known:
            arr = pri
            keep = slots >= 0
        else:
            arr = pri
            keep = None
        if keep is not None and not keep.all():
            slots, arr = slots[keep], arr[keep]
        pr, self._prange = self._prange, None
        if len(slots) and self._ext is not None:
            items = last[4] if known else None
            if items is not None and not (type(arr) is np.ndarray and len(items) == len(arr)):
                items = None
            arr = np.ascontiguousarray(arr, dtype=np.float64)
            lo, hi, olo, ohi, nlo, nhi = self._ext.update(slots, arr, self._raw, self._tree._leaf, self.alpha,
                                                          self._FLOOR, items, self._stale)
            if hi > self.max_priority:
                self.max_priority = hi
            self._tree.wrote(slots, olo, ohi, nlo, nhi)
        elif len(slots):
            self._raw[slots] = arr
            items = last[4] if known else None
            if items is not None and type(arr) is np.ndarray and len(items) == len(arr):
                # the items of the last sample(): write meta["priority"] now, while they are in cache
                # (none of them is stale: the sample wrote their meta; raw holds the latest value)
                for it, p in zip(items, arr.tolist()):
                    it.meta["priority"] = p
            else:
                # meta["priority"] is written lazily (sync_meta) when the items are next read
                self._stale[slots] = True
            if pr is not None and pr[0] is arr:  # min / max already found by _priorities
                lo, m = pr[1], pr[2]
            else:
                lo, m = float(np.minimum.reduce(arr)), float(np.maximum.reduce(arr))
            if m > self.max_priority:
                self.max_priority = m
            if lo < self._FLOOR:
                arr = np.maximum(arr, self._FLOOR)
            if self.alpha != 1.0:
                arr = np.power(arr, self.alpha)
            # the slots of the last sample without replacement (all kept) are distinct
            self._tree.set_many(slots, arr, positive=True, distinct=known and keep is None and last[3])
        return ok

    def _update_direct(self, indices: Any, meta: Any) -> Optional[List[bool]]:
        """The common case of ``update_many`` with the compiled kernels, when the rest of the chain
        is the storage: ``indices`` (a list) are those of the last sample, nothing was pushed or
        removed since, and ``meta`` is ``{"priority": float64 array}``. One kernel call checks the
        priorities (finite, >= 0) and writes the raw priorities, the leaves and the sampled items'
        ``meta["priority"]``. Returns None (nothing done) when the case does not apply."""
        last = self._last
        if last is None or type(meta) is not dict or len(meta) != 1 or type(indices) is not list:
            return None
        v = meta.get("priority")
        if type(v) is not np.ndarray or v.dtype is not _F64 or len(v) != len(indices) or last[2] != self._s.version:
            return None
        ext = self._ext
        if not (ext.ids_match(indices, last[4]) if last[0] is None else indices == last[0]):
            return None
        slots = last[1]
        try:
            lo, hi, olo, ohi, nlo, nhi = ext.update(slots, v, self._raw, self._tree._leaf, self.alpha, self._FLOOR,
                                                    last[4], self._stale)
        except TypeError:  # e.g. a strided array: nothing was written, the general route takes it
            return None
        if hi > self.max_priority:
            self.max_priority = hi
        self._tree.wrote(slots, olo, ohi, nlo, nhi)
        return [True] * len(indices)

    @staticmethod
    def _last_ids(last: tuple) -> List[int]:
        """The indices of the last sample (the compiled route keeps only its items)."""
        return [it.index for it in last[4]] if last[0] is None else last[0]

    def _priorities(self, meta: Any, n: int) -> Optional[list]:
        if meta is None:
            return None
        if isinstance(meta, Mapping):
            if "priority" not in meta:
                return None
            v = meta["priority"]
            if hasattr(v, "detach"):  # torch tensor (possibly requiring grad / on another device)
                v = v.detach().cpu().numpy()
            arr = np.asarray(v, dtype=np.float64).reshape(-1)
            if len(arr) != n:
                raise ValueError(f"update_many: {len(arr)} priorities for {n} indices")
            if n:
                lo, hi = float(np.minimum.reduce(arr)), float(np.maximum.reduce(arr))
                if not (lo >= 0 and hi < math.inf):
                    raise ValueError("priorities must be finite and >= 0 (got NaN, inf or a negative value)")
                self._prange = (arr, lo, hi)
            return arr
        out = []
        for m in meta:
            if m and "priority" in m:
                out.append(_check_priority(m["priority"]))
            else:
                out.append(None)
        return out

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

    def _weights(self, slots: np.ndarray) -> np.ndarray:
        """``(leaf / min leaf) ** -beta`` as float32 (``leaf`` = priority ** alpha)."""
        tree = self._tree
        mn = tree.min
        b = self.beta
        if self._ext is not None:
            out = np.empty(len(slots), dtype=np.float32)
            self._ext.is_weights(tree._leaf, slots, mn, b, out)
            return out
        return np.multiply(np.power(tree._leaf.take(slots), -b), mn ** b, dtype=np.float32)

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

    # ------------------------------------------------------------------ state
    def state_dict(self) -> Dict[str, Any]:
        """Counters plus every live item's priority (by index); loads with ``torch.load(weights_only=True)``."""
        with self.buffer._lock:
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
        with self.buffer._lock:
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


_F64 = np.dtype(np.float64)


def _valid_priority(p: Any) -> bool:
    try:
        p = float(p)
    except (TypeError, ValueError):
        return False
    return math.isfinite(p) and p >= 0


def _check_priority(p: Any) -> float:
    if not _valid_priority(p):
        raise ValueError(f"priority must be a finite number >= 0, got {p!r}")
    return float(p)


def group_sample(size_in_group: int, ordered_in_group: bool = True) -> Callable:
    """With ``sample(..., groupby=key)``: keep at most ``size_in_group`` items of each group --
    a random contiguous run in push order (``ordered_in_group``) or a random subset in random order.
    Shorter groups are returned whole (combine with :func:`padding` to fill them)."""
    if isinstance(size_in_group, bool) or not isinstance(size_in_group, int) or size_in_group < 1:
        raise ValueError(f"group_sample: size_in_group must be an integer >= 1, got {size_in_group!r}")

    def group_sample_mw(action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action != "sample":
            return chain(*args, **kwargs)
        if not _is_grouped(kwargs):
            raise ValueError("group_sample: call sample(..., groupby=<meta key>)")
        res = chain(*args, **kwargs)
        out = []
        for g in res:
            if len(g) <= size_in_group:
                out.append(list(g))
            elif ordered_in_group:
                start = random.randint(0, len(g) - size_in_group)
                out.append(list(g[start:start + size_in_group]))
            else:
                out.append(random.sample(list(g), size_in_group))
        return out

    return group_sample_mw


def padding(policy: str = "random", size: Optional[int] = None) -> Callable:
    """With ``sample(..., groupby=key)``: pad every group to ``size`` items (default: the longest
    group of the result).

    ``policy``: ``"random"`` repeats random items of the group, ``"last"`` repeats the last item,
    ``"zero"`` adds items whose data are zeros shaped like the group's first item (index -1).
    Padding items are new :class:`BufferedData` with ``meta["padding"] = True`` (the real items are
    returned unchanged). Other samples pass through.
    """
    if policy not in ("random", "last", "zero"):
        raise ValueError(f"padding: policy must be 'random', 'last' or 'zero', got {policy!r}")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"padding: size must be an integer >= 1 or None, got {size!r}")

    def make(g: List[BufferedData]) -> BufferedData:
        if policy == "random":
            src = random.choice(g)
        elif policy == "last":
            src = g[-1]
        else:
            return BufferedData(_zeros_like(g[0].data), -1, {"padding": True})
        return BufferedData(src.data, src.index, {**src.meta, "padding": True})

    def padding_mw(action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action != "sample" or not _is_grouped(kwargs):
            return chain(*args, **kwargs)
        res = chain(*args, **kwargs)
        if not res:
            return res
        target = size if size is not None else max(len(g) for g in res)
        out = []
        for g in res:
            g = list(g)
            if g and len(g) < target:
                g.extend(make(g) for _ in range(target - len(g)))
            out.append(g)
        return out

    return padding_mw


def _zeros_like(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor):
        return torch.zeros_like(x)
    if isinstance(x, np.ndarray):
        return np.zeros_like(x)
    if isinstance(x, np.generic):
        return type(x)(0)
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return type(x)(0)
    if isinstance(x, Mapping):
        return {k: _zeros_like(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_zeros_like(v) for v in x)
    return None


def sample_range_view(buffer: Buffer, start: Optional[int], stop: Optional[int] = None) -> Callable:
    """Restrict sampling to ``slice(start, stop)`` of the items in push order (oldest first) unless
    the caller passes its own ``sample_range``. E.g. ``buf.view().use(sample_range_view(buf, -1000))``
    is a view that samples only the newest 1000 items."""
    for name, v in (("start", start), ("stop", stop)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise ValueError(f"sample_range_view: {name} must be an integer or None, got {v!r}")
    rng = slice(start, stop)

    def sample_range_view_mw(action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        if action == "sample" and kwargs.get("sample_range") is None:
            kwargs["sample_range"] = rng
        return chain(*args, **kwargs)

    return sample_range_view_mw
