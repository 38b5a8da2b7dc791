"""Collation of transitions into batches, and the columnar mirror used by ``sample_batch``."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Sequence

import numpy as np
import torch

__all__ = ["collate", "to_treetensor"]


def collate(items: Sequence[Any]) -> Any:
    """Stack a list of same-structured samples into a batch of torch tensors.

    Dicts (any ``Mapping``) are collated key by key, tuples/lists element by element; torch tensors
    are stacked, numpy arrays and numpy scalars become stacked tensors, Python ``bool``/``int``/
    ``float`` become ``bool``/``int64``/``float32`` tensors of shape ``[B]``. Anything else (strings,
    ``None``, objects) is returned as a plain list.

    Example: ``collate([{"obs": t1, "reward": 1.0}, {"obs": t2, "reward": 0.0}])`` returns
    ``{"obs": tensor[2, ...], "reward": tensor([1., 0.])}``.
    """
    if not isinstance(items, (list, tuple)):
        items = list(items)
    if len(items) == 0:
        raise ValueError("collate() needs at least one item")
    first = items[0]
    if isinstance(first, Mapping):
        n = len(first)
        if any(len(d) != n for d in items):
            raise ValueError("collate(): items do not share the same keys")
        try:
            return {k: collate([d[k] for d in items]) for k in first}
        except (KeyError, TypeError) as e:
            raise ValueError(f"collate(): items do not share the same keys ({e!r})") from None
    if isinstance(first, torch.Tensor):
        return torch.stack(items)
    if isinstance(first, np.ndarray):
        return torch.from_numpy(np.stack(items))
    if isinstance(first, bool):
        return torch.tensor(items, dtype=torch.bool)
    if isinstance(first, int):
        return torch.tensor(items, dtype=torch.int64)
    if isinstance(first, float):
        return torch.tensor(items, dtype=torch.float32)
    if isinstance(first, np.generic):
        return torch.from_numpy(np.array(items))
    if isinstance(first, (tuple, list)) and not isinstance(first, str):
        n = len(first)
        if any(len(x) != n for x in items):
            raise ValueError("collate(): sequences in the items have different lengths")
        out = [collate([x[i] for x in items]) for i in range(n)]
        return tuple(out) if isinstance(first, tuple) else out
    return list(items)


def to_treetensor(batch: Any) -> Any:
    """Wrap a (nested) dict of tensors as a ``treetensor.torch.Tensor`` (imports treetensor lazily).

    Leaves are shared, not copied. When every leaf is already a tensor the tree is built straight from
    a storage (a few microseconds); ``ttorch.as_tensor`` formats every leaf with ``repr`` while
    building (about 12 ms for a CartPole batch), so it only serves batches with other leaves.
    """
    import warnings

    with warnings.catch_warnings():  # treevalue warns about a deprecated torch API at import
        warnings.simplefilter("ignore", FutureWarning)
        import treetensor.torch as ttorch  # lazy: treetensor is slow to import

    if isinstance(batch, ttorch.Tensor):
        return batch
    if isinstance(batch, Mapping) and _all_tensor_leaves(batch):
        try:
            from treevalue.tree.common.storage import create_storage
        except ImportError:  # another treevalue layout: the slow, public path
            return ttorch.as_tensor(batch)
        return ttorch.Tensor(create_storage(_plain_dicts(batch)))
    return ttorch.as_tensor(batch)


def _all_tensor_leaves(d: Mapping) -> bool:
    for v in d.values():
        if isinstance(v, Mapping):
            if not _all_tensor_leaves(v):
                return False
        elif not isinstance(v, torch.Tensor):
            return False
    return True


def _plain_dicts(d: Mapping) -> dict:
    return {k: _plain_dicts(v) if isinstance(v, Mapping) else v for k, v in d.items()}


class Unsupported(Exception):
    """The example item cannot be stored in columns."""


_PY = 0  # python scalar
_NP = 1  # numpy array or numpy scalar
_TT = 2  # torch tensor

_PY_DTYPES = {bool: np.bool_, int: np.int64, float: np.float32}


class Columns:
    """Preallocated numpy columns mirroring the data of every slot of a buffer.

    The layout is inferred from one example item (a possibly nested dict whose leaves are torch
    tensors, numpy arrays/scalars or Python numbers). Items that do not match the layout (other
    keys, shapes or dtypes) are flagged per slot; a batch containing one falls back to
    :func:`collate`.
    """

    def __init__(self, capacity: int, example: Any) -> None:
        self.capacity = capacity
        self.ok = np.zeros(capacity, dtype=bool)
        self._leaves: List[tuple] = []  # (path, kind, column, shape, dtype)
        self._dicts: List[tuple] = []  # (path, nkeys) of every dict node, for structure checks
        self._build((), example)
        if not self._leaves:
            raise Unsupported("no leaves")
        self._flat = all(len(p) <= 1 for p, *_ in self._leaves)

    def _build(self, path: tuple, x: Any) -> None:
        if isinstance(x, Mapping):
            self._dicts.append((path, len(x)))
            for k, v in x.items():
                self._build(path + (k,), v)
            return
        t = type(x)
        if t is torch.Tensor:
            if x.device.type != "cpu":
                raise Unsupported("non-cpu tensor")
            try:
                np_dtype = torch.empty(0, dtype=x.dtype).numpy().dtype
            except (TypeError, RuntimeError):
                raise Unsupported(f"dtype {x.dtype}") from None
            col = np.zeros((self.capacity,) + tuple(x.shape), dtype=np_dtype)
            self._leaves.append((path, _TT, col, x.shape, x.dtype))
        elif t is np.ndarray or isinstance(x, np.generic):
            if x.dtype.kind not in "biuf":
                raise Unsupported(f"dtype {x.dtype}")
            col = np.zeros((self.capacity,) + x.shape, dtype=x.dtype)
            self._leaves.append((path, _NP, col, x.shape, x.dtype))
        elif t in _PY_DTYPES:
            col = np.zeros(self.capacity, dtype=_PY_DTYPES[t])
            self._leaves.append((path, _PY, col, (), t))
        else:
            raise Unsupported(f"leaf type {t.__name__}")

    def write(self, slot: int, data: Any) -> None:
        """Copy ``data`` into row ``slot`` (or flag the slot as non-conforming)."""
        try:
            if not self._dicts:
                if isinstance(data, Mapping):
                    raise KeyError
            elif self._flat:
                if len(data) != self._dicts[0][1]:
                    raise KeyError
            else:
                for path, n in self._dicts:
                    v = data
                    for k in path:
                        v = v[k]
                    if len(v) != n:
                        raise KeyError
            for path, kind, col, shape, dtype in self._leaves:
                v = data
                for k in path:
                    v = v[k]
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

    def write_many(self, slots: List[int], datas: List[Any]) -> None:
        """Copy many items at once (vectorised per field); falls back to :meth:`write` per item
        when the batch does not stack cleanly."""
        if len(slots) < 4 or not self._flat or not self._dicts:
            for s, d in zip(slots, datas):
                self.write(s, d)
            return
        n0 = self._dicts[0][1]
        try:
            for d in datas:
                if len(d) != n0:
                    raise KeyError
            staged = []
            for path, kind, col, shape, dtype in self._leaves:
                k = path[0]
                vals = [d[k] for d in datas]
                if kind == _TT:
                    st = torch.stack(vals)
                    if st.dtype is not dtype or st.shape[1:] != shape:
                        raise KeyError
                    if st.requires_grad:
                        st = st.detach()
                    staged.append((col, st.numpy()))
                elif kind == _PY:
                    for v in vals:
                        if type(v) is not dtype:
                            raise KeyError
                    staged.append((col, vals))
                else:
                    st = np.stack(vals)
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

    def gather(self, slots: np.ndarray) -> Dict[Any, Any]:
        """Return the batch for ``slots`` as (nested) dicts of torch tensors."""
        out: Dict[Any, Any] = {}
        for path, _kind, col, _shape, _dtype in self._leaves:
            t = torch.from_numpy(col.take(slots, axis=0))
            if not path:
                return t  # the item itself is a single leaf
            d = out
            for k in path[:-1]:
                d = d.setdefault(k, {})
            d[path[-1]] = t
        return out
