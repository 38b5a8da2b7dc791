"""How prioritized replay takes new priorities: :meth:`update_priority` of
:class:`~pipeline.data.prioritized_sampler.PrioritizedSampler` (a mixin; the state it writes is set up there).

Writes ``self._raw`` (raw priority per slot), ``self._stale`` (``meta["priority"]`` not yet
written), the tree's leaves and ``self.max_priority``; reads ``self._last`` (the last draw: ids,
slots, storage version, distinct?, the stored items or None) to skip the index -> slot
lookups when the indices are those of the last draw and nothing was pushed or removed since.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

import numpy as np

from .sampler import priority_array

__all__ = ["PriorityUpdates"]


_F64 = np.dtype(np.float64)


class PriorityUpdates:
    """``update_priority``: validation, index -> slot, then the raw priorities, meta and the tree."""

    def update_priority(self, indices: Sequence[int], priorities: Any) -> List[bool]:
        """New priorities (finite, ``>= 0``; an array, tensor or list with one value per index) for the
        items ``indices``. Returns one bool per index: was it stored (others are skipped).
        ``ValueError`` for a length mismatch or a NaN, infinite or negative priority (nothing written)."""
        if not hasattr(indices, "__len__"):
            raise TypeError(f"update_priority() takes a sequence of indices, got {type(indices).__name__}")
        ids = indices if type(indices) is list else (indices.tolist() if hasattr(indices, "tolist") else list(indices))
        n = len(ids)
        ext = self._ext
        if ext is not None and type(priorities) is np.ndarray and priorities.dtype is _F64 and priorities.ndim == 1:
            if len(priorities) != n:
                raise ValueError(f"update_priority: {len(priorities)} priorities for {n} indices")
            arr, lo, hi = priorities, None, None  # checked by the kernel before it writes anything
        else:
            arr, lo, hi = priority_array(priorities, n)
        if not n:
            return []
        s = self._s
        slots, items, distinct = self._known_slots(ids)
        if slots is None:
            get = s.id2slot.get
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
        s = self._s
        if last is None or last[2] != s.version or len(ids) != len(last[1]):
            return None, None, False
        same = ids == last[0]  # the list handed out with the draw: mostly the very same int objects
        if not same:
            return None, None, False
        return last[1], last[4], last[3]

    def _write(self, slots: np.ndarray, arr: np.ndarray, items: Optional[list], distinct: bool,
               lo: Optional[float], hi: Optional[float]) -> None:
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
        if lo is None:
            lo, hi = float(np.minimum.reduce(arr)), float(np.maximum.reduce(arr))
        if hi > self.max_priority:
            self.max_priority = hi
        if lo < self._FLOOR:
            arr = np.maximum(arr, self._FLOOR)
        if self.alpha != 1.0:
            arr = np.power(arr, self.alpha)
        self._tree.set_many(slots, arr, positive=True, distinct=distinct)
