"""A :class:`~pipeline.data.frame_storage.FrameStorage` buffer in a buffer file: every live frame once.

``DequeBuffer.save_data`` on a frame storage writes its data column as kind ``"frames"``: the frames the
live items use (``[F, *frame_shape]``, one tensor), per item the positions of its stacked frames in that
tensor (``[N, len(pixel_keys) * stack_len]``), and the other fields as ordinary columns
(:mod:`.columnar_io`). A file of 100k Pong transitions then holds about 1.05 frames per transition
instead of 8. Loading into a ``FrameStorage`` rebuilds its frame pool from the file (no stacks are
materialised); loading into any other storage rebuilds the stacks of every item.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch

from .columnar_io import Decode, Encode, Node, decode_rows, encode_rows
from .frame_storage import FramePool, _Packed
from .frame_storage import _RAW, FrameItem

if TYPE_CHECKING:
    from .frame_storage import FrameStorage

__all__ = ["frames_node", "frame_rows", "packed_rows"]


def frames_node(s: "FrameStorage", items: Sequence[object], encode: Encode) -> Optional[Node]:
    """The ``"frames"`` data column for the live ``items`` of ``s`` (None: write ordinary columns)."""

    if s.pool is None or not items or any(type(it) is not FrameItem for it in items):
        return None
    packed = [_RAW.__get__(it) for it in items]
    ids = np.stack([p.ids for p in packed]).astype(np.int64)
    used, local = np.unique(ids, return_inverse=True)
    return {"kind": "frames", "pixel_keys": list(s.pixel_keys), "key_order": list(s.key_order),
            "stack_len": int(s.stack_len), "frames": torch.from_numpy(s.pool.frames[used]),
            "ids": torch.from_numpy(local.reshape(ids.shape).astype(np.int64)),
            "rest": encode_rows([p.rest for p in packed], encode, "data")}


def _checked(node: Node, n: int) -> Tuple[np.ndarray, np.ndarray, List[str], List[str], int]:
    frames, ids, keys, order, m = (node.get(k) for k in ("frames", "ids", "pixel_keys", "key_order", "stack_len"))
    if not (isinstance(keys, list) and keys and all(type(k) is str for k in keys) and isinstance(order, list)
            and all(type(k) is str for k in order) and type(m) is int and m >= 1):
        raise ValueError("a frames column has bad 'pixel_keys', 'key_order' or 'stack_len'")
    if not isinstance(frames, torch.Tensor) or frames.dim() < 2:
        raise ValueError("the frames of a frames column are not a tensor [frames, ...]")
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.shape != (n, len(keys) * m):
        raise ValueError(f"the frame ids of a frames column are not {n} x {len(keys) * m} int64 values")
    if n and (int(ids.min()) < 0 or int(ids.max()) >= len(frames)):
        raise ValueError("a frame id of a frames column is out of range")
    return frames.numpy(), ids.numpy(), keys, order, m


def frame_rows(node: Node, n: int, decode: Decode) -> List[Dict[str, object]]:
    """The ``n`` items of a ``"frames"`` column with their stacks rebuilt (for a storage without frames)."""
    frames, ids, keys, order, m = _checked(node, n)
    rest = decode_rows(node.get("rest"), n, decode)
    out = []
    for j in range(n):
        d = dict(cast(Dict[str, object], rest[j]))
        stacks = frames.take(ids[j], axis=0)
        for i, k in enumerate(keys):
            d[k] = stacks[i * m:(i + 1) * m]
        out.append({k: d[k] for k in order} if order and len(d) == len(order) else d)
    return out


def packed_rows(new: "FrameStorage", node: Node, n: int, start: int, decode: Decode) -> List[_Packed]:
    """Fill the empty frame storage ``new`` with the file's frames and return the packed records of items
    ``start..n`` (to push with ``new.push_packed``); frames only the dropped items used are freed."""

    frames, ids, keys, order, m = _checked(node, n)
    if tuple(keys) != new.pixel_keys:
        raise ValueError(f"the file's pixel fields {keys} are not this FrameStorage's {list(new.pixel_keys)}")
    rest = decode_rows(node.get("rest"), n, decode)[start:]
    pool = new.pool = FramePool(frames.shape[1:], frames.dtype, max(len(frames), new._pool_capacity))
    fid = np.fromiter((pool.add(f) for f in frames), dtype=np.int64, count=len(frames))
    rows = fid[ids[start:]]
    pool.refs[fid] = 0
    np.add.at(pool.refs, rows.ravel(), 1)
    unused = np.unique(fid[pool.refs[fid] == 0])
    pool.refs[unused] = 1
    pool.release(unused)
    new.key_order, new.stack_len = list(order), m
    return [_Packed(cast(Dict[str, object], r), row.astype(np.int32), new) for r, row in zip(rest, rows)]
