"""Slot storage: where a :class:`~pipeline.data.DequeBuffer` (and its views) keep their items.

Layout (all operations O(1) except where noted):

* items live in fixed *slots* (``size`` of them) that never move; ``index -> slot`` is a dict;
* a dense array of occupied slots gives uniform sampling in O(k) (swap-remove on delete);
* an order array (slots in push order, with tombstones for deleted items) gives ``get(offset)``,
  ``sample_range`` and the oldest item (what the default writer evicts); it is compacted with one vectorised numpy pass, lazily,
  only when an ordered operation runs after an interior delete;
* numpy columns (:class:`~pipeline.data.columns.Columns`, made at the first ``sample_batch`` or push)
  hold the data of items that share the first item's structure, so ``sample_batch`` gathers tensors
  without touching Python objects; dict items (flat or nested plain dicts) then live in their row only
  (:class:`~pipeline.data.item.RowItem`: ``data`` rebuilt from the row when read);
* ``groupby`` indexes (meta key -> group -> ids in push order, :mod:`.group_index`) are built on
  first use and then kept up to date incrementally.

The storage interface
---------------------
What a buffer middleware that keeps per-slot state (prioritized replay) or an alternative storage
(e.g. a frame-efficient pixel storage) may rely on. The caller always holds ``storage.lock``.

Which item a push evicts, or whether the pushed item is stored at all, is not the storage's decision:
``push`` asks its ``writer`` (:mod:`.writer`; :class:`~pipeline.data.writer.FifoWriter` by default,
``set_writer(writer)`` to change it) and then removes the chosen item and stores the new one.

Read-only state: ``size`` (slots), ``count`` (items stored), ``lock`` (re-entrant, shared with every
buffer view), ``rng`` (the buffer's ``numpy.random.Generator``), ``items`` (slot -> stored
:class:`BufferedData` or None), ``dense[:count]`` (the occupied slots, in no order),
``slot_id`` (slot -> item index, -1 when free), ``id2slot`` (index -> slot), ``version`` (changes
at every push or removal: equal versions mean the same slots hold the same items), ``pushes``.

Methods: ``ordered_slots()`` (occupied slots oldest first), ``item(slot)`` (the item of an occupied
slot), ``result(slots, sync=True, repeats=False)`` (the stored items of these slots as a sample list;
``repeats``: a slot may appear twice, and its repeats become deep copies), ``batch(slots)`` (the
``[B, ...]`` tensors of these slots: ``sample_batch``'s one route), ``sync(slots)`` (let lazy meta
writers bring these slots' meta up to date), ``add_listener(listener)``, ``adopt(other)`` (take another storage's
contents: how ``load_data`` swaps in a fully decoded file; listeners then get ``on_clear()`` and
``on_load()``). ``copy.deepcopy``/``pickle`` give a storage with its own lock.

Listeners (:class:`StorageListener`) hear about every change of the slots, whichever buffer view
made it: ``on_push(slot, item)``, ``on_remove(slot)``, ``on_clear()``, ``on_load()`` (contents
replaced wholesale: rebuild from ``dense[:count]``). A listener that also has
``sync_meta(slots)`` writes item meta lazily and is asked to bring it up to date before any item
is handed out.

To store data differently (fewer bytes per item, shared frames), subclass :class:`SlotStorage` and
pass an instance as ``DequeBuffer(size, storage=...)``. ``push(data, meta)`` stores an item and
returns it; ``items[slot].data`` is what ``sample()`` hands out; :meth:`SlotStorage.make_columns`
builds the columns that ``sample_batch`` gathers from (a :class:`~pipeline.data.columns.ColumnStore`:
``ok`` (bool per slot), ``write(slot, data)``, ``write_many(slots, datas)`` and ``gather(slots) ->
batch``; raise :class:`~pipeline.data.columns.Unsupported` for data it cannot hold).
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import Dict, Iterable, List, Optional, Protocol, Sequence, Tuple, Union, cast, runtime_checkable

import numpy as np
import torch

from .collate import collate
from .columns import Columns, ColumnStore, Unsupported
from .group_index import MISSING, GroupIndex
from .item import _DATA, BufferedData, RowItem, _Row, copy_repeats
from .writer import DROP, FREE, FifoWriter, Writer

__all__ = ["SlotStorage", "StorageListener", "BufferedData"]


ManyMeta = Union[None, Sequence[Optional[Mapping]], Mapping[str, Union[Sequence[object], np.ndarray, torch.Tensor]]]
"""``update_many``'s meta: None, one dict (or None) per index, or a dict of columns (one value per index)."""

IndexBatch = Union[Sequence[int], np.ndarray, torch.Tensor]
"""Item indices as ``update_many`` takes them: a list, or ``sample_batch``'s ``indices`` column as it is."""


class MetaSyncer(Protocol):
    """A listener that writes meta lazily (PER priorities): ``sync_meta`` brings some slots' meta up to date."""

    def sync_meta(self, slots: np.ndarray) -> None: ...


@runtime_checkable
class StorageListener(Protocol):
    """Hears every change of a :class:`SlotStorage`'s slots (see the module docstring)."""

    def on_push(self, slot: int, item: BufferedData) -> None: ...

    def on_remove(self, slot: int) -> None: ...

    def on_clear(self) -> None: ...

    def on_load(self) -> None: ...


class SlotStorage:
    """The shared state behind a buffer and its views (see the module docstring). Callers hold ``lock``."""

    def __init__(self, size: int, columnar: Optional[bool], seed: Optional[int]) -> None:
        self.size = size
        self.lock = threading.RLock()
        if seed is None:
            seed = int(np.random.randint(0, 2**62, dtype=np.int64))  # follows np.random.seed()
        self.seed_seq = np.random.SeedSequence(seed)  # copies draw from its children (__getstate__)
        self.rng = np.random.default_rng(self.seed_seq)  # the same stream as default_rng(seed)
        self.columnar = columnar
        self.listeners: List[StorageListener] = []
        self.syncers: List[MetaSyncer] = []  # listeners with sync_meta(slots): lazily written meta
        self.writer: Writer = FifoWriter()  # decides which slot each push takes (DequeBuffer(writer=...))
        self.writer.attach(self)
        self._alloc()

    def __getstate__(self) -> dict:
        """``copy.deepcopy`` / pickle: a copy gets its own lock and its own random stream (a child of this
        storage's seed sequence: copies sample differently from the original and from each other, and
        reproducibly). To sample identically on purpose, set the copy's ``rng`` to ``copy.deepcopy(original.rng)``
        before either has sampled."""
        state = self.__dict__.copy()
        del state["lock"]
        seq = state.get("seed_seq")
        if seq is not None:
            child = seq.spawn(1)[0]
            state["seed_seq"] = child
            state["rng"] = np.random.default_rng(child)
            state["_rbuf"] = np.zeros(0, dtype=np.int64)  # offsets drawn ahead from the original's stream
            state["_rpos"] = 0
            state["_rn"] = state["_rn_prev"] = -1
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.lock = threading.RLock()

    def _alloc(self) -> None:
        size = self.size
        self.items: List[Optional[BufferedData]] = [None] * size
        self.slot_id = np.full(size, -1, dtype=np.int64)
        self.id2slot: Dict[int, int] = {}
        self.free: List[int] = []  # slots freed by removals, reused first (last freed first)
        self.unused = 0  # slots unused..size-1 have never held an item
        self.dense = np.zeros(size, dtype=np.int64)
        self.dense_pos = [0] * size
        self.count = 0
        self.ocap = max(2 * size, 16)
        # only order[otail:ohead] is ever read, so untouched pages of a large buffer cost no memory
        self.order = np.empty(self.ocap, dtype=np.int64)
        self.opos = np.zeros(size, dtype=np.int64)
        self.otail = 0
        self.ohead = 0
        self.otomb = 0
        self.next_id = 0
        self.pushes = 0
        self.version = 0  # bumped by every push and removal: equal versions mean unchanged slots
        self.groups: Dict[str, GroupIndex] = {}
        self.columns: Optional[ColumnStore] = None
        self.columns_unsupported = False
        self.pending: List[int] = []  # slots whose column rows are stale
        self._rbuf = np.zeros(0, dtype=np.int64)
        self._rpos = 0
        self._rn = self._rn_prev = -1

    # ------------------------------------------------------------------ core mutations
    def push(self, data: object, meta: Optional[Mapping]) -> BufferedData:
        if meta is None:
            m: Dict[str, object] = {}
        elif isinstance(meta, Mapping):
            m = dict(meta)
        else:
            raise TypeError(f"push(meta=...) must be a dict or None, got {type(meta).__name__}")
        at = self.writer.push_slot()
        if at >= 0:
            try:
                free = self.items[at] is None  # holds no reference: release() counts them
            except (IndexError, TypeError):
                free = True
            if free:
                raise ValueError(f"{type(self.writer).__name__}.push_slot() returned {at!r}: expected FREE (-1), "
                                 "DROP (-2) or an occupied slot")
            self.remove_slot(at)  # the slot is now the last freed one: the new item takes it
        elif at == DROP:
            return self.dropped(data, m)
        elif at != FREE:
            raise ValueError(f"{type(self.writer).__name__}.push_slot() returned {at!r}: expected FREE (-1), "
                             "DROP (-2) or an occupied slot")
        elif self.count >= self.size:
            raise ValueError(f"{type(self.writer).__name__}.push_slot() returned FREE but the storage is full "
                             f"({self.size} items): return the slot of the item that leaves, or DROP")
        if self.free:
            slot = self.free.pop()
        else:
            slot = self.unused
            self.unused = slot + 1
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

    def dropped(self, data: object, meta: Dict[str, object]) -> BufferedData:
        """A push the writer dropped (:data:`~pipeline.data.writer.DROP`): the item, with a new index, not
        stored (nothing else changes). A storage that stores data in another form overrides this to undo
        what its ``push`` prepared."""
        idx = self.next_id
        self.next_id = idx + 1
        return BufferedData(data, idx, meta)

    def set_writer(self, writer: Writer) -> None:
        """Let ``writer`` decide where pushes go from now on (``DequeBuffer(size, writer=...)``)."""
        if not isinstance(writer, Writer):
            raise TypeError(f"writer must be a Writer (attach, push_slot, state_dict, load_state_dict), e.g. "
                            f"FifoWriter(); got {type(writer).__name__}")
        if writer is self.writer:
            return
        writer.attach(self)
        self.writer = writer

    def release(self, slot: int) -> None:
        """Before row ``slot`` is reused (eviction, ``update``, ``clear``): a :class:`RowItem` that somebody
        still holds (a sample, a caller) gets its data from the row, so nothing they hold changes."""
        it = self.items[slot]
        if type(it) is RowItem and sys.getrefcount(it) > 3:  # the list, `it`, the call's argument
            it.detach()

    def item(self, slot: int) -> BufferedData:
        """The item of an occupied ``slot``."""
        it = self.items[slot]
        if it is None:
            raise KeyError(f"slot {slot} holds no item")
        return it

    def remove_slot(self, slot: int) -> None:
        self.release(slot)
        item = self.item(slot)
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

    def _release_all(self) -> None:
        if self.columns is not None:
            for slot in self.dense[:self.count].tolist():
                self.release(slot)

    def clear(self) -> None:
        self._release_all()
        cols, next_id, pushes, version = self.columns, self.next_id, self.pushes, self.version
        self._alloc()
        self.next_id, self.pushes, self.version = next_id, pushes + 1, version + 1
        if cols is not None:
            cols.ok[:] = False
            self.columns = cols
        for listener in self.listeners:
            listener.on_clear()

    def adopt(self, other: "SlotStorage") -> None:
        """Take ``other``'s contents (items, indexes, columns), keeping this storage's lock, random
        generator, settings, listeners and writer (``load_data``: the caller then tells the listeners)."""
        self._release_all()
        version, pushes = self.version, self.pushes
        keep = {"size", "lock", "rng", "seed_seq", "columnar", "listeners", "syncers", "writer"}
        for k, v in other.__dict__.items():
            if k not in keep:
                setattr(self, k, v)
        for slot in self.dense[:self.count].tolist():
            it = self.items[slot]
            if type(it) is RowItem:
                _DATA.__get__(it).lock = self.lock
        # later than anything seen before: no cached (version, slots) pair may match the new contents
        self.version = version + other.version + 1
        self.pushes = pushes + other.pushes + 1
        self.groups = {}

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
    def ensure_columns(self) -> Optional[ColumnStore]:
        """Create the columns if needed and bring every live row up to date."""
        cols = self.columns
        if cols is None:
            if self.columns_unsupported or not self.count:
                return None
            example = self.item(int(self.dense[0])).data
            try:
                cols = self.make_columns(example)
            except Unsupported:
                self.columns_unsupported = True
                return None
            self.columns = cols
            self.pending = self.dense[: self.count].tolist()
        if self.pending:
            items = self.items
            slots = [s for s in dict.fromkeys(self.pending) if items[s] is not None]
            self.pending = []
            cols.write_many(slots, [self.item(s).data for s in slots])  # holds no item: _bind counts references
            self._bind(slots)
        return cols

    def _bind(self, slots: List[int]) -> None:
        """Let the flat dict items of ``slots`` (rows just written) keep their data only in the columns:
        each becomes a :class:`RowItem`, rebuilt from its row when read. One copy of each item, in memory
        allocated once: per-item arrays that live as long as the buffer, allocated between a learner's
        short-lived tensors, fragment the C heap, and a long run then grows by kilobytes per update
        (``benchmarks/bench_memory.py``). Items somebody else holds right now are left as they are."""
        cols = self.columns
        if not isinstance(cols, Columns) or not cols.rows:
            return
        ok, items, lock = cols.ok, self.items, self.lock
        getrefcount = sys.getrefcount
        for s in slots:
            it = items[s]
            if ok[s] and type(it) is BufferedData and cols.plain(_DATA.__get__(it)) and getrefcount(it) <= 3:
                _DATA.__set__(it, _Row(cols, s, lock))
                it.__class__ = RowItem

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

    def group_index(self, key: str) -> GroupIndex:
        gi = self.groups.get(key)
        if gi is None:
            gi = GroupIndex(key)
            items = self.items
            for s in self.ordered_slots().tolist():
                gi.add(items[s])
            self.groups[key] = gi
        return gi

    def make_columns(self, example: object) -> ColumnStore:
        """The columnar mirror for items shaped like ``example`` (raise ``Unsupported`` if none)."""
        return Columns(self.size, example)

    def add_listener(self, listener: StorageListener) -> None:
        """Tell ``listener`` about every later change (and about lazy meta, if it has ``sync_meta``)."""
        self.listeners.append(listener)
        if hasattr(listener, "sync_meta"):
            self.syncers.append(cast(MetaSyncer, listener))

    def sync(self, slots: np.ndarray) -> None:
        """Let middleware that writes meta lazily (PER priorities) bring these slots' meta up to date."""
        for syncer in self.syncers:
            syncer.sync_meta(slots)

    # ------------------------------------------------------------------ sampling
    def batch(self, slots: np.ndarray, items: Optional[Sequence[BufferedData]] = None, rows: bool = True) -> object:
        """The batch of a sample: the ``[B, ...]`` tensors of the items in ``slots`` (``sample_batch``'s one
        route). The columns gather it when they hold every one of these rows (and ``rows``: the rows still
        hold these items); only data they cannot hold (items whose structure differs from the first one's,
        a storage without columns) is stacked from the items by :func:`~pipeline.data.collate.collate`
        (``items``: the sample's items; default: the stored items of ``slots``)."""
        cols = self.ensure_columns() if self.columnar is not False else None  # rows up to date
        if rows and cols is not None and cols.ok.take(slots).all():
            return cols.gather(slots)
        if items is None:
            it = self.items
            items = [it[s] for s in slots.tolist()]
        return collate([x.data for x in items])

    def _result(self, slots: np.ndarray, sync: bool = True, repeats: bool = False) -> List[BufferedData]:
        """The stored items of ``slots`` as a sample list; ``repeats``: ``slots`` may hold a slot
        twice, and every repeat then becomes a deep copy (see :class:`BufferedData`)."""
        if sync and self.syncers:
            self.sync(slots)
        sl = slots.tolist()
        res: List[BufferedData] = list(map(self.items.__getitem__, sl))  # type: ignore[arg-type]  # occupied slots
        if repeats and len(sl) > 1 and len(set(sl)) < len(sl):
            copy_repeats(res)
        return res

    result = _result  # the public name (see the storage interface)

    def take_ids(self, indices: Iterable[int], ignore_missing: bool,
                 sync: bool = True) -> Tuple[List[BufferedData], np.ndarray]:
        """The items of ``indices`` and their slots (a repeated index gives a deep copy of the item after its
        first time)."""
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
        arr = np.array(slots, dtype=np.int64)
        return self._result(arr, sync, True), arr

    def sample_groups(self, size: Optional[int], key: str, unroll_len: Optional[int], replace: bool,
                      sample_range: Optional[slice], ignore_insufficient: bool) -> List[List[BufferedData]]:
        return sample_groups(self, size, key, unroll_len, replace, sample_range, ignore_insufficient)


# ---------------------------------------------------------------------- item updates (the buffer's update/delete)
def update_item(s: SlotStorage, index: int, data: object, meta: Optional[Mapping]) -> bool:
    """``update(index, data, meta)`` on the storage: new data (its row rewritten at the next batch), meta merged
    (group indexes re-filed); False when no item has this index."""
    slot = s.id2slot.get(index)
    if slot is None:
        return False
    if meta is not None and not isinstance(meta, Mapping):
        raise TypeError(f"update(meta=...) must be a dict or None, got {type(meta).__name__}")
    item = s.item(slot)
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


def update_items(s: SlotStorage, indices: Sequence[int], data: Optional[Sequence[object]],
                 meta: ManyMeta) -> List[bool]:
    """``update_many`` on the storage (``meta``: one dict per index, or a dict of columns); one bool per index."""
    n = len(indices)
    if data is not None and len(data) != n:
        raise ValueError(f"update_many got {len(data)} data values for {n} indices")
    if data is None and meta is None:
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
            m = items[slot].meta  # type: ignore[union-attr]  # a live index's slot holds its item
            for k, col in cols:
                m[k] = col[j]
            out.append(True)
        return out
    rows = _meta_rows(meta, n)
    datas: Sequence[object] = data if data is not None else [None] * n
    return [update_item(s, i, d, m) for i, d, m in zip(indices, datas, rows)]


def delete_ids(s: SlotStorage, indices: List[int]) -> int:
    """Remove the items of ``indices`` (unknown ones are skipped); how many were removed."""
    n = 0
    for i in indices:
        slot = s.id2slot.get(i)
        if slot is not None:
            s.remove_slot(slot)
            n += 1
    return n


def _meta_cols(meta: Mapping, n: int) -> Dict[str, List[object]]:
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


def _meta_rows(meta: ManyMeta, n: int) -> List[Optional[Mapping]]:
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


def sample_groups(st: SlotStorage, size: Optional[int], key: str, unroll_len: Optional[int], replace: bool,
                  sample_range: Optional[slice], ignore_insufficient: bool) -> List[List[BufferedData]]:
    """``sample(groupby=key)``: groups of live items by ``meta[key]`` (see ``DequeBuffer.sample``)."""
    need = 1 if unroll_len is None else unroll_len
    cand: List[Tuple[List[int], int]] = []  # each eligible group: its ids in push order, from position head on
    if sample_range is None:
        gi = st.group_index(key)
        for g in gi.groups.values():
            if g.live() >= need:
                if g.dead:
                    alive = st.id2slot
                    g.ids = [i for i in g.ids[g.head:] if i in alive]
                    g.head = 0
                    g.dead = 0
                cand.append((g.ids, g.head))
    else:
        by: Dict[object, List[int]] = {}
        for s in st.ordered_slots()[sample_range].tolist():
            it = st.item(s)
            v = it.meta.get(key, MISSING)
            if v is MISSING:
                continue
            try:
                by.setdefault(v, []).append(it.index)
            except TypeError:
                raise TypeError(f"meta[{key!r}] = {v!r} is not hashable; groupby needs hashable values") from None
        cand = [(ids, 0) for ids in by.values() if len(ids) >= need]
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
        chosen = (st.rng.integers(0, n, k) if replace else st.rng.choice(n, k, replace=False)).tolist()
    id2slot = st.id2slot
    out: List[List[BufferedData]] = []
    for c in chosen:
        ids, head = cand[c]
        if unroll_len is None:
            window = ids[head:]
        else:
            start = head + int(st.rng.integers(0, len(ids) - head - unroll_len + 1))
            window = ids[start:start + unroll_len]
        out.append([st.item(id2slot[i]) for i in window])
    if st.syncers and out:
        st.sync(np.array([id2slot[it.index] for g in out for it in g], dtype=np.int64))
    if replace and len(out) > 1:  # a group (or overlapping windows) drawn twice: copies, not aliases
        seen = 0
        flat = [it for g in out for it in g]
        copy_repeats(flat)
        for window_items in out:
            window_items[:] = flat[seen:seen + len(window_items)]
            seen += len(window_items)
    return out
