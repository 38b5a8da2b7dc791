"""Middleware for RL pipelines: ``from middleware import StepCollector, OffPolicyLearner, ...``.

Every middleware documents what it reads from and writes to the context, and the role it is
gated to (``pipeline.runtime.roles.for_roles``). Roles: collectors, ``eps_greedy_handler`` and
``nstep_reward_enhancer`` run on COLLECTOR nodes; ``interaction_evaluator`` on EVALUATOR nodes;
``data_pusher``, ``offpolicy_data_fetcher``, ``offline_data_fetcher``, ``trainer``, ``OffPolicyLearner``,
``PeriodicReset`` and ``CkptSaver`` on LEARNER nodes (the replay buffer lives with the learner); on-policy (PPO): ``RolloutCollector`` on
COLLECTOR nodes, ``gae_estimator`` and ``OnPolicyTrainer`` on LEARNER nodes, ``RolloutExchanger``
between them; ``termination_checker`` and ``online_logger`` everywhere. A node with no roles runs everything.
The checkpoint files ``CkptSaver`` writes are :mod:`pipeline.checkpoint` (``save_checkpoint``, ``load_checkpoint``).

Importing this package loads neither torch, gymnasium, treetensor, tensorboard nor the replay buffers
(``pipeline.data``): each is imported where it is first used.
"""
from typing import TYPE_CHECKING

from .augment import random_shift_augmenter
from .ckpt_handler import CkptSaver
from .collector import EpisodeCollector, StepCollector
from .functional import (NStepAccumulator, data_pusher, episode_return_bound, eps_greedy_handler,
                         evaluate_episodes, interaction_evaluator, nstep_reward_enhancer, offpolicy_data_fetcher,
                         online_logger, termination_checker, trainer)
from .learner import OffPolicyLearner
from .offline import offline_data_fetcher, offline_logger
from .onpolicy import OnPolicyTrainer, RolloutCollector, gae_estimator, rollout_to_batch
from .reset import PeriodicReset

if TYPE_CHECKING:  # loaded on first use (__getattr__ below): only parallel runs use them
    from .exchange import ContextExchanger, ModelExchanger, PeriodicalModelExchanger, RolloutExchanger

__all__ = [
    'StepCollector', 'EpisodeCollector', 'OffPolicyLearner', 'CkptSaver', 'PeriodicReset',
    'eps_greedy_handler', 'nstep_reward_enhancer', 'NStepAccumulator', 'data_pusher', 'offpolicy_data_fetcher',
    'interaction_evaluator', 'evaluate_episodes', 'random_shift_augmenter', 'episode_return_bound', 'trainer', 'termination_checker', 'online_logger',
    'ContextExchanger', 'ModelExchanger', 'PeriodicalModelExchanger',
    'offline_data_fetcher', 'offline_logger',
    'RolloutCollector', 'gae_estimator', 'OnPolicyTrainer', 'rollout_to_batch', 'RolloutExchanger',
]


def __getattr__(name: str):
    if name in ('ContextExchanger', 'ModelExchanger', 'PeriodicalModelExchanger', 'RolloutExchanger'):
        from . import exchange  # lazy: only parallel runs use them
        return getattr(exchange, name)
    raise AttributeError(f"module 'middleware' has no attribute {name!r}")
