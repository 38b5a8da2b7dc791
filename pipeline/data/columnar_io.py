"""Columnar encoding of many buffer items at once, for ``DequeBuffer.save_data`` / ``load_data``.

:func:`encode_rows` turns a list of values (every item's data, or every item's meta) into a tree of
*nodes*, one per field, each holding the whole column: a stacked tensor for tensors / numpy arrays /
numpy scalars / Python bools, ints and floats of one shape and dtype, a list for strings, a presence
mask per key for dicts whose rows lack some keys (PER's ``priority_IS``), lengths plus one flattened
column for lists and tuples (whole episodes). A column whose rows do not share one type, shape or
dtype falls back to the per-item encoding of :mod:`.serialization` (tagged plain data: still safe,
only slower). Everything is tensors, lists, strings and numbers, so the file loads with
``torch.load(weights_only=True)``; :func:`decode_rows` checks every node (kind, length, types) and
raises ``ValueError`` for anything that does not fit.

Decoded tensors and numpy arrays are row views of their column (one allocation per field, as a batch
of a vectorised env hands out rows of one array); dicts come back with their keys in the order they
were first seen across the rows.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, cast

import numpy as np
import torch

__all__ = ["encode_rows", "decode_rows"]

_K = "kind"
_PY = {bool: torch.bool, int: torch.int64, float: torch.float64}
_PY_NAMES = {"bool": bool, "int": int, "float": float}

Node = Dict[str, object]
"""A column node: ``{"kind": ..., ...}`` holding tensors, lists, strings and nested nodes."""
Encode = Callable[[object, str], object]
Decode = Callable[[object], object]


def encode_rows(rows: Sequence[object], encode_one: Encode, where: str) -> Node:
    """The column node for ``rows`` (``encode_one(value, where)`` encodes a value of a mixed column)."""
    node = _columnar(rows, encode_one, where) if rows else None
    return node if node is not None else {_K: "items", "v": [encode_one(r, where) for r in rows]}


def _columnar(rows: Sequence[object], encode_one: Encode, where: str) -> Optional[Node]:
    t0 = type(rows[0])
    if not all(type(r) is t0 for r in rows):
        return None
    if t0 is type(None):
        return {_K: "none"}
    if t0 in _PY:
        try:
            return {_K: t0.__name__, "v": torch.tensor(rows, dtype=_PY[t0])}
        except (OverflowError, RuntimeError):  # an int beyond int64
            return None
    if t0 is str:
        return {_K: "str", "v": list(rows)}
    if t0 is torch.Tensor:
        trows = cast(Sequence[torch.Tensor], rows)
        r0 = trows[0]
        if r0.device.type != "cpu" or not all(r.dtype == r0.dtype and r.shape == r0.shape and r.device == r0.device
                                                for r in trows):
            return None
        return {_K: "tensor", "v": torch.stack([r.detach() for r in trows])}
    if t0 is np.ndarray or issubclass(t0, np.generic):
        arows = cast(Sequence[np.ndarray], rows)
        d0, s0 = arows[0].dtype, arows[0].shape
        if d0.kind not in "biufc" or not d0.isnative or not all(r.dtype == d0 and r.shape == s0 for r in arows):
            return None
        return {_K: "ndarray" if t0 is np.ndarray else "npscalar", "v": torch.from_numpy(np.stack(arows))}
    if t0 is dict:
        return _dict_node(cast(Sequence[dict], rows), encode_one, where)
    if t0 in (list, tuple):
        srows = cast(Sequence[Sequence[object]], rows)
        flat = [v for r in srows for v in r]
        return {_K: t0.__name__, "len": torch.tensor([len(r) for r in srows], dtype=torch.int64),
                "v": encode_rows(flat, encode_one, where)}
    return None


def _dict_node(rows: Sequence[dict], encode_one: Encode, where: str) -> Optional[Node]:
    keys: Dict[object, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    if not all(type(k) is str for k in keys):
        return None
    n = len(rows)
    cols: Dict[str, Node] = {}
    present: Dict[str, torch.Tensor] = {}
    for k in cast(Dict[str, None], keys):
        vals = [r[k] for r in rows if k in r]
        if len(vals) < n:
            present[k] = torch.tensor([k in r for r in rows], dtype=torch.bool)
        cols[k] = encode_rows(vals, encode_one, f"{where}[{k!r}]")
    return {_K: "dict", "keys": list(keys), "cols": cols, "present": present}


def decode_rows(node: object, n: int, decode_one: Decode) -> List[object]:
    """The ``n`` rows of ``node`` (inverse of :func:`encode_rows`); ``ValueError`` for a malformed node."""
    if not isinstance(node, dict) or not isinstance(node.get(_K), str):
        raise ValueError("a column is not a dict with a 'kind'")
    kind = node[_K]
    if kind == "none":
        return [None] * n
    if kind == "items":
        v = node.get("v")
        if not isinstance(v, list) or len(v) != n:
            raise ValueError(f"an item column has {len(v) if isinstance(v, list) else type(v).__name__} "
                             f"entries, expected {n}")
        return [decode_one(x) for x in v]
    if kind == "str":
        v = node.get("v")
        if not isinstance(v, list) or len(v) != n or not all(type(s) is str for s in v):
            raise ValueError(f"a string column is not a list of {n} strings")
        return list(v)
    if kind in ("dict", "list", "tuple"):
        return _decode_nested(node, kind, n, decode_one)
    t = _column_tensor(node, n, kind)
    if kind in _PY_NAMES:
        if t.dtype != _PY[_PY_NAMES[kind]]:
            raise ValueError(f"a {kind} column holds {t.dtype}")
        return t.tolist()
    if kind == "tensor":
        return list(t.unbind(0))
    if kind == "ndarray":
        a = t.numpy()
        return list(a) if a.ndim > 1 else [a[i, ...] for i in range(n)]
    if kind == "npscalar":
        return list(t.numpy())
    raise ValueError(f"unknown column kind {kind!r} (file from a newer rlpipe?)")


def _column_tensor(node: Node, n: int, kind: str) -> torch.Tensor:
    t = node.get("v")
    if not isinstance(t, torch.Tensor) or t.dim() < 1 or len(t) != n:
        raise ValueError(f"a {kind} column is not a tensor of {n} rows")
    return t


def _decode_nested(node: Node, kind: str, n: int, decode_one: Decode) -> List[object]:
    if kind != "dict":
        lens = _column_tensor({"v": node.get("len")}, n, f"{kind} length")
        if lens.dtype != torch.int64 or (n and int(lens.min()) < 0):
            raise ValueError(f"the lengths of a {kind} column are not integers >= 0")
        flat = decode_rows(node.get("v"), int(lens.sum()), decode_one)
        out: List[object] = []
        pos = 0
        for m in lens.tolist():
            out.append(flat[pos:pos + m] if kind == "list" else tuple(flat[pos:pos + m]))
            pos += m
        return out
    keys, cols, present = node.get("keys"), node.get("cols"), node.get("present")
    if not (isinstance(keys, list) and isinstance(cols, dict) and isinstance(present, dict)
            and all(type(k) is str for k in keys) and set(cols) == set(keys) and set(present) <= set(keys)):
        raise ValueError("a dict column has inconsistent 'keys', 'cols' and 'present'")
    rows: List[Dict[str, object]] = [{} for _ in range(n)]
    for k in keys:
        mask = present.get(k)
        if mask is None:
            for r, v in zip(rows, decode_rows(cols[k], n, decode_one)):
                r[k] = v
            continue
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != (n,):
            raise ValueError(f"the presence mask of key {k!r} is not {n} bools")
        where = mask.nonzero().flatten().tolist()
        for i, v in zip(where, decode_rows(cols[k], len(where), decode_one)):
            rows[i][k] = v
    return cast(List[object], rows)
