"""Policies: DQN and SAC (learn/collect/eval modes on a shared :class:`Policy` base), models, batch helpers.

Each policy's config schema lives in its module (``DQN_CONFIG`` in :mod:`pipeline.policy.dqn`,
``SAC_CONFIG`` in :mod:`pipeline.policy.sac`); ``pipeline.config.compile_config`` checks against it.
"""
from typing import TYPE_CHECKING

from .base import ActingMode, Policy
from .common import collate_transitions, eps_schedule
from .dqn import DQNCollectMode, DQNEvalMode, DQNLearner, DQNPolicy, dqn_targets
from .model import DQNModel, mlp

if TYPE_CHECKING:  # loaded on first use (__getattr__ below): loading imports every policy (SAC, PPO, gym)
    from .loading import build_policy_from_checkpoint, load_policy



def __getattr__(name: str):
    if name in ('load_policy', 'build_policy_from_checkpoint'):
        from . import loading  # lazy: loading imports every policy (SAC, PPO, gym)
        return getattr(loading, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = ['Policy', 'ActingMode', 'DQNPolicy', 'DQNLearner', 'DQNCollectMode', 'DQNEvalMode', 'DQNModel', 'mlp',
           'dqn_targets', 'collate_transitions', 'eps_schedule', 'load_policy']
