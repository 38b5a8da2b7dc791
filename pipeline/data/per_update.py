"""How prioritized replay takes new priorities: the ``update``/``update_many`` half of
:class:`~pipeline.data.per.PriorityExperienceReplay` (a mixin; the state it writes is set up there).

Writes ``self._raw`` (raw priority per slot), ``self._stale`` (``meta["priority"]`` not yet
written), the tree's leaves and ``self.max_priority``; reads ``self._last`` (the last sample: ids,
slots, storage version, distinct?, items) to skip the index -> slot lookups for its indices.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Callable, List, Optional

import numpy as np

from .buffer import DequeBuffer
from .item import _SlotIds

__all__ = ["PriorityUpdates"]


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



class PriorityUpdates:
    """``update_many`` through PER: validation, the storage's part of the chain, then the tree."""

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
