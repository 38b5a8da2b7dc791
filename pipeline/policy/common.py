"""Small helpers shared by policies and middleware: eps schedules, the action count of a discrete space, the
length of a vector space, and ``collate_transitions`` re-exported from :mod:`pipeline.data.collate`."""
from __future__ import annotations

import math
from typing import Callable

from pipeline.data.collate import collate_transitions

__all__ = ['collate_transitions', 'eps_schedule', 'discrete_action_count', 'vector_size']


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


def vector_size(space: object, what: str = 'observation', algo: str = 'DQN') -> int:
    """The length of a 1-D ``gymnasium.spaces.Box`` (a vector ``what``: 'observation' or 'action'), the input or
    output size of an MLP; a clear ``ValueError`` naming ``algo`` for any other space (images, dicts, ...)."""
    shape = getattr(space, 'shape', None)
    if type(space).__name__ == 'Box' and shape is not None and len(shape) == 1:
        return int(shape[0])
    if what != 'observation':
        hint = 'give it an env whose action space is a 1-D Box (for Discrete actions use DQN or PPO)'
    elif shape is not None and len(shape) == 3:
        hint = 'for images use a convolutional example (examples/dqn_atari.py, examples/ppo_atari.py)'
    else:
        hint = 'flatten it first (gymnasium.wrappers.FlattenObservation) or give it an env with a vector space'
    raise ValueError(f'{algo} with an MLP needs a 1-D Box {what} space (a vector), but this env has {space!r}: {hint}')
