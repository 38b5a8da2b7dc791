"""Replay buffers with a middleware chain: :class:`DequeBuffer`.

:class:`DequeBuffer` is a FIFO replay buffer of fixed size. Every item gets a stable, unique integer
``index`` when pushed (a counter, never reused and never an offset), so ``update``/``delete`` keep
working on the right item after other items are deleted or evicted.

Where things live: the public API and the middleware chain in :mod:`.buffer_chain` (``Buffer``);
the slots, order, columns and group indexes in :mod:`.storage` (``SlotStorage``, with its
interface for middleware and alternative storages); what ``sample_batch`` returns in :mod:`.batching`
(``SampledBatch``); the file format in :mod:`.serialization`.

All public methods hold one re-entrant lock (shared by views), so concurrent ``push``/``sample``
from several threads are safe.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any, List, Optional, Sequence

import numpy as np
import torch

from .batching import SampledBatch
from .buffer_chain import ACTIONS, Buffer, Middleware, _check_size, _meta_cols, _meta_rows
from .columns import Columns, Unsupported, collate  # noqa: F401 - old import path
from .item import BufferedData, _Sampled, _SlotIds  # noqa: F401 - _Sampled: old import path
from .serialization import load_into_storage, storage_payload
from .storage import SlotStorage, _Storage  # noqa: F401 - _Storage: old private name
from .group_index import GroupIndex as _GroupIndex  # noqa: F401 - old private name

__all__ = ["Buffer", "DequeBuffer", "BufferedData", "SampledBatch", "Middleware", "ACTIONS", "SlotStorage"]


class DequeBuffer(Buffer):
    """FIFO replay buffer holding at most ``size`` items.

    ``columnar``: mirror the data into numpy columns for :meth:`sample_batch` -- ``None`` (default)
    starts mirroring at the first ``sample_batch`` call, ``True`` at the first push, ``False``
    never. ``seed`` seeds this buffer's random generator (default: drawn from ``np.random``, so
    ``np.random.seed`` makes runs reproducible).

    Example::

        buf = DequeBuffer(20000)
        buf.push({"obs": obs, "action": 1, ...}, meta={"env": 0})
        batch = buf.sample_batch(64)        # SampledBatch: .data["obs"] is a [64, ...] tensor
    """

    def __init__(self, size: int, *, columnar: Optional[bool] = None, seed: Optional[int] = None,
                 storage: Optional[SlotStorage] = None, _storage: Optional[SlotStorage] = None) -> None:
        size = _check_size("buffer size", size, 1)
        if storage is None:
            storage = _storage
        if storage is not None and storage.size != size:
            raise ValueError(f"DequeBuffer(size={size}, storage=...): the storage has {storage.size} slots")
        self._s = storage if storage is not None else SlotStorage(size, columnar, seed)
        super().__init__(size, self._s.lock)

    def _copied_lock(self) -> Any:
        return self._s.lock  # a copied storage has a new lock; the buffer shares it, as views do

    def __repr__(self) -> str:
        return f"DequeBuffer(size={self.size}, count={self._s.count}, middleware={len(self._middleware)})"

    # ------------------------------------------------------------------ simple queries
    def count(self) -> int:
        """Number of stored items."""
        with self._lock:
            return self._s.count

    def get(self, offset: int) -> BufferedData:
        """The item at position ``offset`` in push order (0 = oldest, -1 = newest)."""
        with self._lock:
            s = self._s
            n = s.count
            if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)):
                raise TypeError(f"get() takes an integer offset, got {type(offset).__name__}")
            if not -n <= offset < n:
                raise IndexError(f"offset {offset} out of range for a buffer holding {n} items")
            slot = int(s.ordered_slots()[offset])
            if s.syncers:
                s.sync(np.array([slot]))
            return s.items[slot]

    def get_by_index(self, index: int) -> Optional[BufferedData]:
        """The item with this ``index``, or None."""
        with self._lock:
            s = self._s
            slot = s.id2slot.get(index)
            if slot is None:
                return None
            if s.syncers:
                s.sync(np.array([slot]))
            return s.items[slot]

    def __contains__(self, index: object) -> bool:
        with self._lock:
            return index in self._s.id2slot

    def indices(self) -> List[int]:
        """Indices of all items in push order (O(n))."""
        with self._lock:
            s = self._s
            return s.slot_id[s.ordered_slots()].tolist()

    def view(self) -> "DequeBuffer":
        """A buffer sharing this one's storage and lock, with its own (empty) middleware chain."""
        return DequeBuffer(self.size, storage=self._s)

    @property
    def storage(self) -> SlotStorage:
        """The slot storage behind this buffer and its views (see :mod:`pipeline.data.storage`)."""
        return self._s

    # ------------------------------------------------------------------ core of the chain
    def _push(self, data: Any, meta: Optional[Mapping]) -> BufferedData:
        return self._s.push(data, meta)

    def _sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None,
                replace: bool = False, sample_range: Optional[slice] = None,
                ignore_insufficient: bool = False, groupby: Optional[str] = None,
                unroll_len: Optional[int] = None, _columns_only: bool = False, **unknown: Any) -> Any:
        if unknown:
            raise TypeError(f"sample() got unexpected keyword arguments {sorted(unknown)} (extra arguments "
                            "are only accepted when a middleware that consumes them is in use)")
        s = self._s
        if sample_range is not None and not isinstance(sample_range, slice):
            raise TypeError(f"sample_range must be a slice (e.g. slice(-1000, None)), got {sample_range!r}")
        if indices is not None:
            if groupby is not None:
                raise ValueError("sample(): pass either indices or groupby, not both")
            return s.take_ids(indices, ignore_insufficient, not _columns_only, replace)
        if unroll_len is not None:
            unroll_len = _check_size("unroll_len", unroll_len, 1)
            if groupby is None:
                raise ValueError("sample(unroll_len=...) needs groupby=<meta key> (sequences come from one group)")
        if groupby is not None:
            if size is not None:
                size = _check_size("sample size", size)
            return s.sample_groups(size, groupby, unroll_len, replace, sample_range, ignore_insufficient)
        if size is None:
            raise ValueError("sample() needs a size (or indices=[...])")
        return s.sample_uniform(_check_size("sample size", size), replace, sample_range, ignore_insufficient,
                                not _columns_only)

    def _update(self, index: int, data: Any = None, meta: Optional[Mapping] = None) -> bool:
        s = self._s
        slot = s.id2slot.get(index)
        if slot is None:
            return False
        if meta is not None and not isinstance(meta, Mapping):
            raise TypeError(f"update(meta=...) must be a dict or None, got {type(meta).__name__}")
        item = s.items[slot]
        if data is not None:
            item.data = data
            if s.columns is not None:
                s.columns.ok[slot] = False
                s.pending.append(slot)
        if meta:
            item.meta.update(meta)
            if s.groups:
                for key, gi in list(s.groups.items()):
                    if key in meta:
                        try:
                            gi.move(item)
                        except TypeError:
                            del s.groups[key]
        return True

    def _update_many(self, indices: Sequence[int], data: Any = None, meta: Any = None) -> List[bool]:
        if isinstance(indices, (np.ndarray, torch.Tensor)):
            indices = indices.tolist()
        n = len(indices)
        if data is not None and len(data) != n:
            raise ValueError(f"update_many got {len(data)} data values for {n} indices")
        s = self._s
        if data is None and meta is None:
            if type(indices) is _SlotIds and getattr(indices, "version", None) == s.version:
                return [True] * n  # a middleware vouches that these items are all still stored
            id2slot = s.id2slot
            return [i in id2slot for i in indices]
        if data is None and not s.groups and isinstance(meta, Mapping):
            cols = [(k, rows_k) for k, rows_k in _meta_cols(meta, n).items()]
            id2slot, items, out = s.id2slot, s.items, []
            for j, i in enumerate(indices):
                slot = id2slot.get(i)
                if slot is None:
                    out.append(False)
                    continue
                m = items[slot].meta
                for k, col in cols:
                    m[k] = col[j]
                out.append(True)
            return out
        rows = _meta_rows(meta, n)
        datas = data if data is not None else [None] * n
        return [self._update(i, d, m) for i, d, m in zip(indices, datas, rows)]

    def _delete(self, indices: List[int]) -> int:
        s = self._s
        n = 0
        for i in indices:
            slot = s.id2slot.get(i)
            if slot is not None:
                s.remove_slot(slot)
                n += 1
        return n

    def _clear(self) -> None:
        self._s.clear()

    def sample_batch(self, size: int, replace: bool = False, sample_range: Optional[slice] = None,
                     ignore_insufficient: bool = False, **kwargs: Any) -> SampledBatch:
        """Sample ``size`` items through the middleware chain and collate them into tensors.

        When the items share one structure (dicts of tensors / arrays / numbers) the batch is
        gathered from preallocated numpy columns (a few microseconds per field); otherwise it falls
        back to :func:`collate`. Returns a :class:`SampledBatch` (``.data``, ``.index``,
        ``.weight``, ``.items``). Raises ``ValueError`` if there is nothing to sample.

        The chain sees ``_columns_only=True``: a hint that per-item meta written only for the
        caller (PER's ``meta["priority_IS"]``) may be skipped, since ``.weight`` carries it.
        """
        with self._lock:
            s = self._s
            cols = s.ensure_columns() if s.columnar is not False else None  # rows up to date
            if (cols is not None and not self._middleware and not kwargs and sample_range is None
                    and type(size) is int and 0 < size and (replace or size <= s.count)):
                # fast path: no middleware, so no item objects are needed to build the batch
                slots = s.dense[s.draw(s.count, size, replace)]
                if cols.ok[slots].all():
                    return SampledBatch(cols.gather(slots), s.slot_id[slots].tolist(), None,
                                        _storage=s, _slots=slots)
                items = s._result(slots, True, replace)
                return SampledBatch(collate([it.data for it in items]), [it.index for it in items], None, items)
            fast = self._fast
            if (fast is not None and cols is not None and not kwargs and sample_range is None and not replace
                    and type(size) is int and 0 < size <= s.count):
                out = fast._sample_batch(cols, size)
                if out is not None:
                    return out
            items = self._c_sample(size, indices=None, replace=replace, sample_range=sample_range,
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

    # ------------------------------------------------------------------ persistence
    def save_data(self, path: str) -> None:
        """Write all items (data, meta, indices) to ``path`` in a format that loads without
        executing code (``torch.load(weights_only=True)``). Raises ``TypeError`` for data that
        cannot be stored safely (arbitrary Python objects)."""
        with self._lock:
            payload = storage_payload(self._s)
            payload["middleware"] = {key: mw.state_dict() for key, mw in self._stateful_middleware().items()}
        torch.save(payload, path)

    def load_data(self, path: str) -> None:
        """Replace the contents with what :meth:`save_data` wrote (indices are kept; if the file
        holds more items than ``size``, the newest ones are kept). Middleware state derived from meta
        (e.g. priorities) is rebuilt, and middleware with ``state_dict``/``load_state_dict`` at the same
        place in the chain get their saved state (PER: ``max_priority`` and the IS-weight annealing count)."""
        states = load_into_storage(self._s, path, self._lock)
        for key, mw in self._stateful_middleware().items():
            if key in states:
                try:
                    mw.load_state_dict(states[key])
                except (KeyError, TypeError, ValueError) as e:
                    raise ValueError(f"load_data({path!r}): the saved state of middleware {key} does not fit "
                                     f"({type(e).__name__}: {e}); the items were loaded") from None

    def _stateful_middleware(self) -> dict:
        return {f"{i}:{type(mw).__name__}": mw for i, mw in enumerate(self._middleware)
                if hasattr(mw, "state_dict") and hasattr(mw, "load_state_dict")}
