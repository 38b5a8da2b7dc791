"""Small helpers shared by policies and middleware: fast batch building and eps schedules."""
from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Dict, List, Mapping, Sequence

import numpy as np
import torch

from pipeline.data.columns import to_treetensor

__all__ = ['to_tree', 'collate_transitions', 'eps_schedule']


def to_tree(data: Mapping[str, Any]):
    """A ``treetensor.torch.Tensor`` over the (possibly nested) dict of tensors ``data``, cheaply.

    ``treetensor.torch.Tensor(dict)`` formats every leaf with ``repr`` while building the tree
    (about 0.5 ms per leaf: most of DI-engine's per-batch cost); see
    :func:`pipeline.data.to_treetensor`, which builds it from a storage in microseconds.
    """
    return to_treetensor(data)


def _column(values: List[Any]) -> torch.Tensor:
    first = values[0]
    if isinstance(first, torch.Tensor):
        return torch.stack(values)
    if isinstance(first, np.ndarray):
        return torch.from_numpy(np.stack(values))
    if isinstance(first, (bool, np.bool_)):
        return torch.tensor(values, dtype=torch.bool)
    if isinstance(first, (int, np.integer)):
        return torch.tensor(values, dtype=torch.int64)
    if isinstance(first, (float, np.floating)):
        return torch.tensor(values, dtype=torch.float32)
    raise TypeError(f'cannot collate values of type {type(first).__name__}')


def collate_transitions(items: Sequence[Mapping[str, Any]], keys: Sequence[str] = None,
                        as_tree: bool = False) -> Any:
    """Stack a list of transition dicts into one dict (or tree) of tensors with a batch axis.

    The general fallback path: one ``np.stack``/``torch.tensor`` per key. Keys whose values are
    not tensors, arrays or numbers (e.g. nested info dicts) are skipped unless named in ``keys``.
    """
    if not items:
        raise ValueError('cannot collate an empty list of transitions')
    strict = keys is not None
    out: Dict[str, torch.Tensor] = {}
    for k in (keys if strict else items[0].keys()):
        vals = [it[k] for it in items]
        try:
            out[k] = _column(vals)
        except TypeError:
            if strict:
                raise
    return to_tree(out) if as_tree else out


def eps_schedule(kind: str, start: float, end: float, decay: int) -> Callable[[int], float]:
    """Epsilon as a function of env steps: ``'exp'`` (``end + (start-end)*exp(-step/decay)``,
    DI-engine's) or ``'linear'`` (from ``start`` to ``end`` over ``decay`` steps, then ``end``)."""
    if kind == 'exp':
        return lambda step: end + (start - end) * math.exp(-step / decay)
    if kind == 'linear':
        return lambda step: max(end, start - (start - end) * step / decay)
    raise ValueError(f"unknown eps schedule {kind!r}: use 'exp' or 'linear'")


def discrete_action_count(space: Any, algo: str = 'DQN') -> int:
    """The number of actions of a ``gymnasium.spaces.Discrete`` space; a clear ``ValueError``
    naming algorithms that fit when ``space`` is continuous (``Box``) or anything else."""
    n = getattr(space, 'n', None)
    if n is not None and not hasattr(space, 'nvec'):
        return int(n)
    kind = type(space).__name__
    hint = ('for continuous actions use SAC (pipeline.policy.sac.SACPolicy; see examples/her_point.py)'
            if kind == 'Box' else 'give it an env whose action space is gymnasium.spaces.Discrete')
    raise ValueError(f'{algo} needs a discrete action space (gymnasium.spaces.Discrete), but this env has '
                     f'{space!r}: {hint}')
