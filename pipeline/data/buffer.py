"""Replay buffers with a middleware chain: :class:`DequeBuffer`.

:class:`DequeBuffer` is a replay buffer of fixed size (FIFO unless given another writer). Every item
gets a stable, unique integer ``index`` when pushed (a counter, never reused and never an offset), so
``update``/``delete`` keep working on the right item after other items are deleted or evicted.

A buffer is a composition of components: the *storage* (:mod:`.storage`, ``SlotStorage``: slots,
order, columns, group indexes, with its interface for samplers and alternative storages), the
*writer* (:mod:`.writer`: ``FifoWriter`` by default) that decides which item each push evicts, and
the *sampler* (:mod:`.sampler`: ``UniformSampler`` by default, or ``PrioritizedSampler`` for
prioritized replay) that picks the slots to hand out. The buffer itself is
the public API and the middleware chain (``buffer.use(mw)``: clone, staleness, use-time, grouping,
...); ``sample_batch`` returns the batch form of :mod:`.records` (``TrainBatch``: a dict of
``[B, ...]`` tensors with ``indices`` and, prioritized, ``weight``); the file format in :mod:`.serialization`.

All public methods hold one re-entrant lock (shared by views), so concurrent ``push``/``sample``
from several threads are safe.
"""
from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union, cast, overload

import numpy as np
import torch

from .collate import collate
from .item import BufferedData
from .records import TrainBatch
from .sampler import Priorities, Sampler, UniformSampler, _check_size, check_priority, draw_slots, priority_array
from .serialization import load_into_storage, restore_states, stateful_parts, storage_payload
from .storage import IndexBatch, ManyMeta, SlotStorage, _meta_rows, delete_ids, update_item, update_items
from .writer import Writer

__all__ = ["DequeBuffer", "BufferedData", "Middleware", "ACTIONS", "SlotStorage"]

#: A draw through the middleware chain (``DequeBuffer._drawn``).
_Drawn = Tuple[Tuple[BufferedData, ...], np.ndarray, int, Optional[np.ndarray]]

#: The actions that go through a buffer's middleware chain.
ACTIONS = ("push", "sample", "update", "update_many", "delete", "clear")

#: ``mw(action, chain, *args, **kwargs)``: handle (or just pass on via ``chain(*args, **kwargs)``)
#: one buffer action and return its result.
Middleware = Callable[..., object]


class DequeBuffer:
    """Replay buffer holding at most ``size`` items (FIFO by default).

    ``sampler``: which items ``sample``/``sample_batch`` draw (:mod:`pipeline.data.sampler`): a
    :class:`~pipeline.data.sampler.UniformSampler` (default) or a
    :class:`~pipeline.data.prioritized_sampler.PrioritizedSampler` (prioritized replay: new
    priorities go in through :meth:`update_priority`). ``writer``: which item a push evicts (:mod:`.writer`;
    default: the oldest; a given ``storage`` keeps its writer). ``storage``: where the items live (default: a
    :class:`SlotStorage`). ``columnar``: mirror the data into numpy columns for :meth:`sample_batch`
    -- ``None`` (default) starts mirroring at the first ``sample_batch`` call, ``True`` at the first
    push, ``False`` never. ``seed`` seeds this buffer's random generator (default: drawn from
    ``np.random``, so ``np.random.seed`` makes runs reproducible).

    Example::

        buf = DequeBuffer(20000, sampler=PrioritizedSampler(alpha=0.6, beta=0.4, anneal=1e5))
        buf.push({"obs": obs, "action": 1, ...}, meta={"env": 0})
        batch = buf.sample_batch(64)        # {"obs": [64, ...] tensor, ..., "indices": [64], "weight": [64]}
        buf.update_priority(batch["indices"], td_error.abs())

    The middleware chain: a middleware is ``mw(action, chain, *args, **kwargs)`` where ``action`` is one of
    :data:`ACTIONS`; it must call ``chain(*args, **kwargs)`` (possibly with changed arguments) to run the
    rest of the chain and return a result. Middleware that does not handle an action must pass it on
    unchanged. Arguments reaching the chain: ``push(data, meta)``, ``sample(size, indices=, replace=,
    sample_range=, ignore_insufficient=, groupby=, unroll_len=, **extra)``, ``update(index, data, meta)``,
    ``update_many(indices, data, meta)``, ``delete(indices)`` (always a list), ``clear()``.
    """

    def __init__(self, size: int, *, columnar: Optional[bool] = None, seed: Optional[int] = None,
                 storage: Optional[SlotStorage] = None, sampler: Optional[Sampler] = None,
                 writer: Optional[Writer] = None) -> None:
        size = _check_size("buffer size", size, 1)
        if storage is not None and storage.size != size:
            raise ValueError(f"DequeBuffer(size={size}, storage=...): the storage has {storage.size} slots")
        self._s = storage if storage is not None else SlotStorage(size, columnar, seed)
        if sampler is None:
            sampler = UniformSampler()
        elif not isinstance(sampler, Sampler):
            raise TypeError(f"DequeBuffer(sampler=...) needs a sampler (UniformSampler, PrioritizedSampler), "
                            f"got {type(sampler).__name__}")
        sampler.attach(self._s)
        self._sampler = sampler  # views share it
        if writer is not None:
            self._s.set_writer(writer)  # held by the storage: views share it too
        self.size = size
        self._lock = self._s.lock
        self._middleware: List[Middleware] = []
        # sample_batch through a middleware chain: (the items as the storage handed them out, their slots, the
        # storage's push count then, their IS weights or None), set by the chain's core, read and cleared at once
        self._drawn: Optional[_Drawn] = None
        self._build_chains()

    # ------------------------------------------------------------------ copies
    _NOT_COPIED = ("_lock", "_chained", "_c_push", "_c_sample", "_c_update", "_c_update_many", "_c_delete", "_c_clear")

    def __getstate__(self) -> dict:
        """``copy.deepcopy`` / ``pickle`` (in-process use): the copy is an independent buffer with
        its own lock; its middleware are copied with it (middleware that refer to the buffer refer
        to the copy). Middleware that cannot be copied (e.g. closures for pickle) raise."""
        state = self.__dict__.copy()
        for k in self._NOT_COPIED:
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = self._s.lock  # a copied storage has a new lock; the buffer shares it, as views do
        self._build_chains()

    # ------------------------------------------------------------------ middleware
    def use(self, middleware: Middleware) -> "DequeBuffer":
        """Append ``middleware`` to this buffer's chain (the first one used runs first); returns self."""
        if not callable(middleware):
            hint = " (a sampler is given to the buffer: DequeBuffer(size, sampler=...))" \
                if hasattr(middleware, "draw") else ""
            raise TypeError(f"use() needs a callable middleware(action, chain, *args, **kwargs), "
                            f"got {type(middleware).__name__}{hint}")
        with self._lock:
            self._middleware.append(middleware)
            self._build_chains()
        return self

    @property
    def middleware(self) -> List[Middleware]:
        """The middleware in use, in call order (a copy)."""
        return list(self._middleware)

    def _build_chains(self) -> None:
        chained = self._middleware
        self._chained = bool(chained)

        def build(action: str, core: Callable) -> Callable:
            fn = core
            for mw in reversed(chained):
                fn = functools.partial(mw, action, fn)
            return fn

        self._c_push = build("push", self._push)
        self._c_sample = build("sample", self._sample)
        self._c_update = build("update", self._update)
        self._c_update_many = build("update_many", self._update_many)
        self._c_delete = build("delete", self._delete)
        self._c_clear = build("clear", self._clear)

    # ------------------------------------------------------------------ public API
    def push(self, data: object, meta: Optional[Mapping[str, object]] = None) -> BufferedData:
        """Store ``data`` (with a copy of ``meta``); returns the item with its new ``index``. The writer decides what
        leaves (default: the oldest item, when full); a push it drops returns an item not stored (:mod:`.writer`)."""
        with self._lock:
            return self._c_push(data, meta)

    @overload  # without groupby: items
    def sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None, replace: bool = False,
               sample_range: Optional[slice] = None, ignore_insufficient: bool = False, groupby: None = None,
               unroll_len: Optional[int] = None, **kwargs: object) -> List[BufferedData]: ...

    @overload  # with groupby: groups of items
    def sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None, replace: bool = False,
               sample_range: Optional[slice] = None, ignore_insufficient: bool = False, *, groupby: str,
               unroll_len: Optional[int] = None, **kwargs: object) -> List[List[BufferedData]]: ...

    def sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None,
               replace: bool = False, sample_range: Optional[slice] = None,
               ignore_insufficient: bool = False, groupby: Optional[str] = None,
               unroll_len: Optional[int] = None, **kwargs: object
               ) -> Union[List[BufferedData], List[List[BufferedData]]]:
        """Sample items.

        - ``size``: how many items (or groups with ``groupby``); ``indices``: take exactly these
          items instead (``KeyError`` for missing ones unless ``ignore_insufficient``).
        - ``replace``: with replacement; without it no item is returned twice.
        - ``sample_range``: a ``slice`` over the items in push order (oldest first), e.g.
          ``slice(-1000, None)`` for the newest 1000.
        - ``ignore_insufficient``: return fewer items instead of raising ``ValueError`` when there is
          not enough data.
        - ``groupby``: a meta key; returns a list of groups (lists of items in push order) instead;
          with ``unroll_len`` each group is a random contiguous run of exactly ``unroll_len`` items
          (groups shorter than that are not eligible); ``size=None`` returns every eligible group.
        - extra keyword arguments are for middleware (e.g. ``train_iter_sample_data``).
        """
        with self._lock:
            return self._c_sample(size, indices=indices, replace=replace, sample_range=sample_range,
                                  ignore_insufficient=ignore_insufficient, groupby=groupby,
                                  unroll_len=unroll_len, **kwargs)

    def update(self, index: int, data: object = None, meta: Optional[Mapping[str, object]] = None) -> bool:
        """Replace the data (if not None) and merge ``meta`` into the meta of item ``index``.
        Returns False if there is no such item (deleted or evicted)."""
        with self._lock:
            return self._c_update(index, data, meta)

    def update_many(self, indices: IndexBatch, data: Optional[Sequence[object]] = None,
                    meta: ManyMeta = None
                    ) -> List[bool]:
        """Batched :meth:`update`. ``data``: one value per index or None; ``meta``: one dict per
        index, or one dict of columns (``{"priority": array_of_len_n}``). Returns one bool per index."""
        with self._lock:
            return self._c_update_many(indices, data, meta)

    def delete(self, indices: Union[int, Iterable[int]]) -> int:
        """Delete one index or an iterable of indices; unknown ones are ignored. Returns how many
        items were deleted."""
        if isinstance(indices, (int, np.integer)):
            ids = [int(indices)]
        elif isinstance(indices, (np.ndarray, torch.Tensor)):
            ids = indices.tolist()
        else:
            ids = list(indices)
        with self._lock:
            return self._c_delete(ids)

    def clear(self) -> None:
        """Delete everything."""
        with self._lock:
            self._c_clear()

    def __len__(self) -> int:
        return self.count()

    def __repr__(self) -> str:
        return (f"DequeBuffer(size={self.size}, count={self._s.count}, sampler={self._sampler!r}, "
                f"writer={self._s.writer!r}, middleware={len(self._middleware)})")

    @property
    def sampler(self) -> Sampler:
        """The sampler this buffer draws with (given to the constructor; shared with its views)."""
        return self._sampler

    @property
    def writer(self) -> Writer:
        """Which item each push evicts, or whether it is kept (:mod:`.writer`; shared with views)."""
        return self._s.writer

    def update_priority(self, indices: Sequence[int], priorities: Priorities) -> List[bool]:
        """New priorities for the items ``indices`` (one finite value ``>= 0`` each: an array, tensor or
        list), for a buffer whose sampler keeps priorities. Returns one bool per index: was it stored.
        Raises ``TypeError`` for a buffer that samples uniformly, ``ValueError`` for a length mismatch or
        a NaN, infinite or negative priority (then nothing is written)."""
        with self._lock:
            return self._sampler.update_priority(indices, priorities)

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
            return s.item(slot)

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
        """A buffer sharing this one's storage, lock and sampler, with its own (empty) middleware chain."""
        return DequeBuffer(self.size, storage=self._s, sampler=self._sampler)

    @property
    def storage(self) -> SlotStorage:
        """The slot storage behind this buffer and its views (see :mod:`pipeline.data.storage`)."""
        return self._s

    # ------------------------------------------------------------------ core of the chain
    def _push(self, data: object, meta: Optional[Mapping]) -> BufferedData:
        if meta and self._sampler.wants_priorities and isinstance(meta, Mapping) and "priority" in meta:
            check_priority(meta["priority"])
        return self._s.push(data, meta)

    def _sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None,
                replace: bool = False, sample_range: Optional[slice] = None,
                ignore_insufficient: bool = False, groupby: Optional[str] = None,
                unroll_len: Optional[int] = None, _columns_only: bool = False, **unknown: object) -> object:
        if unknown:
            raise TypeError(f"sample() got unexpected keyword arguments {sorted(unknown)} (extra arguments "
                            "are only accepted when a middleware that consumes them is in use)")
        s, smp = self._s, self._sampler
        if indices is not None:
            if groupby is not None:
                raise ValueError("sample(): pass either indices or groupby, not both")
            res, slots = s.take_ids(indices, ignore_insufficient)
            w = smp.weights(slots) if len(res) else None
            if w is not None:  # the sampler's weights for exactly these items
                for it, x in zip(res, w.tolist()):
                    it.meta["priority_IS"] = x
            return res
        if unroll_len is not None:
            unroll_len = _check_size("unroll_len", unroll_len, 1)
            if groupby is None:
                raise ValueError("sample(unroll_len=...) needs groupby=<meta key> (sequences come from one group)")
        if groupby is not None:
            if not smp.supports_groupby:
                raise ValueError(f"{type(smp).__name__} does not support groupby sampling (prioritized replay "
                                 "draws items, not groups)")
            if sample_range is not None and not isinstance(sample_range, slice):
                raise TypeError(f"sample_range must be a slice (e.g. slice(-1000, None)), got {sample_range!r}")
            if size is not None:
                size = _check_size("sample size", size)
            return s.sample_groups(size, groupby, unroll_len, replace, sample_range, ignore_insufficient)
        if size is None:
            raise ValueError("sample() needs a size (or indices=[...])")
        slots, _, w = self._draw(size, replace, sample_range, ignore_insufficient)
        return self._items(slots, w, replace, _columns_only)

    def _draw(self, size: int, replace: bool, sample_range: Optional[slice],
              ignore_insufficient: bool) -> Tuple[np.ndarray, Optional[List[int]], Optional[np.ndarray]]:
        return draw_slots(self._s, self._sampler, size, replace, sample_range, ignore_insufficient)

    def _items(self, slots: np.ndarray, weights: Optional[np.ndarray], replace: bool,
               columns_only: bool) -> List[BufferedData]:
        """The stored items of the drawn ``slots`` (from the sampler: it may write their meta as it takes
        them); ``meta["priority_IS"]`` too unless ``columns_only`` (``sample_batch``, which then finds the
        draw in ``_drawn``: ``.weight`` has the weights)."""
        res = self._sampler.items(slots, weights, replace, not columns_only)
        if columns_only:
            self._drawn = (tuple(res), slots, self._s.pushes, weights)
        return res

    def _update(self, index: int, data: object = None, meta: Optional[Mapping] = None) -> bool:
        p = None
        if meta and self._sampler.wants_priorities and isinstance(meta, Mapping) and "priority" in meta:
            p = check_priority(meta["priority"])  # before anything is written
        ok = update_item(self._s, index, data, meta)
        if ok and p is not None:
            self._sampler.update_priority([index], [p])
        return ok

    def _delete(self, indices: List[int]) -> int:
        return delete_ids(self._s, indices)

    def _update_many(self, indices: IndexBatch, data: Optional[Sequence[object]] = None,
                     meta: ManyMeta = None) -> List[bool]:
        if isinstance(indices, (np.ndarray, torch.Tensor)):
            indices = indices.tolist()
        smp = self._sampler
        if meta is None or not smp.wants_priorities:
            return update_items(self._s, indices, data, meta)
        if type(meta) is dict and data is None and len(meta) == 1 and "priority" in meta:
            return smp.update_priority(indices, meta["priority"])  # the learner's write-back
        # priorities in meta go to the sampler (checked before anything is written); the rest to the items
        if isinstance(meta, Mapping):
            if "priority" not in meta:
                return update_items(self._s, indices, data, meta)
            rest = {k: v for k, v in meta.items() if k != "priority"}
            given = cast(Priorities, meta["priority"])  # checked by the sampler / priority_array
            if data is None and not rest:
                return smp.update_priority(indices, given)
            pri = priority_array(given, len(indices), "update_many")[0]
            ok = update_items(self._s, indices, data, rest or None)
            smp.update_priority(indices, pri)
            return ok
        rows = _meta_rows(meta, len(indices))
        sub = [(i, check_priority(m["priority"])) for i, m in zip(indices, rows) if m and "priority" in m]
        ok = update_items(self._s, indices, data, rows)
        if sub:
            smp.update_priority([i for i, _ in sub], [p for _, p in sub])
        return ok

    def _clear(self) -> None:
        self._s.clear()

    def sample_batch(self, size: int, replace: bool = False, sample_range: Optional[slice] = None,
                     ignore_insufficient: bool = False, **kwargs: object) -> TrainBatch:
        """Sample ``size`` items as one batch: a dict of ``[B, ...]`` tensors (a :class:`TrainBatch` for
        stored :class:`~pipeline.data.records.Transition` s; for other dict items, the same form with their
        keys; non-numeric fields are lists) plus

        * ``indices``: ``[B]`` int64, the sampled items' buffer indices (always; for
          :meth:`update_priority`, ``update_many``, ``delete``);
        * ``weight``: ``[B]`` float32 importance-sampling weights, only when the sampler gives them
          (``PrioritizedSampler`` with ``is_weight=True``).

        One route: the sampler draws slots and the storage turns them into the batch
        (:meth:`SlotStorage.batch`: its columns gather the rows; only data the columns cannot hold, items
        of other structures than the first, are stacked by :func:`collate`). For the items themselves
        (``.data``, ``.index``, ``.meta``) use :meth:`sample`.

        Raises ``ValueError`` if there is nothing to sample or the stored dicts have a field named
        ``indices`` or ``weight`` (the names of the two fields above), ``TypeError`` if the stored data is
        not a dict (a bare tensor, a tuple: use :meth:`sample` and :func:`collate`).

        With middleware in the call chain the items come through the chain; the chain sees
        ``_columns_only=True``: a hint that per-item meta written only for the caller
        (``meta["priority_IS"]``) may be skipped, since ``weight`` carries it. A middleware that hands out
        items of its own (``clone_object``) gets them stacked as they are.
        """
        with self._lock:
            s = self._s
            if not self._chained:
                if kwargs:
                    raise TypeError(f"sample_batch() got unexpected keyword arguments {sorted(kwargs)} (extra "
                                    "arguments are only accepted when a middleware that consumes them is in use)")
                slots, _, w = self._draw(size, replace, sample_range, ignore_insufficient)
                if not len(slots):
                    raise ValueError("sample_batch(): nothing to sample (the buffer is empty)")
                return _train_batch(s.batch(slots), torch.from_numpy(s.slot_id.take(slots)),
                                    None if w is None else torch.from_numpy(w), lambda: s.item(int(slots[0])).data)
            self._drawn = None
            try:
                items = self._c_sample(size, indices=None, replace=replace, sample_range=sample_range,
                                       ignore_insufficient=ignore_insufficient, groupby=None,
                                       unroll_len=None, _columns_only=True, **kwargs)
                box: List[Optional[_Drawn]] = [self._drawn]  # emptied by _chained_batch
            finally:
                self._drawn = None  # holds no items once the call is over (RowItem binding counts references)
            return _chained_batch(s, cast(List[BufferedData], items), box)

    # ------------------------------------------------------------------ persistence
    def save_data(self, path: str) -> None:
        """Write all items (data, meta, indices) to ``path`` in a format that loads without
        executing code (``torch.load(weights_only=True)``). Raises ``TypeError`` for data that
        cannot be stored safely (arbitrary Python objects). The state of the sampler (prioritized:
        ``max_priority`` and the IS-weight annealing count) and of middleware with ``state_dict`` is
        saved with the items."""
        with self._lock:
            payload = storage_payload(self._s)
            parts = stateful_parts(self._middleware, self._sampler, self.writer)
            payload["middleware"] = {key: obj.state_dict() for key, obj in parts.items()}
        torch.save(payload, path)

    def load_data(self, path: str) -> None:
        """Replace the contents with what :meth:`save_data` wrote (indices are kept; if the file
        holds more items than ``size``, the newest ones are kept). Sampler state derived from meta
        (e.g. priorities) is rebuilt; the sampler gets its saved state when the file has one of its
        kind, and middleware with ``state_dict``/``load_state_dict`` at the same place in the chain
        get theirs. A file from a buffer without a sampler state but with the state of rlpipe's
        former ``PriorityExperienceReplay`` middleware loads its items and their ``meta["priority"]``,
        not that state (``max_priority``, the IS-weight annealing count): a ``UserWarning`` says so."""
        states = load_into_storage(self._s, path, self._lock)
        parts = stateful_parts(self._middleware, self._sampler, self.writer)
        restore_states(states, parts, path, self._sampler.wants_priorities)


def _chained_batch(s: SlotStorage, items: List[BufferedData], box: List[Optional[_Drawn]]) -> TrainBatch:
    """``sample_batch`` through a middleware chain: the batch of the ``items`` the chain handed out (``box``: the
    draw the chain's core recorded, or None; taken out of the box so that nothing else holds its items)."""
    drawn = box.pop()
    if not items:
        raise ValueError("sample_batch(): nothing to sample (the buffer is empty)")
    index = [it.index for it in items]
    if drawn is not None and len(drawn[0]) == len(items) and all(map(operator.is_, items, drawn[0])):
        # the stored items as the storage handed them out; their rows still hold them unless a
        # middleware pushed into their slots meanwhile
        ref, slots, pushes, w = drawn
        del drawn, ref
        rows = pushes == s.pushes or s.slot_id[slots].tolist() == index
        return _train_batch(s.batch(slots, items, rows), torch.tensor(index, dtype=torch.int64),
                            None if w is None else torch.from_numpy(w), lambda: items[0].data)
    # a middleware built new items (e.g. clone_object): their data and meta are this call's; their
    # weights are the draw's when they are the drawn items' copies (the same indices in the same order)
    weight = None
    if drawn is not None and drawn[3] is not None and [it.index for it in drawn[0]] == index:
        weight = torch.from_numpy(drawn[3])
    elif "priority_IS" in items[0].meta:
        weight = torch.tensor([it.meta["priority_IS"] for it in items], dtype=torch.float32)
    del drawn
    return _train_batch(collate([it.data for it in items]), torch.tensor(index, dtype=torch.int64), weight,
                        lambda: items[0].data)


#: The fields ``sample_batch`` adds to the stored items' own (stored dicts may not use these names).
BATCH_FIELDS = ("indices", "weight")


def _train_batch(data: object, indices: torch.Tensor, weight: Optional[torch.Tensor],
                 first: Callable[[], object]) -> TrainBatch:
    """``sample_batch``'s result: the gathered ``data`` (a new dict) with ``indices`` and, when given, ``weight``
    (``first()``: the first sampled item's data, read only for the error message)."""
    if type(data) is not dict:
        if not isinstance(data, Mapping):
            raise TypeError(f"sample_batch() returns a dict of [B, ...] tensors and needs dict items "
                            f"({{'obs': ..., 'action': ..., ...}}); this buffer holds {type(first()).__name__} "
                            "items: use sample(n) for the items (.data, .index, .meta) and collate()")
        data = dict(data)
    out = cast(Dict[str, object], data)
    for k in BATCH_FIELDS:
        if k in out:
            raise ValueError(f"sample_batch(): the stored items have a field named {k!r}, the name of the batch's "
                             f"{'buffer indices' if k == 'indices' else 'importance-sampling weights'}; rename "
                             "that field when pushing (or use sample())")
    out["indices"] = indices
    if weight is not None:
        out["weight"] = weight
    return cast(TrainBatch, out)
