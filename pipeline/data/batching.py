"""What ``DequeBuffer.sample_batch`` returns: :class:`SampledBatch`."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, List, Optional

import numpy as np
import torch

from .item import BufferedData, copy_repeats

if TYPE_CHECKING:
    from .storage import SlotStorage

__all__ = ["SampledBatch"]


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
                 items: Optional[List[Optional[BufferedData]]] = None, *, _storage: Optional["SlotStorage"] = None,
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
            s, slots = self._storage, self._slots
            assert s is not None and slots is not None  # given together when the items are not
            with s.lock:
                out: List[Optional[BufferedData]] = []
                for slot, idx in zip(slots.tolist(), self.index):
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
