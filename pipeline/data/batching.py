"""Batches straight from a buffer: :class:`SampledBatch` and the columnar ``sample_batch`` path."""
from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np
import torch

from .collate import collate
from .item import BufferedData, _Sampled, copy_repeats

if TYPE_CHECKING:
    from .buffer import DequeBuffer
    from .storage import SlotStorage

__all__ = ["SampledBatch", "sample_batch"]


class SampledBatch:
    """Result of :meth:`DequeBuffer.sample_batch`.

    ``data``: the sampled data collated into (nested dicts of) torch tensors with a leading batch
    dimension; ``index``: the items' indices (for ``update``/``update_many``); ``weight``: float32
    tensor ``[B]`` of importance-sampling weights when prioritized replay is in use, else ``None``;
    ``items``: the sampled :class:`BufferedData` objects (built on first access when the buffer has
    no middleware; an item evicted or deleted before that access shows up as ``None``).
    """

    __slots__ = ("data", "index", "weight", "_items", "_storage", "_slots")

    def __init__(self, data: Any, index: List[int], weight: Optional[torch.Tensor],
                 items: Optional[List[BufferedData]] = None, *, _storage: Optional["SlotStorage"] = None,
                 _slots: Optional[np.ndarray] = None) -> None:
        self.data = data
        self.index = index
        self.weight = weight
        self._items = items
        self._storage = _storage
        self._slots = _slots

    @property
    def items(self) -> List[Optional[BufferedData]]:
        if self._items is None:
            s = self._storage
            with s.lock:
                out: List[Optional[BufferedData]] = []
                for slot, idx in zip(self._slots.tolist(), self.index):
                    it = s.items[slot]
                    if it is None or it.index != idx:
                        sl = s.id2slot.get(idx)
                        it = None if sl is None else s.items[sl]
                    out.append(it)
                if s.syncers:
                    live = [s.id2slot[it.index] for it in out if it is not None]
                    if live:
                        s.sync(np.array(live, dtype=np.int64))
                copy_repeats(out)  # sample_batch(replace=True): repeats are copies
            self._items = out
            self._storage = self._slots = None
        return self._items

    def __repr__(self) -> str:
        return f"SampledBatch(index={self.index!r}, weight={self.weight!r}, data={self.data!r})"


def sample_batch(buf: "DequeBuffer", size: int, replace: bool = False, sample_range: Optional[slice] = None,
                 ignore_insufficient: bool = False, **kwargs: Any) -> SampledBatch:
    """:meth:`DequeBuffer.sample_batch <pipeline.data.DequeBuffer.sample_batch>` (see there): the
    columnar fast paths, else the middleware chain with ``_columns_only=True`` and :func:`collate`."""
    with buf._lock:
        s = buf._s
        cols = s.ensure_columns() if s.columnar is not False else None  # rows up to date
        if (cols is not None and not buf._middleware and not kwargs and sample_range is None
                and type(size) is int and 0 < size and (replace or size <= s.count)):
            # fast path: no middleware, so no item objects are needed to build the batch
            slots = s.dense[s.draw(s.count, size, replace)]
            if cols.ok[slots].all():
                return SampledBatch(cols.gather(slots), s.slot_id[slots].tolist(), None,
                                    _storage=s, _slots=slots)
            items = s._result(slots, True, replace)
            return SampledBatch(collate([it.data for it in items]), [it.index for it in items], None, items)
        fast = buf._fast
        if (fast is not None and cols is not None and not kwargs and sample_range is None and not replace
                and type(size) is int and 0 < size <= s.count):
            out = fast._sample_batch(cols, size)
            if out is not None:
                return out
        items = buf._c_sample(size, indices=None, replace=replace, sample_range=sample_range,
                               ignore_insufficient=ignore_insufficient, groupby=None,
                               unroll_len=None, _columns_only=True, **kwargs)
        if not items:
            raise ValueError("sample_batch(): nothing to sample (the buffer is empty)")
        data = None
        weight = None
        if type(items) is _Sampled:
            ref = items.ref
            same = len(ref) == len(items) and all(map(operator.is_, items, ref))
            if same and items.version == s.version:  # nothing pushed/removed since: ids by slot
                index = s.slot_id[items.slots].tolist()
            else:
                index = [it.index for it in items]
            if cols is not None and same and (
                    items.pushes == s.pushes or s.slot_id[items.slots].tolist() == index):
                if cols.ok[items.slots].all():
                    data = cols.gather(items.slots)
            extra = items.columns
            if extra and "priority_IS" in extra:
                weight = torch.from_numpy(extra["priority_IS"])
        else:  # a middleware built a new list (e.g. clone_object): its meta is this call's
            index = [it.index for it in items]
            if "priority_IS" in items[0].meta:
                weight = torch.tensor([it.meta["priority_IS"] for it in items], dtype=torch.float32)
        if data is None:
            data = collate([it.data for it in items])
        return SampledBatch(data, index, weight, items)
