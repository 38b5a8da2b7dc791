"""Policies: DQN (learn/collect/eval modes), its Q-network, and batch helpers.

``pipeline.learner`` is imported only when a policy's ``learn_mode`` is first used.
"""
from .common import collate_transitions, eps_schedule, to_tree
from .dqn import DQNCollectMode, DQNEvalMode, DQNPolicy, dqn_targets, get_learner_class
from .model import DQNModel, mlp


def __getattr__(name: str):
    if name == 'DQNLearner':
        return get_learner_class()
    if name in ('load_policy', 'build_policy_from_checkpoint'):
        from . import loading
        return getattr(loading, name)
    raise AttributeError(f'module {__name__!r} has no attribute {name!r}')


__all__ = ['DQNPolicy', 'DQNLearner', 'DQNCollectMode', 'DQNEvalMode', 'DQNModel', 'mlp', 'dqn_targets',
           'collate_transitions', 'eps_schedule', 'to_tree', 'get_learner_class', 'load_policy']
