"""Replay buffers with a middleware chain.

:class:`DequeBuffer` is a FIFO replay buffer of fixed size. Every item gets a stable, unique integer
``index`` when pushed (a counter, never reused and never an offset), so ``update``/``delete`` keep
working on the right item after other items are deleted or evicted.

Layout (all operations O(1) except where noted):

* items live in fixed *slots* (``size`` of them) that never move; ``index -> slot`` is a dict;
* a dense array of occupied slots gives uniform sampling in O(k) (swap-remove on delete);
* an order array (slots in push order, with tombstones for deleted items) gives FIFO eviction,
  ``get(offset)`` and ``sample_range``; it is compacted with one vectorised numpy pass, lazily,
  only when an ordered operation runs after an interior delete;
* optional numpy columns mirror the data when items share a structure, so
  :meth:`DequeBuffer.sample_batch` returns stacked torch tensors without touching Python objects;
* ``groupby`` indexes (meta key -> group -> ids in push order) are built on first use and then kept
  up to date incrementally.

All public methods hold one re-entrant lock (shared by views), so concurrent ``push``/``sample``
from several threads are safe.
"""
from __future__ import annotations

import bisect
import functools
import operator
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import torch

from .columns import Columns, Unsupported, collate

__all__ = ["Buffer", "DequeBuffer", "BufferedData", "SampledBatch", "Middleware", "ACTIONS"]

#: The actions that go through a buffer's middleware chain.
ACTIONS = ("push", "sample", "update", "update_many", "delete", "clear")

#: ``mw(action, chain, *args, **kwargs)``: handle (or just pass on via ``chain(*args, **kwargs)``)
#: one buffer action and return its result.
Middleware = Callable[..., Any]

_MISSING = object()


@dataclass(slots=True, eq=False)
class BufferedData:
    """One stored item: ``data`` (what was pushed), ``index`` (stable unique id) and ``meta`` (dict).

    Sampled items are the stored objects themselves (no copy); change them through
    :meth:`Buffer.update`, or use the ``clone_object()`` middleware to get private copies.
    """

    data: Any
    index: int
    meta: Dict[str, Any]


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
                 items: Optional[List[BufferedData]] = None, *, _storage: Optional["_Storage"] = None,
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
            self._items = out
            self._storage = self._slots = None
        return self._items

    def __repr__(self) -> str:
        return f"SampledBatch(index={self.index!r}, weight={self.weight!r}, data={self.data!r})"


class _Sampled(list):
    """List of sampled items that remembers where they came from (for the fast batch path)."""

    __slots__ = ("slots", "ref", "pushes", "version", "columns")


class _SlotIds(list):
    """A list of indices that also carries their slots (a shortcut for middleware such as PER)."""

    __slots__ = ("slots", "version")


class _Group:
    __slots__ = ("ids", "head", "dead")

    def __init__(self) -> None:
        self.ids: List[int] = []  # ascending == push order
        self.head = 0
        self.dead = 0

    def live(self) -> int:
        return len(self.ids) - self.head - self.dead


class _GroupIndex:
    """meta[key] value -> ids of the live items with that value, in push order."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.groups: Dict[Any, _Group] = {}
        self.value_of: Dict[int, Any] = {}

    def add(self, item: BufferedData) -> None:
        v = item.meta.get(self.key, _MISSING)
        if v is _MISSING:
            return
        try:
            g = self.groups.get(v)
        except TypeError:
            raise TypeError(f"meta[{self.key!r}] = {v!r} is not hashable; groupby needs hashable values") from None
        if g is None:
            g = self.groups[v] = _Group()
        if g.ids and g.ids[-1] > item.index:
            bisect.insort(g.ids, item.index, lo=g.head)
        else:
            g.ids.append(item.index)
        self.value_of[item.index] = v

    def remove(self, index: int, alive: Dict[int, int]) -> None:
        v = self.value_of.pop(index, _MISSING)
        if v is _MISSING:
            return
        g = self.groups[v]
        g.dead += 1
        ids = g.ids
        while g.head < len(ids) and ids[g.head] not in alive:
            g.head += 1
            g.dead -= 1
        if g.live() == 0:
            del self.groups[v]
        elif g.head > 32 and g.head * 2 > len(ids):
            del ids[: g.head]
            g.head = 0

    def move(self, item: BufferedData) -> None:
        """Re-file ``item`` after its meta changed."""
        old = self.value_of.get(item.index, _MISSING)
        new = item.meta.get(self.key, _MISSING)
        if old is not _MISSING:
            try:
                if new is not _MISSING and old == new:
                    return
            except Exception:  # noqa: BLE001 - odd __eq__; re-file to be safe
                pass
            g = self.groups[old]
            g.ids.remove(item.index)
            del self.value_of[item.index]
            if g.live() == 0:
                del self.groups[old]
        if new is not _MISSING:
            self.add(item)

    def live_ids(self, g: _Group) -> List[int]:
        if g.dead:
            raise AssertionError("compact first")
        return g.ids[g.head:]


class _Storage:
    """The shared state behind a buffer and its views. Callers hold ``lock``."""

    def __init__(self, size: int, columnar: Optional[bool], seed: Optional[int]) -> None:
        self.size = size
        self.lock = threading.RLock()
        if seed is None:
            seed = int(np.random.randint(0, 2**62, dtype=np.int64))  # follows np.random.seed()
        self.rng = np.random.default_rng(seed)
        self.columnar = columnar
        self.listeners: List[Any] = []
        self.syncers: List[Any] = []  # listeners with sync_meta(slots): lazily written meta
        self._alloc()

    def _alloc(self) -> None:
        size = self.size
        self.items: List[Optional[BufferedData]] = [None] * size
        self.slot_id = np.full(size, -1, dtype=np.int64)
        self.id2slot: Dict[int, int] = {}
        self.free: List[int] = list(range(size - 1, -1, -1))
        self.dense = np.zeros(size, dtype=np.int64)
        self.dense_pos = [0] * size
        self.count = 0
        self.ocap = max(2 * size, 16)
        self.order = np.full(self.ocap, -1, dtype=np.int64)
        self.opos = np.zeros(size, dtype=np.int64)
        self.otail = 0
        self.ohead = 0
        self.otomb = 0
        self.next_id = 0
        self.pushes = 0
        self.version = 0  # bumped by every push and removal: equal versions mean unchanged slots
        self.groups: Dict[str, _GroupIndex] = {}
        self.columns: Optional[Columns] = None
        self.columns_unsupported = False
        self.pending: List[int] = []  # slots whose column rows are stale
        self._rbuf = np.zeros(0, dtype=np.int64)
        self._rpos = 0
        self._rn = self._rn_prev = -1

    # ------------------------------------------------------------------ core mutations
    def push(self, data: Any, meta: Optional[Mapping]) -> BufferedData:
        if meta is None:
            m: Dict[str, Any] = {}
        elif isinstance(meta, Mapping):
            m = dict(meta)
        else:
            raise TypeError(f"push(meta=...) must be a dict or None, got {type(meta).__name__}")
        if self.count >= self.size:
            self.remove_slot(int(self.order[self.otail]))
        slot = self.free.pop()
        idx = self.next_id
        self.next_id = idx + 1
        self.pushes += 1
        self.version += 1
        item = BufferedData(data, idx, m)
        self.items[slot] = item
        self.id2slot[idx] = slot
        self.slot_id[slot] = idx
        c = self.count
        self.dense[c] = slot
        self.dense_pos[slot] = c
        self.count = c + 1
        h = self.ohead
        if h == self.ocap:
            self.compact_order()
            h = self.ohead
        self.order[h] = slot
        self.opos[slot] = h
        self.ohead = h + 1
        if self.columns is not None:
            self.columns.ok[slot] = False
            self.pending.append(slot)  # copied into the columns at the next sample_batch
            if len(self.pending) >= self.size:
                self.ensure_columns()
        elif self.columnar and not self.columns_unsupported:
            self.ensure_columns()
        if self.groups:
            for key, gi in list(self.groups.items()):
                try:
                    gi.add(item)
                except TypeError:  # unhashable group value: drop the index; sample() will report it
                    del self.groups[key]
        if self.listeners:
            for listener in self.listeners:
                listener.on_push(slot, item)
        return item

    def remove_slot(self, slot: int) -> None:
        item = self.items[slot]
        self.items[slot] = None
        self.version += 1
        del self.id2slot[item.index]
        self.slot_id[slot] = -1
        p = self.dense_pos[slot]
        last = self.count - 1
        if p != last:
            ls = int(self.dense[last])
            self.dense[p] = ls
            self.dense_pos[ls] = p
        self.count = last
        op = int(self.opos[slot])
        self.order[op] = -1
        if op == self.otail:
            t = op + 1
            head = self.ohead
            order = self.order
            while t < head and order[t] < 0:
                t += 1
                self.otomb -= 1
            self.otail = t
            if t == head:
                self.otail = self.ohead = 0
                self.otomb = 0
        else:
            self.otomb += 1
        self.free.append(slot)
        if self.groups:
            for gi in self.groups.values():
                gi.remove(item.index, self.id2slot)
        for listener in self.listeners:
            listener.on_remove(slot)

    def clear(self) -> None:
        cols, next_id, pushes, version = self.columns, self.next_id, self.pushes, self.version
        self._alloc()
        self.next_id, self.pushes, self.version = next_id, pushes + 1, version + 1
        if cols is not None:
            cols.ok[:] = False
            self.columns = cols
        for listener in self.listeners:
            listener.on_clear()

    def compact_order(self) -> None:
        seg = self.order[self.otail:self.ohead]
        live = seg[seg >= 0]
        n = len(live)
        self.order[:n] = live
        self.order[n:max(self.ohead, n)] = -1
        self.opos[live] = np.arange(n)
        self.otail = 0
        self.ohead = n
        self.otomb = 0

    def ordered_slots(self) -> np.ndarray:
        """Slots of the live items, oldest first (a view; do not keep it)."""
        if self.otomb:
            self.compact_order()
        return self.order[self.otail:self.ohead]

    # ------------------------------------------------------------------ columns / groups
    def ensure_columns(self) -> Optional[Columns]:
        """Create the columns if needed and bring every live row up to date."""
        if self.columns is None:
            if self.columns_unsupported or not self.count:
                return None
            example = self.items[int(self.dense[0])].data
            try:
                cols = Columns(self.size, example)
            except Unsupported:
                self.columns_unsupported = True
                return None
            self.columns = cols
            self.pending = self.dense[: self.count].tolist()
        if self.pending:
            items = self.items
            slots = [s for s in dict.fromkeys(self.pending) if items[s] is not None]
            self.pending = []
            self.columns.write_many(slots, [items[s].data for s in slots])
        return self.columns

    def draw(self, n: int, k: int, replace: bool) -> np.ndarray:
        """``k`` uniform offsets in ``[0, n)`` (distinct unless ``replace``)."""
        if not replace and k * 4 > n:
            return self.rng.choice(n, k, replace=False)
        p = self._rpos
        if n != self._rn or p + k > len(self._rbuf):
            # a block of random offsets for this n (a full buffer keeps n fixed, so blocks are reused)
            self._rbuf = self.rng.integers(0, n, max(8192, k)) if n == self._rn_prev else \
                self.rng.integers(0, n, k)
            self._rn_prev = self._rn = n
            p = 0
        self._rpos = p + k
        offs = self._rbuf[p:p + k]
        if replace or len(set(offs.tolist())) == k:
            return offs
        return self.rng.choice(n, k, replace=False)  # a duplicate: redraw the whole sample

    def group_index(self, key: str) -> _GroupIndex:
        gi = self.groups.get(key)
        if gi is None:
            gi = _GroupIndex(key)
            items = self.items
            for s in self.ordered_slots().tolist():
                gi.add(items[s])
            self.groups[key] = gi
        return gi

    def sync(self, slots: Any) -> None:
        """Let middleware that writes meta lazily (PER priorities) bring these slots' meta up to date."""
        for syncer in self.syncers:
            syncer.sync_meta(slots)

    # ------------------------------------------------------------------ sampling
    def _result(self, slots: np.ndarray, sync: bool = True) -> _Sampled:
        if sync and self.syncers:
            self.sync(slots)
        res = _Sampled(map(self.items.__getitem__, slots.tolist()))
        res.slots = slots
        res.ref = tuple(res)
        res.pushes = self.pushes
        res.version = self.version
        res.columns = None
        return res

    def sample_uniform(self, size: int, replace: bool, sample_range: Optional[slice],
                       ignore_insufficient: bool, sync: bool = True) -> _Sampled:
        if sample_range is None:
            pool = self.dense
            n = self.count
        else:
            pool = self.ordered_slots()[sample_range]
            n = len(pool)
        k = size
        if k > 0 and (n == 0 or (not replace and k > n)):
            if not ignore_insufficient:
                where = "" if sample_range is None else f" in sample_range {sample_range}"
                raise ValueError(f"cannot sample {k} items{'' if replace else ' without replacement'}: "
                                 f"the buffer holds {n}{where}; push more data first or pass "
                                 "ignore_insufficient=True")
            k = 0 if n == 0 else (k if replace else n)
        if k == 0:
            return self._result(np.zeros(0, dtype=np.int64))
        return self._result(pool[self.draw(n, k, replace)], sync)

    def take_ids(self, indices: Iterable[int], ignore_missing: bool, sync: bool = True) -> _Sampled:
        if type(indices) is _SlotIds:
            slots = indices.slots
            if getattr(indices, "version", None) == self.version or self.slot_id[slots].tolist() == indices:
                return self._result(slots, sync)
        if isinstance(indices, (int, np.integer)):
            raise TypeError("sample(indices=...) takes a list of indices, not a single index")
        if isinstance(indices, np.ndarray):
            indices = indices.tolist()
        elif isinstance(indices, torch.Tensor):
            indices = indices.tolist()
        id2slot = self.id2slot
        try:
            slots = [id2slot[i] for i in indices]
        except KeyError as e:
            if not ignore_missing:
                raise KeyError(f"no item with index {e.args[0]!r} in the buffer (never pushed, deleted or "
                               "evicted); pass ignore_insufficient=True to skip missing indices") from None
            slots = [id2slot[i] for i in indices if i in id2slot]
        return self._result(np.array(slots, dtype=np.int64), sync)

    def sample_groups(self, size: Optional[int], key: str, unroll_len: Optional[int], replace: bool,
                      sample_range: Optional[slice], ignore_insufficient: bool) -> List[List[BufferedData]]:
        need = 1 if unroll_len is None else unroll_len
        items = self.items
        if sample_range is None:
            gi = self.group_index(key)
            cand = []
            for g in gi.groups.values():
                if g.live() >= need:
                    if g.dead:
                        alive = self.id2slot
                        g.ids = [i for i in g.ids[g.head:] if i in alive]
                        g.head = 0
                        g.dead = 0
                    cand.append(g)
            lists = None
        else:
            by: Dict[Any, List[int]] = {}
            for s in self.ordered_slots()[sample_range].tolist():
                it = items[s]
                v = it.meta.get(key, _MISSING)
                if v is _MISSING:
                    continue
                try:
                    by.setdefault(v, []).append(it.index)
                except TypeError:
                    raise TypeError(f"meta[{key!r}] = {v!r} is not hashable; groupby needs hashable values") from None
            lists = [ids for ids in by.values() if len(ids) >= need]
            cand = lists
        n = len(cand)
        if size is None:
            chosen = range(n)
        else:
            k = size
            if k > 0 and (n == 0 or (not replace and k > n)):
                if not ignore_insufficient:
                    raise ValueError(f"cannot sample {k} groups by meta[{key!r}]"
                                     f"{'' if unroll_len is None else f' with at least {unroll_len} items'}: "
                                     f"only {n} such groups; push more data first or pass "
                                     "ignore_insufficient=True")
                k = 0 if n == 0 else (k if replace else n)
            if k == 0:
                return []
            chosen = (self.rng.integers(0, n, k) if replace else self.rng.choice(n, k, replace=False)).tolist()
        id2slot = self.id2slot
        out = []
        for c in chosen:
            g = cand[c]
            if lists is None:
                ids, head, length = g.ids, g.head, len(g.ids) - g.head
            else:
                ids, head, length = g, 0, len(g)
            if unroll_len is None:
                window = ids[head:]
            else:
                start = head + int(self.rng.integers(0, length - unroll_len + 1))
                window = ids[start:start + unroll_len]
            out.append([items[id2slot[i]] for i in window])
        if self.syncers and out:
            self.sync(np.array([id2slot[it.index] for g in out for it in g], dtype=np.int64))
        return out


def _check_size(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class Buffer:
    """Base class of replay buffers: public API, locking and the middleware chain.

    A middleware is ``mw(action, chain, *args, **kwargs)`` where ``action`` is one of
    :data:`ACTIONS`; it must call ``chain(*args, **kwargs)`` (possibly with changed arguments) to
    run the rest of the chain and return a result. Middleware that does not handle an action must
    pass it on unchanged. Arguments reaching the chain: ``push(data, meta)``,
    ``sample(size, indices=, replace=, sample_range=, ignore_insufficient=, groupby=, unroll_len=,
    **extra)``, ``update(index, data, meta)``, ``update_many(indices, data, meta)``,
    ``delete(indices)`` (always a list), ``clear()``.
    """

    def __init__(self, size: int, lock: Optional[threading.RLock] = None) -> None:
        self.size = _check_size("buffer size", size, 1)
        self._lock = lock if lock is not None else threading.RLock()
        self._middleware: List[Middleware] = []
        self._build_chains()

    # ------------------------------------------------------------------ middleware
    def use(self, middleware: Middleware) -> "Buffer":
        """Append ``middleware`` to this buffer's chain (the first one used runs first); returns self."""
        if not callable(middleware):
            raise TypeError(f"use() needs a callable middleware(action, chain, *args, **kwargs), "
                            f"got {type(middleware).__name__}")
        with self._lock:
            self._middleware.append(middleware)
            self._build_chains()
        return self

    @property
    def middleware(self) -> List[Middleware]:
        """The middleware in use, in call order (a copy)."""
        return list(self._middleware)

    def _build_chains(self) -> None:
        def build(action: str, core: Callable) -> Callable:
            fn = core
            for mw in reversed(self._middleware):
                fn = functools.partial(mw, action, fn)
            return fn

        # a lone middleware may offer a direct route for the hot calls (PER: sample_batch and
        # update_many without the generic chain); it must behave exactly like the chain
        mws = self._middleware
        fast = getattr(mws[0], "_fast_owner", None) if len(mws) == 1 else None
        self._fast = mws[0] if fast is not None and fast is getattr(self, "_s", None) else None
        self._c_push = build("push", self._push)
        self._c_sample = build("sample", self._sample)
        self._c_update = build("update", self._update)
        self._c_update_many = build("update_many", self._update_many)
        self._c_delete = build("delete", self._delete)
        self._c_clear = build("clear", self._clear)

    # ------------------------------------------------------------------ public API
    def push(self, data: Any, meta: Optional[Dict[str, Any]] = None) -> BufferedData:
        """Store ``data`` (with a copy of ``meta``); returns the stored item with its new ``index``.
        When the buffer is full the oldest item is evicted first."""
        with self._lock:
            return self._c_push(data, meta)

    def sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None,
               replace: bool = False, sample_range: Optional[slice] = None,
               ignore_insufficient: bool = False, groupby: Optional[str] = None,
               unroll_len: Optional[int] = None, **kwargs: Any
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
            if (not self._middleware and indices is None and groupby is None and sample_range is None
                    and unroll_len is None and not kwargs and type(size) is int and size >= 0):
                return self._s.sample_uniform(size, replace, None, ignore_insufficient)  # fast path
            fast = self._fast
            if fast is not None:  # the lone middleware, called without the chain's partials
                if (indices is None and groupby is None and sample_range is None and unroll_len is None
                        and not kwargs and not replace and type(size) is int and 0 < size <= self._s.count
                        and len(self._s.syncers) == 1):
                    return fast._sample_items(size)
                return fast._sample(self._sample, size, indices=indices, replace=replace,
                                    sample_range=sample_range, ignore_insufficient=ignore_insufficient,
                                    groupby=groupby, unroll_len=unroll_len, **kwargs)
            return self._c_sample(size, indices=indices, replace=replace, sample_range=sample_range,
                                  ignore_insufficient=ignore_insufficient, groupby=groupby,
                                  unroll_len=unroll_len, **kwargs)

    def update(self, index: int, data: Any = None, meta: Optional[Dict[str, Any]] = None) -> bool:
        """Replace the data (if not None) and merge ``meta`` into the meta of item ``index``.
        Returns False if there is no such item (deleted or evicted)."""
        with self._lock:
            return self._c_update(index, data, meta)

    def update_many(self, indices: Sequence[int], data: Optional[Sequence[Any]] = None,
                    meta: Union[None, Sequence[Dict[str, Any]], Dict[str, Sequence[Any]]] = None
                    ) -> List[bool]:
        """Batched :meth:`update`. ``data``: one value per index or None; ``meta``: one dict per
        index, or one dict of columns (``{"priority": array_of_len_n}``). Returns one bool per index."""
        with self._lock:
            fast = self._fast
            if fast is not None and data is None:
                if fast._ext is not None:  # the compiled kernels' shortcut for the common case
                    ok = fast._update_direct(indices, meta)
                    if ok is not None:
                        return ok
                return fast._update_many(self._update_many, indices, None, meta)
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

    # ------------------------------------------------------------------ to implement
    def count(self) -> int:
        raise NotImplementedError

    def get(self, offset: int) -> BufferedData:
        raise NotImplementedError

    def view(self) -> "Buffer":
        raise NotImplementedError

    def save_data(self, path: str) -> None:
        raise NotImplementedError

    def load_data(self, path: str) -> None:
        raise NotImplementedError

    def _push(self, data: Any, meta: Optional[Mapping]) -> BufferedData:
        raise NotImplementedError

    def _sample(self, size: Optional[int] = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _update(self, index: int, data: Any, meta: Optional[Mapping]) -> bool:
        raise NotImplementedError

    def _update_many(self, indices: Sequence[int], data: Any, meta: Any) -> List[bool]:
        return [self._update(i, None if data is None else d, m)
                for i, d, m in zip(indices, data if data is not None else [None] * len(indices),
                                   _meta_rows(meta, len(indices)))]

    def _delete(self, indices: List[int]) -> int:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError


def _meta_cols(meta: Mapping, n: int) -> Dict[str, List[Any]]:
    """``update_many``'s dict-of-columns meta, validated, as lists."""
    cols = {}
    for k, v in meta.items():
        if isinstance(v, (np.ndarray, torch.Tensor)):
            v = v.tolist()
        elif isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
            raise TypeError(f"update_many(meta={{{k!r}: ...}}) needs one value per index (a list or array), "
                            f"got {type(v).__name__}")
        v = list(v)
        if len(v) != n:
            raise ValueError(f"update_many(meta={{{k!r}: ...}}) has {len(v)} values for {n} indices")
        cols[k] = v
    return cols


def _meta_rows(meta: Any, n: int) -> List[Optional[Mapping]]:
    """Normalise ``update_many``'s meta argument to one dict (or None) per index."""
    if meta is None:
        return [None] * n
    if isinstance(meta, Mapping):
        cols = _meta_cols(meta, n)
        keys = list(cols)
        return [dict(zip(keys, row)) for row in zip(*cols.values())] if keys else [None] * n
    rows = list(meta)
    if len(rows) != n:
        raise ValueError(f"update_many got {len(rows)} meta dicts for {n} indices")
    return rows


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
                 _storage: Optional[_Storage] = None) -> None:
        size = _check_size("buffer size", size, 1)
        self._s = _storage if _storage is not None else _Storage(size, columnar, seed)
        super().__init__(size, self._s.lock)

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
        return DequeBuffer(self.size, _storage=self._s)

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
            return s.take_ids(indices, ignore_insufficient, not _columns_only)
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

    # ------------------------------------------------------------------ fast batches
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
                items = s._result(slots)
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
        from .serialization import encode

        with self._lock:
            s = self._s
            if s.syncers:
                s.sync(s.ordered_slots().copy())
            order = s.ordered_slots().tolist()
            payload = {
                "format": "rlpipe.DequeBuffer",
                "version": 1,
                "size": s.size,
                "next_id": s.next_id,
                "ids": [s.items[k].index for k in order],
                "data": [encode(s.items[k].data, "data") for k in order],
                "meta": [encode(s.items[k].meta, "meta") for k in order],
            }
        torch.save(payload, path)

    def load_data(self, path: str) -> None:
        """Replace the contents with what :meth:`save_data` wrote (indices are kept; if the file
        holds more items than ``size``, the newest ones are kept). Middleware state derived from meta
        (e.g. priorities) is rebuilt."""
        from .serialization import decode

        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:  # noqa: BLE001 - UnpicklingError, RuntimeError, ...
            raise ValueError(f"load_data({path!r}): not a buffer file saved by save_data, or it contains "
                             f"objects that are not allowed to load ({type(e).__name__}: {e})") from None
        if not isinstance(payload, dict) or payload.get("format") != "rlpipe.DequeBuffer":
            raise ValueError(f"load_data({path!r}): not a buffer file saved by DequeBuffer.save_data")
        ids, datas, metas = payload["ids"], payload["data"], payload["meta"]
        if not (len(ids) == len(datas) == len(metas)):
            raise ValueError(f"load_data({path!r}): corrupt file (lengths differ)")
        if any(int(a) >= int(b) for a, b in zip(ids, ids[1:])):
            raise ValueError(f"load_data({path!r}): corrupt file (indices not increasing)")
        with self._lock:
            s = self._s
            s.clear()
            start = max(0, len(ids) - s.size)
            for i in range(start, len(ids)):
                s.next_id = int(ids[i])  # push assigns exactly the saved index
                s.push(decode(datas[i]), decode(metas[i]))
            s.next_id = max(int(payload["next_id"]), (int(ids[-1]) + 1) if ids else 0)
            s.groups = {}
            for listener in s.listeners:
                listener.on_load()
