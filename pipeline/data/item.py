"""What a buffer stores and returns: :class:`BufferedData` (and :class:`RowItem`, one living in its columnar row),
and the sample lists the storage builds (``sample_batch``'s batch form is :class:`~pipeline.data.records.TrainBatch`)."""
from __future__ import annotations

import copy
import types
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, SupportsIndex, Tuple, TypeVar, cast

import numpy as np
import torch

if TYPE_CHECKING:
    import threading

    from .columns import Columns

__all__ = ["BufferedData", "RowItem", "copy_repeats"]


@dataclass(slots=True, eq=False)
class BufferedData:
    """One stored item: ``data`` (what was pushed), ``index`` (stable unique id) and ``meta`` (dict).

    What a sample shares with the buffer:

    * ``sample()`` / ``get()`` / ``get_by_index()`` return the stored :class:`BufferedData` objects
      themselves (no copy, for speed): changing ``item.data`` or ``item.meta`` in place changes what
      the buffer holds. Change stored items through :meth:`DequeBuffer.update` instead.
    * Once its rows are written (``sample_batch``), a flat dict item lives in the buffer's columns
      only (a :class:`RowItem`); reading its ``data`` rebuilds an equal dict (arrays as new copies)
      that the item keeps from then on. In-place changes to it are not seen by ``sample_batch``.
    * An item that appears more than once in one sample (``replace=True``, repeated ``indices``,
      ``groupby`` with ``replace=True``, ``padding``) is the stored object the first time and a deep
      copy (data and meta) every other time: repeats never alias each other.
    * ``sample_batch()``'s tensors are always new memory (tensors gathered or stacked from the items);
      non-numeric fields are plain lists holding the stored objects themselves.
    * With the ``clone_object()`` middleware every sampled item is a full deep copy (and pushed /
      updated data are copied on the way in), so nothing is shared in either direction.
    """

    data: Any  # whatever was pushed
    index: int
    meta: Dict[str, Any]  # whatever the pusher and the middleware put there


_DATA: types.MemberDescriptorType = BufferedData.__dict__["data"]  # the slot descriptor: a RowItem keeps its _Row there


class _Row:
    """Where a :class:`RowItem`'s data lives: row ``slot`` of ``columns``, guarded by the storage's ``lock``."""

    __slots__ = ("columns", "slot", "lock")

    def __init__(self, columns: "Columns", slot: int, lock: "threading.RLock") -> None:
        self.columns, self.slot, self.lock = columns, slot, lock


class RowItem(BufferedData):
    """A stored item whose data lives only in its row of the buffer's columns (see
    the storage's ``_bind``). The first read of ``data`` rebuilds the dict from the row (arrays of
    its own) and the item becomes a plain :class:`BufferedData` holding it; assigning ``data``
    does the same with the new value. Copies and pickles are plain items."""

    __slots__ = ()

    @property
    def data(self) -> object:
        row = _DATA.__get__(self)
        if type(row) is not _Row:  # given its data by another thread meanwhile
            return row
        with row.lock:  # the row may be rewritten only under the storage's lock
            if type(self) is RowItem:
                self.detach()
        return _DATA.__get__(self)

    @data.setter
    def data(self, value: object) -> None:
        _DATA.__set__(self, value)
        _become_plain(self)

    def detach(self) -> None:
        """Become a plain item holding its data (the caller holds the storage's lock)."""
        row = _DATA.__get__(self)
        _DATA.__set__(self, row.columns.row(row.slot))
        _become_plain(self)

    def __reduce_ex__(self, protocol: SupportsIndex) -> Tuple[type, Tuple[object, int, Dict[str, object]]]:
        return BufferedData, (self.data, self.index, self.meta)


_Item = TypeVar("_Item", bound=Optional[BufferedData])


def _become_plain(item: BufferedData) -> None:
    """Turn ``item`` (a :class:`RowItem`, or a storage's item of another kind) into a plain
    :class:`BufferedData` holding what its data slot holds now."""
    setattr(item, "__class__", BufferedData)


def peek_data(item: BufferedData) -> object:
    """``item.data`` without keeping it in the item: a :class:`RowItem` stays in its row (what saving a
    whole buffer reads; the caller holds the storage's lock)."""
    if type(item) is RowItem:
        row = _DATA.__get__(item)
        return row.columns.row(row.slot)
    return item.data


def copy_repeats(items: List[_Item], start: int = 0) -> List[_Item]:
    """Replace, in place, every item of ``items[start:]`` that is an object already seen in ``items``
    by a deep copy (data and meta), so that no two entries of a sample are the same object."""
    seen = set(map(id, items[:start]))
    for j in range(start, len(items)):
        it = items[j]
        if it is None:  # no item at this place
            continue
        k = id(it)
        if k in seen:
            items[j] = cast(_Item, BufferedData(deep_copy(it.data), it.index, deep_copy(it.meta)))
        else:
            seen.add(k)
    return items


_ATOMS = (int, float, bool, str, bytes, type(None))


_T = TypeVar("_T")


def deep_copy(x: _T) -> _T:
    """``copy.deepcopy`` with fast paths for what transitions are made of (dicts, lists, tuples,
    tensors, numpy arrays, numbers, strings); anything else goes to ``copy.deepcopy``."""
    t = type(x)
    if t is dict:
        return cast(_T, {k: deep_copy(v) for k, v in cast(dict, x).items()})
    if t in _ATOMS:
        return x
    if t is torch.Tensor and not cast(torch.Tensor, x).requires_grad:
        return cast(_T, cast(torch.Tensor, x).clone())
    if t is np.ndarray and cast(np.ndarray, x).dtype.kind in "biufc":
        return cast(_T, cast(np.ndarray, x).copy())
    if t is list:
        return cast(_T, [deep_copy(v) for v in cast(list, x)])
    if t is tuple:
        return cast(_T, tuple(deep_copy(v) for v in cast(tuple, x)))
    return copy.deepcopy(x)
