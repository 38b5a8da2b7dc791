"""Turning transitions into a batch: the one place rlpipe does it.

* :func:`collate`: the general rule (what ``DequeBuffer.sample_batch`` falls back to when its numpy
  columns cannot serve a batch, and what ``offpolicy_data_fetcher`` uses for buffers without
  ``sample_batch``): nested dicts / tuples / lists of tensors, arrays and numbers become stacked
  tensors; anything else (strings, objects, None) travels as a plain list.
* :func:`collate_transitions`: a flat dict per transition; fields that are not numbers or arrays are
  dropped unless named (the HER fetcher's batches).
* :func:`stack_transitions`: whole episodes into one batch for ``Learner.update(episodes=...)``
  (numbers and nested lists become arrays first; float64 becomes torch's default float dtype).
* :func:`to_treetensor`: a treetensor view of a dict batch, for code that wants attribute access.

The hot path does not come through here: ``sample_batch`` gathers its batch straight from numpy
columns (:mod:`pipeline.data.columns`) and ``offpolicy_data_fetcher`` hands that dict to the learner
as it is.
"""
from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Union, cast

import numpy as np
import torch

if TYPE_CHECKING:
    from treevalue import TreeValue
    from typing_extensions import TypeGuard

__all__ = ["collate", "collate_transitions", "stack_transitions", "to_treetensor"]


def _numeric(values: Sequence[object], first: object) -> torch.Tensor:
    """Stack tensors, numpy arrays or Python numbers (the type of ``first``) into one tensor."""
    if isinstance(first, torch.Tensor):
        return torch.stack(cast(List[torch.Tensor], list(values)))
    if isinstance(first, np.ndarray):
        return torch.from_numpy(np.stack(cast(Sequence[np.ndarray], values)))
    if isinstance(first, bool):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, int):
        return torch.tensor(values, dtype=torch.int64)
    return torch.tensor(values, dtype=torch.float32)


def is_tree(x: object) -> TypeGuard[TreeValue]:
    """True for a ``treevalue`` tree (what treetensor builds on), found without importing treevalue: a tree can
    only exist if it was imported already."""
    tv = sys.modules.get("treevalue")
    return tv is not None and isinstance(x, tv.TreeValue)


def collate(items: Sequence[object]) -> object:
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
        dicts = cast(Sequence[Mapping], items)
        if any(len(d) != n for d in dicts):
            raise ValueError("collate(): items do not share the same keys")
        try:
            return {k: collate([d[k] for d in dicts]) for k in first}
        except (KeyError, TypeError) as e:
            raise ValueError(f"collate(): items do not share the same keys ({e!r})") from None
    if isinstance(first, (torch.Tensor, np.ndarray, bool, int, float)):
        return _numeric(items, first)
    if isinstance(first, np.generic):
        return torch.from_numpy(np.array(items))
    if isinstance(first, (tuple, list)) and not isinstance(first, str):
        n = len(first)
        seqs = cast(Sequence[Sequence[object]], items)
        if any(len(x) != n for x in seqs):
            raise ValueError("collate(): sequences in the items have different lengths")
        out = [collate([x[i] for x in seqs]) for i in range(n)]
        return tuple(out) if isinstance(first, tuple) else out
    return list(items)


def to_treetensor(batch: object) -> TreeValue:
    """Wrap a (nested) dict of tensors as a ``treetensor.torch.Tensor`` (imports treetensor lazily).

    Leaves are shared, not copied. When every leaf is already a tensor the tree is built straight from
    a storage; ``ttorch.as_tensor`` formats every leaf with ``repr`` while building, which costs far
    more, so it only serves batches with other leaves.
    """

    with warnings.catch_warnings():  # treevalue warns about a deprecated torch API at import
        warnings.simplefilter("ignore", FutureWarning)
        import treetensor.torch as ttorch  # lazy: treetensor is slow to import

    if isinstance(batch, ttorch.Tensor):
        return batch
    if isinstance(batch, Mapping) and _all_tensor_leaves(batch):
        try:
            from treevalue.tree.common.storage import create_storage  # lazy: treetensor is slow to import
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


def _column(values: List[object]) -> torch.Tensor:
    first = values[0]
    if isinstance(first, (torch.Tensor, np.ndarray)) or type(first) in (bool, int, float):
        return _numeric(values, first)  # the same stacking as collate()
    if isinstance(first, (bool, np.bool_)):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, (int, np.integer)):
        return torch.tensor(values, dtype=torch.int64)
    if isinstance(first, (float, np.floating)):
        return torch.tensor(values, dtype=torch.float32)
    raise TypeError(f'cannot collate values of type {type(first).__name__}')


def collate_transitions(items: Sequence[Mapping[str, object]], keys: Optional[Sequence[str]] = None,
                        as_tree: bool = False) -> Union[Dict[str, torch.Tensor], TreeValue]:
    """Stack a list of transition dicts into one dict (or tree) of tensors with a batch axis.

    The general fallback path: one ``np.stack``/``torch.tensor`` per key. Keys whose values are
    not tensors, arrays or numbers (e.g. nested info dicts) are skipped unless named in ``keys``.
    """
    if not items:
        raise ValueError('cannot collate an empty list of transitions')
    strict = keys is not None
    out: Dict[str, torch.Tensor] = {}
    for k in (keys if keys is not None else items[0].keys()):
        vals = [it[k] for it in items]
        try:
            out[k] = _column(vals)
        except TypeError:
            if strict:
                raise
    return to_treetensor(out) if as_tree else out


def _stack_leaves(values: list, where: str) -> object:
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(values, dim=0)

    try:
        arr = np.stack([np.asarray(v) for v in values], axis=0)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"cannot stack the values of {where} into a tensor: {exc}") from exc
    try:
        if arr.dtype == np.float64:  # python floats: use torch's default float dtype (float32)
            return torch.as_tensor(arr, dtype=torch.get_default_dtype())
        return torch.as_tensor(arr)
    except TypeError as exc:
        raise ValueError(f"the values of {where} ({arr.dtype}) cannot become a tensor: {exc}") from exc


def stack_transitions(transitions: Sequence[object], *, where: str = "episode") -> object:
    """Stack a sequence of transitions (dicts of tensors/arrays/numbers, or trees) into a batch."""
    if not transitions:
        raise ValueError(f"{where} has no transitions")
    first = transitions[0]
    if is_tree(first):
        import treetensor.torch as ttorch  # lazy: treetensor is slow to import

        return ttorch.stack(list(transitions), dim=0)
    if not isinstance(first, Mapping):
        raise TypeError(
            f"{where}: a transition must be a dict (field -> value) or a treetensor tree, "
            f"got {type(first).__name__}"
        )
    out = {}
    for key, v in first.items():
        try:
            column = [cast(Mapping, t)[key] for t in transitions]
        except KeyError as exc:
            raise ValueError(f"{where}: transitions do not all have field {key!r}") from exc
        if isinstance(v, Mapping):
            out[key] = stack_transitions(column, where=f"{where}[{key!r}]")
        else:
            out[key] = _stack_leaves(column, f"{where}[{key!r}]")
    return out
