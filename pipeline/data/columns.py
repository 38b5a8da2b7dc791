"""The columnar mirror used by ``sample_batch`` (numpy columns per field, gathered into tensors).

Turning lists of transitions into batches otherwise lives in :mod:`pipeline.data.collate`."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Dict, List, Protocol, Tuple, Union, cast

import numpy as np
import torch

__all__ = ["Columns", "ColumnStore", "Unsupported", "GatheredBatch"]

#: What gathering rows gives: (nested) dicts of ``[B, ...]`` tensors, or one tensor when the items are single leaves.
GatheredBatch = Union[Dict[object, object], torch.Tensor]


class Unsupported(Exception):
    """The example item cannot be stored in columns."""


_PY = 0  # python scalar
_NP = 1  # numpy array or numpy scalar
_TT = 2  # torch tensor

# Python floats are kept exactly (float64) and gathered as float32 tensors
_PY_DTYPES = {bool: np.bool_, int: np.int64, float: np.float64}

# how Columns.row rebuilds a leaf: a Python scalar, an array of >= 1 dims, a 0-d array, a numpy scalar, a tensor
_ROW_PY, _ROW_ARR, _ROW_ARR0, _ROW_NPSCALAR, _ROW_TENSOR = range(5)


class ColumnStore(Protocol):
    """What a storage's columnar rows are to the buffer (``SlotStorage.columns``): ``ok`` says per slot whether
    its row holds the item, ``write``/``write_many`` copy items in, ``gather`` builds the batch of some slots."""

    ok: np.ndarray

    def write(self, slot: int, data: object) -> None: ...

    def write_many(self, slots: List[int], datas: List[object]) -> None: ...

    def gather(self, slots: np.ndarray) -> GatheredBatch: ...


def _at(data: object, path: tuple) -> object:
    """The node of the nested mappings ``data`` at ``path`` (``KeyError``/``TypeError`` where there is none)."""
    for k in path:
        data = cast(Mapping, data)[k]
    return data


class Columns:
    """Preallocated numpy columns mirroring the data of every slot of a buffer.

    The layout is inferred from one example item (a possibly nested dict whose leaves are torch
    tensors, numpy arrays/scalars or Python numbers). Items that do not match the layout (other
    keys, shapes or dtypes) are flagged per slot; a batch containing one falls back to
    :func:`collate`.
    """

    def __init__(self, capacity: int, example: object) -> None:
        self.capacity = capacity
        self.ok = np.zeros(capacity, dtype=bool)
        self._leaves: List[tuple] = []  # (path, kind, column, shape, dtype)
        self._dicts: List[tuple] = []  # (path, nkeys) of every dict node, for structure checks
        # every node in the example's order: (path, its number in _leaves, or -1 for a dict)
        self._nodes: List[Tuple[tuple, int]] = []
        self._build((), example)
        if not self._leaves:
            raise Unsupported("no leaves")
        self._flat = all(len(p) <= 1 for p, *_ in self._leaves)
        # a dict of plain dicts, none empty (so the columns check its whole structure), can be rebuilt from its row
        # alone (Columns.row), so the buffer need not keep it (see plain())
        self.rows = bool(self._dicts) and all(n for _, n in self._dicts) and self.plain(example)
        self._row_spec = [(p[0], mode, col) for (p, _k, col, _s, _d), mode in zip(self._leaves, self._modes)] \
            if self.rows and len(self._dicts) == 1 else []  # a flat dict: one pass over its fields

    def _build(self, path: tuple, x: object) -> None:
        if not path:
            self._modes: List[int] = []
        if isinstance(x, Mapping):
            self._dicts.append((path, len(x)))
            self._nodes.append((path, -1))
            for k, v in x.items():
                self._build(path + (k,), v)
            return
        t = type(x)
        if t is torch.Tensor:
            x = cast(torch.Tensor, x)
            if x.device.type != "cpu":
                raise Unsupported("non-cpu tensor")
            try:
                np_dtype = torch.empty(0, dtype=x.dtype).numpy().dtype
            except (TypeError, RuntimeError):
                raise Unsupported(f"dtype {x.dtype}") from None
            col = np.zeros((self.capacity,) + tuple(x.shape), dtype=np_dtype)
            self._leaves.append((path, _TT, col, x.shape, x.dtype))
            self._modes.append(_ROW_TENSOR)
            self._nodes.append((path, len(self._leaves) - 1))
        elif t is np.ndarray or isinstance(x, np.generic):
            x = cast(Union[np.ndarray, np.generic], x)
            if x.dtype.kind not in "biuf":
                raise Unsupported(f"dtype {x.dtype}")
            col = np.zeros((self.capacity,) + x.shape, dtype=x.dtype)
            self._leaves.append((path, _NP, col, x.shape, x.dtype))
            self._modes.append(_ROW_NPSCALAR if t is not np.ndarray else _ROW_ARR if x.ndim else _ROW_ARR0)
            self._nodes.append((path, len(self._leaves) - 1))
        elif t in _PY_DTYPES:
            col = np.zeros(self.capacity, dtype=_PY_DTYPES[t])
            self._leaves.append((path, _PY, col, (), t))
            self._modes.append(_ROW_PY)
            self._nodes.append((path, len(self._leaves) - 1))
        else:
            raise Unsupported(f"leaf type {t.__name__}")

    def write(self, slot: int, data: object) -> None:
        """Copy ``data`` into row ``slot`` (or flag the slot as non-conforming)."""
        try:
            if not self._dicts:
                if isinstance(data, Mapping):
                    raise KeyError
            elif self._flat:
                if len(cast(Mapping, data)) != self._dicts[0][1]:
                    raise KeyError
            else:
                for path, n in self._dicts:
                    if len(cast(Mapping, _at(data, path))) != n:
                        raise KeyError
            for path, kind, col, shape, dtype in self._leaves:
                v = _at(data, path)
                if kind == _TT:
                    if type(v) is not torch.Tensor or v.dtype is not dtype or v.shape != shape:
                        raise KeyError
                    if v.requires_grad:
                        v = v.detach()
                    col[slot] = v.numpy()
                elif kind == _PY:
                    if type(v) is not dtype:
                        raise KeyError
                    col[slot] = v
                else:
                    if not isinstance(v, (np.ndarray, np.generic)) or v.dtype != dtype or v.shape != shape:
                        raise KeyError
                    col[slot] = v
        except (KeyError, TypeError, IndexError, RuntimeError, AttributeError):
            self.ok[slot] = False
            return
        self.ok[slot] = True

    def write_many(self, slots: List[int], datas: List[object]) -> None:
        """Copy many items at once (vectorised per field); falls back to :meth:`write` per item
        when the batch does not stack cleanly."""
        if len(slots) < 4 or not self._flat or not self._dicts:
            for s, d in zip(slots, datas):
                self.write(s, d)
            return
        n0 = self._dicts[0][1]
        try:
            rows = cast(List[Mapping[object, object]], datas)
            for d in rows:
                if len(d) != n0:
                    raise KeyError
            staged: List[Tuple[np.ndarray, Union[np.ndarray, List[object]]]] = []
            for path, kind, col, shape, dtype in self._leaves:
                k = path[0]
                vals = [d[k] for d in rows]
                if kind == _TT:
                    tt = torch.stack(cast(List[torch.Tensor], vals))
                    if tt.dtype is not dtype or tt.shape[1:] != shape:
                        raise KeyError
                    if tt.requires_grad:
                        tt = tt.detach()
                    staged.append((col, tt.numpy()))
                elif kind == _PY:
                    for v in vals:
                        if type(v) is not dtype:
                            raise KeyError
                    staged.append((col, vals))
                else:
                    st = np.stack(cast(List[np.ndarray], vals))
                    if st.dtype != dtype or st.shape[1:] != shape:
                        raise KeyError
                    staged.append((col, st))
        except (KeyError, TypeError, IndexError, RuntimeError, AttributeError, ValueError):
            for s, d in zip(slots, datas):
                self.write(s, d)
            return
        idx = np.asarray(slots, dtype=np.int64)
        for col, v in staged:
            col[idx] = v
        self.ok[idx] = True

    def plain(self, data: object) -> bool:
        """True when ``data``'s dict nodes (at the layout's places) are all plain ``dict`` s: what :meth:`row`
        rebuilds exactly (an item of the layout, ``ok`` in its row)."""
        if type(data) is not dict:
            return False
        for path, _n in self._dicts[1:]:
            if type(_at(data, path)) is not dict:
                return False
        return True

    def row(self, slot: int) -> Dict[object, object]:
        """The item of row ``slot`` rebuilt as the dict that was written there, nested dicts and keys in the
        first item's order (only when :attr:`rows`): Python scalars and numpy scalars as they were pushed,
        arrays and tensors as new copies of the row."""
        if not self._row_spec:
            return self._nested_row(slot)
        out: Dict[object, object] = {}
        for key, mode, col in self._row_spec:
            if mode == _ROW_PY:
                out[key] = col[slot].item()
            elif mode == _ROW_ARR:
                out[key] = col[slot].copy()
            elif mode == _ROW_NPSCALAR:
                out[key] = col[slot]
            elif mode == _ROW_ARR0:
                out[key] = col[slot, ...].copy()
            else:
                out[key] = torch.from_numpy(col[slot, ...].copy())
        return out

    def _nested_row(self, slot: int) -> Dict[object, object]:
        out: Dict[object, object] = {}
        leaves, modes = self._leaves, self._modes
        for path, leaf in self._nodes[1:]:  # the root is out
            parent = out
            for k in path[:-1]:
                parent = cast(Dict[object, object], parent[k])
            if leaf < 0:
                parent[path[-1]] = {}
                continue
            col, mode = leaves[leaf][2], modes[leaf]
            if mode == _ROW_PY:
                parent[path[-1]] = col[slot].item()
            elif mode == _ROW_ARR:
                parent[path[-1]] = col[slot].copy()
            elif mode == _ROW_NPSCALAR:
                parent[path[-1]] = col[slot]
            elif mode == _ROW_ARR0:
                parent[path[-1]] = col[slot, ...].copy()
            else:
                parent[path[-1]] = torch.from_numpy(col[slot, ...].copy())
        return out

    def gather(self, slots: np.ndarray) -> GatheredBatch:
        """Return the batch for ``slots`` as (nested) dicts of torch tensors."""
        out: Dict[object, object] = {}
        for path, _kind, col, _shape, dtype in self._leaves:
            v = col.take(slots, axis=0)
            t = torch.from_numpy(v.astype(np.float32) if dtype is float else v)  # Python floats: float32 batches
            if not path:
                return t  # the item itself is a single leaf
            d = out
            for k in path[:-1]:
                d = cast(Dict[object, object], d.setdefault(k, {}))
            d[path[-1]] = t
        return out
