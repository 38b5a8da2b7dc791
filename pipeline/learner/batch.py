"""Row operations on per-module batches: dicts of tensors, possibly nested (the one form past the learner's
door), or single tensors.

A leaf that is a plain list (a non-numeric field such as strings) has one entry per row.
Building a batch from transitions lives in :mod:`pipeline.data.collate` (``stack_transitions``
is re-exported here). A treetensor tree given to ``Learner.update`` becomes nested dicts at the door
(:func:`untree`); treetensor is never imported here: a tree can only exist if the caller imported it
already, so the check looks it up in ``sys.modules``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Dict, List, Mapping as MappingT, Optional, Sequence, Union, cast

import numpy as np
import torch

from pipeline.data.collate import is_tree, stack_transitions  # noqa: F401 - the batch path lives there

if TYPE_CHECKING:
    from treevalue import TreeValue

#: One batch as the learner takes it: a :class:`~pipeline.data.records.TrainBatch` (field -> ``[B, ...]``
#: tensor, possibly nested; non-numeric fields as lists of B values), a tree (treevalue) of such tensors (made
#: nested dicts at the door), or (a single-module learner) one ``[B, ...]`` tensor.
Batch = Union[MappingT[str, Any], "TreeValue", torch.Tensor]
#: One batch per module: module id -> its batch (what the learner's core trains on, one minibatch at a time):
#: dicts of tensors (possibly nested) or one tensor, never a tree.
ModuleBatches = Dict[str, Batch]
#: A leaf of a batch, or a whole batch that is not a dict: what rows are taken from.
_Leaf = Union[torch.Tensor, np.ndarray, List[object]]

__all__ = [
    "is_tree",
    "untree",
    "num_rows",
    "slice_rows",
    "take_rows",
    "cat_rows",
    "split_rows",
    "stack_transitions",
    "RowStream",
]


def untree(batch: Batch) -> Batch:
    """``batch`` with every treetensor tree in it, at the top or under a dict key, turned into nested dicts of
    its leaves (the batch itself when it holds no tree: no copy)."""
    tv = sys.modules.get("treevalue")
    if tv is None:  # no tree can exist
        return batch
    return cast(Batch, _untree(batch, tv.TreeValue))


def _untree(x: object, tree: type) -> object:
    if isinstance(x, tree):
        return {k: _untree(v, tree) for k, v in cast("TreeValue", x).items()}
    if isinstance(x, Mapping):
        vals = [_untree(v, tree) for v in x.values()]
        if any(a is not b for a, b in zip(vals, x.values())):
            return dict(zip(x.keys(), vals))
    return x


def _dict_leaves(d: Mapping, out: list) -> list:
    for v in d.values():
        if isinstance(v, Mapping):
            _dict_leaves(v, out)
        else:
            out.append(v)
    return out


def num_rows(batch: object, *, where: str = "batch") -> int:
    """Size of the common first (batch) axis of every leaf; ValueError when leaves disagree.

    ``where`` names the batch in error messages (e.g. ``"module 'default_policy' batch"``).
    """
    if type(batch) is dict:  # hot path: a flat dict of tensors
        n = -1
        for v in batch.values():
            if type(v) is not torch.Tensor or v.dim() == 0:
                break
            if n < 0:
                n = v.shape[0]
            elif v.shape[0] != n:
                break
        else:
            if n >= 0:
                return n
        leaves = _dict_leaves(batch, [])  # slow path: nested values or an error to explain
    elif isinstance(batch, torch.Tensor):
        leaves = [batch]
    elif isinstance(batch, Mapping):
        leaves = _dict_leaves(batch, [])
    else:
        raise TypeError(f"{where} must be a dict of tensors (or one tensor), got {type(batch).__name__}")
    if not leaves:
        raise ValueError(f"{where} is empty (no tensors); pass at least one tensor with a batch axis")
    rows: Optional[int] = None
    for leaf in leaves:
        shape = (len(leaf),) if type(leaf) is list else getattr(leaf, "shape", None)  # lists: one entry per row
        if shape is None or len(shape) == 0:
            raise ValueError(
                f"{where} holds a leaf without a batch axis ({type(leaf).__name__} "
                f"{'scalar' if shape is not None else ''}); every leaf needs shape [B, ...]"
            )
        if rows is None:
            rows = shape[0]
        elif shape[0] != rows:
            raise ValueError(
                f"{where} leaves disagree on the batch axis: {rows} vs {shape[0]} rows; "
                "every leaf must share its first dimension"
            )
    assert rows is not None  # leaves is not empty
    return int(rows)


def slice_rows(batch: object, start: int, stop: int) -> object:
    """Rows ``start:stop`` (views, no copy) of every leaf."""
    if isinstance(batch, Mapping):
        return {k: (slice_rows(v, start, stop) if isinstance(v, Mapping) else v[start:stop]) for k, v in batch.items()}
    return cast(_Leaf, batch)[start:stop]


def take_rows(batch: object, index: torch.Tensor) -> object:
    """Rows at ``index`` (a 1-d LongTensor) of every leaf."""
    if isinstance(batch, Mapping):
        return {k: (take_rows(v, index) if isinstance(v, Mapping) else _take(v, index)) for k, v in batch.items()}
    return _take(batch, index)


def _take(x: object, index: torch.Tensor) -> object:
    if type(x) is torch.Tensor and x.dim() > 0:
        if x.device != index.device:
            index = index.to(x.device)
        return x.index_select(0, index)  # same rows as x[index], about half the cost for small batches
    if isinstance(x, torch.Tensor) and x.device != index.device:
        index = index.to(x.device)
    if type(x) is list:  # a non-numeric field (e.g. strings) travels as a plain list
        return [x[i] for i in index.tolist()]
    if not isinstance(x, torch.Tensor):
        return cast(np.ndarray, x)[index.numpy()]  # numpy arrays
    return cast(_Leaf, x)[index]


def cat_rows(parts: Sequence[object]) -> object:
    """Concatenate batches of the same structure along the batch axis."""
    if len(parts) == 1:
        return parts[0]
    first = parts[0]
    if isinstance(first, Mapping):
        return {k: cat_rows([cast(Mapping, p)[k] for p in parts]) for k in first}
    if isinstance(first, torch.Tensor):
        return torch.cat(cast(List[torch.Tensor], list(parts)), dim=0)
    if type(first) is list:
        return [x for p in cast(Sequence[list], parts) for x in p]
    return np.concatenate(list(parts), axis=0)


def split_rows(batch: object, n: int) -> List[object]:
    """Split into ``n`` contiguous shards whose sizes differ by at most one (for n learners).

    Every shard has at least one row: ValueError when the batch has fewer than ``n`` rows.
    """
    rows = num_rows(batch)
    if n < 1:
        raise ValueError(f"split_rows needs n >= 1, got {n}")
    if rows < n:
        raise ValueError(f"cannot split {rows} rows into {n} non-empty shards")
    base, extra = divmod(rows, n)
    out, start = [], 0
    for i in range(n):
        stop = start + base + (1 if i < extra else 0)
        out.append(slice_rows(batch, start, stop))
        start = stop
    return out


class RowStream:
    """An endless stream of a batch's rows for minibatching.

    Rows come in order; at every wrap-around to the start the stream optionally switches to a
    fresh random permutation of the rows (``shuffle``), so the first pass is always in order.
    Only the batch axis is permuted: ``[B, T, ...]`` sequences stay whole.
    """

    __slots__ = ("_orig", "_cur", "_n", "_pos", "_shuffle", "_gen", "passes_started")

    def __init__(self, batch: object, n: int, shuffle: bool = False, generator: Optional[torch.Generator] = None):
        if n <= 0:
            raise ValueError("RowStream needs a batch with at least one row")
        self._orig = batch
        self._cur = batch
        self._n = n
        self._pos = 0
        self._shuffle = shuffle
        self._gen = generator
        self.passes_started = 1

    def _wrap(self) -> None:
        self.passes_started += 1
        if self._shuffle:
            perm = torch.randperm(self._n, generator=self._gen)
            self._cur = take_rows(self._orig, perm)
        self._pos = 0

    def take(self, m: int) -> object:
        """The next ``m`` rows (wrapping around as often as needed)."""
        pos, n = self._pos, self._n
        if pos + m <= n:
            self._pos = pos + m
            return slice_rows(self._cur, pos, pos + m)
        pieces = []
        need = m
        while need:
            if self._pos == n:
                self._wrap()
            pos = self._pos
            k = min(need, n - pos)
            pieces.append(slice_rows(self._cur, pos, pos + k))
            self._pos = pos + k
            need -= k
        return cat_rows(pieces)
