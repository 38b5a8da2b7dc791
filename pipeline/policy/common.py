"""Small helpers shared by policies and middleware: eps schedules, the action count of a discrete space,
and ``collate_transitions`` re-exported from :mod:`pipeline.data.collate`."""
from __future__ import annotations

import math
from typing import Callable

from pipeline.data.collate import collate_transitions

__all__ = ['collate_transitions', 'eps_schedule', 'discrete_action_count']


def eps_schedule(kind: str, start: float, end: float, decay: int) -> Callable[[int], float]:
    """Epsilon as a function of env steps: ``'exp'`` (``end + (start-end)*exp(-step/decay)``,
    DI-engine's) or ``'linear'`` (from ``start`` to ``end`` over ``decay`` steps, then ``end``)."""
    if kind == 'exp':
        return lambda step: end + (start - end) * math.exp(-step / decay)
    if kind == 'linear':
        return lambda step: max(end, start - (start - end) * step / decay)
    raise ValueError(f"unknown eps schedule {kind!r}: use 'exp' or 'linear'")


def discrete_action_count(space: object, algo: str = 'DQN') -> int:
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
