"""Frame-efficient storage for pixel transitions: each frame stored once, stacks rebuilt on sampling.

An Atari transition ``{obs: [4, 84, 84], next_obs: [4, 84, 84], action, reward, ...}`` holds 8
frames, of which usually only one is new: the stack of step ``t+1`` repeats 3 frames of step ``t``,
and ``next_obs`` repeats ``obs`` shifted (with n-step returns, the ``obs`` of a later transition).
:class:`FrameStorage` keeps every distinct frame once in a :class:`FramePool` (reference counted,
found again by a CRC-32 of its bytes and an exact comparison) and stores per transition only the
ids of its frames plus the small fields. Stacks are gathered from the pool when a batch is built
(``sample_batch``) or an item's ``data`` is read (``sample``, ``get``): the buffer's API, its
middleware (PER, n-step data, ``update``) and the data handed out are unchanged. Sharing is by
content only, so it is exact whatever the push order, env interleaving or episode boundaries.

``save_data`` writes each frame once too (:mod:`.frame_file`), and ``load_data`` rebuilds the pool from it.

Use: ``DequeBuffer(size, storage=FrameStorage(size))``. The default layout holds one stack per
transition in the pushed items plus obs and next_obs in the columnar mirror; ``benchmarks/bench_envs.py
--skip-envs`` measures both for a 100k-transition Pong buffer (figures: docs/benchmarks.md).
"""
from __future__ import annotations

import sys
import zlib
from collections.abc import Mapping
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
from numpy.typing import DTypeLike
import torch

from .columns import Columns, ColumnStore, GatheredBatch, Unsupported
from .item import _DATA, BufferedData, _become_plain
from .storage import SlotStorage
from .writer import FifoWriter

__all__ = ['FrameStorage', 'FramePool']

_RAW = _DATA  # the slot descriptor: a FrameItem keeps its packed record there


class FramePool:
    """Distinct frames of one shape and dtype, reference counted; grows when full."""

    def __init__(self, frame_shape: Tuple[int, ...], dtype: DTypeLike, capacity: int) -> None:
        self.frame_shape = tuple(frame_shape)
        self.dtype = np.dtype(dtype)
        self.frames = np.empty((max(16, capacity),) + self.frame_shape, dtype=self.dtype)
        self.refs = np.zeros(len(self.frames), dtype=np.int64)
        self.free: List[int] = list(range(len(self.frames) - 1, -1, -1))
        self._by_key: Dict[int, int] = {}
        self._key: Dict[int, int] = {}

    @property
    def live(self) -> int:
        """Frames stored now."""
        return len(self.frames) - len(self.free)

    @property
    def nbytes(self) -> int:
        """Bytes of frame memory in use (live frames)."""
        return self.live * self.frames[0].nbytes

    def add(self, frame: np.ndarray) -> int:
        """The id of ``frame`` (an existing one if the same frame is stored), with one more reference.

        Frames are found again by a CRC-32 of their bytes and confirmed by an exact comparison."""
        frame = np.ascontiguousarray(frame)
        key = zlib.crc32(frame.data)
        fid = self._by_key.get(key)
        if fid is not None and self.frames[fid].tobytes() == frame.tobytes():
            self.refs[fid] += 1
            return fid
        if not self.free:
            self._grow()
        fid = self.free.pop()
        self.frames[fid] = frame
        self.refs[fid] = 1
        if key not in self._by_key:  # on a CRC collision the newer frame is stored without a key
            self._by_key[key] = fid
            self._key[fid] = key
        return fid

    def add_stack(self, stack: np.ndarray) -> np.ndarray:
        return np.fromiter((self.add(f) for f in stack), dtype=np.int64, count=len(stack))

    def release(self, ids: np.ndarray) -> None:
        refs = self.refs
        for fid in ids.tolist():
            refs[fid] -= 1
            if refs[fid] == 0:
                self.free.append(fid)
                key = self._key.pop(fid, None)
                if key is not None:
                    del self._by_key[key]

    def clear(self) -> None:
        self.refs[:] = 0
        self.free = list(range(len(self.frames) - 1, -1, -1))
        self._by_key.clear()
        self._key.clear()

    def _grow(self) -> None:
        n = len(self.frames)
        m = n + max(16, n // 4)
        frames = np.empty((m,) + self.frame_shape, dtype=self.dtype)
        frames[:n] = self.frames
        self.frames = frames
        self.refs = np.concatenate([self.refs, np.zeros(m - n, dtype=np.int64)])
        self.free.extend(range(m - 1, n - 1, -1))


class _Packed:
    """What a FrameItem really holds: the small fields, and the frame ids of every pixel field in one
    flat int32 array (``storage.pixel_keys`` order, ``storage.stack_len`` frames each)."""

    __slots__ = ('rest', 'ids', 'storage')

    def __init__(self, rest: Dict[str, object], ids: np.ndarray, storage: 'FrameStorage') -> None:
        self.rest, self.ids, self.storage = rest, ids, storage

    def unpack(self) -> Dict[str, object]:
        st = self.storage
        out = dict(self.rest)
        frames = st.frame_pool.frames.take(self.ids, axis=0)
        n = st.stack_len
        for j, k in enumerate(st.pixel_keys):
            out[k] = frames[j * n:(j + 1) * n]
        return {k: out[k] for k in st.key_order} if st.key_order and len(out) == len(st.key_order) else out


class FrameItem(BufferedData):
    """A stored item whose ``data`` is rebuilt from the frame pool on every read (assigning
    ``data``, as ``DequeBuffer.update`` does, packs the new data)."""

    __slots__ = ()

    @property
    def data(self) -> object:
        return _RAW.__get__(self).unpack()

    @data.setter
    def data(self, value: object) -> None:
        old = _RAW.__get__(self)
        new = old.storage.pack(value)
        old.storage.unpack_release(old)
        _RAW.__set__(self, new)


class _FrameColumns:
    """The columnar mirror for ``sample_batch``: ordinary columns for the small fields, pixel fields
    gathered from the pool by frame id."""

    def __init__(self, storage: 'FrameStorage', capacity: int, example: _Packed) -> None:
        self.storage = storage
        self.ids = np.zeros((capacity, len(example.ids)), dtype=np.int32)
        self.rest = Columns(capacity, example.rest)
        self.ok = self.rest.ok

    def write(self, slot: int, data: object) -> None:
        if not isinstance(data, _Packed):
            self.ok[slot] = False
            return
        self.rest.write(slot, data.rest)
        if self.ok[slot]:
            self.ids[slot] = data.ids

    def write_many(self, slots: List[int], datas: List[object]) -> None:
        for s, d in zip(slots, datas):
            self.write(s, d)

    def nbytes(self) -> int:
        return self.ids.nbytes + sum(leaf[2].nbytes for leaf in self.rest._leaves)

    def gather(self, slots: np.ndarray) -> GatheredBatch:
        st = self.storage
        out = self.rest.gather(slots)
        assert isinstance(out, dict)  # the small fields of a dict transition
        frames = st.frame_pool.frames
        ids = self.ids.take(slots, axis=0)                      # [B, K * n]
        stacked = frames.take(ids.reshape(-1), axis=0).reshape(ids.shape + frames.shape[1:])
        n = st.stack_len
        for j, k in enumerate(st.pixel_keys):
            out[k] = torch.from_numpy(stacked[:, j * n:(j + 1) * n])
        return {k: out[k] for k in st.key_order if k in out} if st.key_order else out


class FrameStorage(SlotStorage):
    """Slot storage that keeps each distinct frame of the ``pixel_keys`` fields once (see the module
    docstring). Items must be dicts; ``pixel_keys`` values are stacks ``[n_frames, *frame_shape]``
    of one shape and dtype (the first one pushed fixes them).

    Args:
        size: slots (transitions).
        pixel_keys: the stacked-frame fields (``('obs', 'next_obs')``).
        seed: the buffer's sampling seed.
        frames_per_item: expected new frames per transition, to size the pool up front (it grows).
    """

    def __init__(self, size: int, pixel_keys: Sequence[str] = ('obs', 'next_obs'), seed: Optional[int] = None,
                 frames_per_item: float = 1.05) -> None:
        self.pixel_keys = tuple(pixel_keys)
        if not self.pixel_keys:
            raise ValueError('FrameStorage needs at least one pixel key, e.g. pixel_keys=("obs", "next_obs")')
        self.pool: Optional[FramePool] = None
        self._pool_capacity = int(size * frames_per_item) + 64
        self.key_order: List[str] = []
        self.stack_len = 0  # frames per stack, fixed by the first push
        super().__init__(size, True, seed)

    # ------------------------------------------------------------------ packing
    def pack(self, data: object) -> _Packed:
        """Store ``data``'s frames (one more reference each) and return its packed record."""
        if not isinstance(data, Mapping):
            raise TypeError(f'FrameStorage stores dict transitions, got {type(data).__name__}')
        rest: Dict[str, object] = {}
        stacks: Dict[str, np.ndarray] = {}
        for k, v in data.items():
            if k in self.pixel_keys:
                stacks[k] = self._stack(k, v)
            else:
                rest[k] = v
        missing = [k for k in self.pixel_keys if k not in stacks]
        if missing:
            raise KeyError(f'FrameStorage: the transition has no {missing} (pixel_keys={self.pixel_keys})')
        lens = {len(stacks[k]) for k in self.pixel_keys}
        if len(lens) != 1 or (self.stack_len and lens != {self.stack_len}):
            raise ValueError(f'FrameStorage: every pixel field must stack the same number of frames '
                             f'({self.stack_len or "as the first push"}); got '
                             f'{ {k: len(stacks[k]) for k in self.pixel_keys} }')
        if not self.key_order:
            self.key_order = list(data.keys())
            self.stack_len = lens.pop()
        pool = self.frame_pool
        ids = np.concatenate([pool.add_stack(stacks[k]) for k in self.pixel_keys]).astype(np.int32)
        return _Packed(rest, ids, self)

    def _stack(self, key: str, v: object) -> np.ndarray:
        if isinstance(v, torch.Tensor):
            v = v.detach().cpu().numpy()
        a = np.asarray(v)
        if a.ndim < 2:
            raise ValueError(f'FrameStorage: {key!r} must be a stack of frames [n, ...], got shape {a.shape}')
        if self.pool is None:
            self.pool = FramePool(a.shape[1:], a.dtype, self._pool_capacity)
        elif a.shape[1:] != self.pool.frame_shape or a.dtype != self.pool.dtype:
            raise ValueError(f'FrameStorage: {key!r} frames are {a.shape[1:]} {a.dtype}, but the buffer holds '
                             f'{self.pool.frame_shape} {self.pool.dtype} frames')
        return a

    def unpack_release(self, packed: _Packed) -> None:
        self.frame_pool.release(packed.ids)

    @property
    def frame_pool(self) -> FramePool:
        """The pool, once the first transition fixed the frames' shape and dtype."""
        pool = self.pool
        if pool is None:
            raise RuntimeError("FrameStorage: no frame pool before the first push")
        return pool

    # ------------------------------------------------------------------ storage overrides
    def push(self, data: object, meta: Optional[Mapping]) -> BufferedData:
        packed = self.pack(data)
        try:
            item = super().push(packed, meta)
        except BaseException:
            self.unpack_release(packed)
            raise
        if _RAW.__get__(item) is packed:  # stored (a dropped push holds its data unpacked: see dropped())
            item.__class__ = FrameItem  # same layout: reads of .data now rebuild the stacks
        return item

    def dropped(self, data: object, meta: Dict[str, object]) -> BufferedData:
        """A push the writer dropped: its frames released, the item holding its rebuilt data."""
        if isinstance(data, _Packed):
            out = data.unpack()
            self.unpack_release(data)
            data = out
        return super().dropped(data, meta)

    def remove_slot(self, slot: int) -> None:
        item = self.item(slot)
        packed = _RAW.__get__(item)
        super().remove_slot(slot)
        if sys.getrefcount(item) > 2:  # someone still holds the item (a sample, a group index): keep its data
            _RAW.__set__(item, packed.unpack())
            _become_plain(item)
        self.unpack_release(packed)

    def clear(self) -> None:
        super().clear()
        if self.pool is not None:
            self.pool.clear()

    def fresh(self) -> 'FrameStorage':
        """An empty storage like this one (``load_data`` fills it from a file, then :meth:`adopt` takes it)."""
        return FrameStorage(self.size, self.pixel_keys, seed=0)

    def push_packed(self, packed: _Packed, meta: Optional[Mapping]) -> BufferedData:
        """Store an item already packed for this storage (its frames referenced in the pool)."""
        item = super().push(packed, meta)
        if _RAW.__get__(item) is packed:
            item.__class__ = FrameItem
        return item

    def adopt(self, other: SlotStorage) -> None:
        """Take ``other``'s contents: another frame storage's wholesale (pool, items, columns), any other
        storage's items pushed again, oldest first with their indices, so their frames are shared here too.
        Listeners are not told (the caller tells them, as for :meth:`SlotStorage.adopt`)."""
        if isinstance(other, FrameStorage) and other.pixel_keys == self.pixel_keys:
            super().adopt(other)
            for slot in self.dense[:self.count].tolist():
                _RAW.__get__(self.items[slot]).storage = self
            if isinstance(self.columns, _FrameColumns):
                self.columns.storage = self
            return
        version, pushes = self.version, self.pushes
        listeners, syncers, writer = self.listeners, self.syncers, self.writer
        self.listeners, self.syncers = [], []
        self.writer = FifoWriter()  # every item of ``other`` is kept, whatever this buffer's writer does
        self.writer.attach(self)
        try:
            self.clear()
            items = other.items
            for slot in other.ordered_slots().tolist():
                it = items[slot]
                self.next_id = it.index  # push assigns exactly this index
                self.push(it.data, it.meta)
            self.next_id = other.next_id
        finally:
            self.listeners, self.syncers, self.writer = listeners, syncers, writer
        self.version = version + other.version + 1
        self.pushes = pushes + other.pushes + 1
        self.groups = {}

    def ensure_columns(self) -> Optional[ColumnStore]:
        """As :meth:`SlotStorage.ensure_columns`, writing the packed records (no stacks rebuilt)."""
        if self.columns is None:
            if self.columns_unsupported or not self.count:
                return None
            try:
                cols: ColumnStore = _FrameColumns(self, self.size, _RAW.__get__(self.items[int(self.dense[0])]))
            except Unsupported:
                self.columns_unsupported = True
                return None
            self.columns = cols
            self.pending = self.dense[: self.count].tolist()
        else:
            cols = self.columns
        if self.pending:
            items = self.items
            slots = [s for s in dict.fromkeys(self.pending) if items[s] is not None]
            self.pending = []
            cols.write_many(slots, [_RAW.__get__(items[s]) for s in slots])
        return cols

    def memory_bytes(self) -> int:
        """Bytes held: frames in use plus the per-slot columns (Python objects not counted)."""
        n = 0 if self.pool is None else self.pool.nbytes
        if isinstance(self.columns, _FrameColumns):
            n += self.columns.nbytes()
        return n
