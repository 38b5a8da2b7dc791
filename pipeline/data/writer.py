"""Writers: where each push of a :class:`~pipeline.data.DequeBuffer` goes (one component of a buffer).

A buffer is a composition: the *storage* (:class:`~pipeline.data.storage.SlotStorage`) keeps the
items in fixed slots, the *sampler* (:mod:`.sampler`) picks slots to hand out, and the *writer*
decides, at every push, which item leaves to make room, or whether the new item is kept at all
(TorchRL's ``Writer``; its ``RoundRobinWriter`` is :class:`FifoWriter` here). The storage asks its
writer once per push (:meth:`Writer.push_slot`) and then does the work: it removes the chosen item
(samplers and other listeners hear ``on_remove`` as for any removal) and stores the new one.

A writer answers with one of:

* :data:`FREE` (``-1``): nothing leaves; the new item takes a free slot (only while the storage is
  not full: ``storage.count < storage.size``);
* an occupied slot: its item is evicted and the new item takes that slot;
* :data:`DROP` (``-2``): the new item leaves at once. ``push`` still returns it, with a new index
  (indices are never reused), but it is not stored: ``item.index in buffer`` is False and no
  listener (sampler, group index) hears of it, just as for an item pushed and evicted at once.

To write your own (a reservoir, "keep the first N", ...), implement :class:`Writer` and pass it as
``DequeBuffer(size, writer=...)``; one writer per storage. Its ``state_dict`` is saved by
``save_data`` and restored by ``load_data`` (the default :class:`FifoWriter` keeps no state).
"""
from __future__ import annotations

from typing import Dict, Optional, Protocol, runtime_checkable

import numpy as np

__all__ = ["Writer", "WriterStorage", "FifoWriter", "FREE", "DROP"]

#: :meth:`Writer.push_slot`: nothing leaves, the new item takes a free slot.
FREE = -1
#: :meth:`Writer.push_slot`: the new item is not stored.
DROP = -2


class WriterStorage(Protocol):
    """What a writer may read of the storage it serves (:class:`~pipeline.data.storage.SlotStorage` has it):
    ``count`` items in ``size`` slots, the occupied slots ``dense[:count]``, and the push order
    (``order[otail]`` is the oldest live item's slot). A writer never changes them."""

    size: int
    count: int
    dense: np.ndarray
    order: np.ndarray
    otail: int


@runtime_checkable
class Writer(Protocol):
    """What a storage asks of its writer (the caller holds the storage's lock)."""

    def attach(self, storage: WriterStorage) -> None:
        """Bind to ``storage`` (once; attaching again to the same storage does nothing)."""

    def push_slot(self) -> int:
        """Called by every push before anything is stored: :data:`FREE`, an occupied slot whose item
        leaves (the new item takes it) or :data:`DROP` (see the module docstring). When the storage is
        full the answer must be an occupied slot or :data:`DROP`."""

    def state_dict(self) -> Dict[str, object]:
        """The writer's own state (loadable with ``torch.load(weights_only=True)``)."""

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Restore :meth:`state_dict`."""


class FifoWriter:
    """First in, first out (the default): while there is room a push takes a free slot; when the
    storage is full the oldest item (in push order) leaves. Keeps no state of its own."""

    _s: WriterStorage  # set by attach(): the storage served

    def __init__(self) -> None:
        self.storage: Optional[WriterStorage] = None

    def __repr__(self) -> str:
        return "FifoWriter()"

    def attach(self, storage: WriterStorage) -> None:
        """Bind to ``storage``."""
        if bind_writer(self, storage):
            self._s = storage

    def push_slot(self) -> int:
        """:data:`FREE`, or the oldest item's slot when the storage is full (attach it first)."""
        s = self._s
        if s.count < s.size:
            return FREE
        return int(s.order[s.otail])  # the storage keeps order[otail] on its oldest live item

    def state_dict(self) -> Dict[str, object]:
        """Empty: nothing to save."""
        return {}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Nothing to restore."""


def bind_writer(writer: object, storage: WriterStorage) -> bool:
    """Set ``writer.storage`` (for writers that keep it there); False when it was already bound to
    ``storage``. ``ValueError`` when the writer serves another storage."""
    current = getattr(writer, "storage", None)
    if current is storage:
        return False
    if current is not None:
        raise ValueError(f"{type(writer).__name__} is already used by another buffer's storage: "
                         "create one writer per buffer")
    setattr(writer, "storage", storage)
    return True
