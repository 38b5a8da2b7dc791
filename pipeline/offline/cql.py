"""Discrete CQL (conservative Q-learning, the CQL(H) variant) on DQN's learner.

The loss is DQN's TD loss plus ``cql_alpha * mean(logsumexp_a Q(s, a) - Q(s, a_data))``: it
pushes down the Q-values of actions the dataset did not take at ``s`` and up the one it took.
Everything else (double-DQN targets, target network updates, the Q-network, the eval mode) is
:mod:`pipeline.policy.dqn`'s. Config: :data:`CQL_CONFIG` (DQN's plus ``policy.learn.cql_alpha``;
``compile_config(user, policy='cql')``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, cast

import torch
from easydict import EasyDict
from torch import nn

from ..config.schema import defaults
from ..policy.config_defaults import policy_config
from ..policy.dqn import DQNLearner, DQNPolicy
from ..policy.dqn import check_config as dqn_check_config
from .schemas import CQL_CONFIG

__all__ = ['DiscreteCQLLearner', 'DiscreteCQLPolicy', 'cql_penalty', 'CQL_CONFIG', 'CONFIG_SCHEMA',
           'cql_default_config', 'check_config']

CONFIG_SCHEMA = CQL_CONFIG


def cql_default_config() -> EasyDict:
    """The default discrete CQL config (from :data:`CQL_CONFIG`)."""
    return EasyDict(defaults(CQL_CONFIG))


def check_config(cfg: Mapping) -> List[str]:
    """DQN's checks (soft target updates need a theta, optimizer arguments)."""
    return dqn_check_config(cfg)


def cql_penalty(q: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Per row ``logsumexp_a Q(s, a) - Q(s, a_data)`` (``q`` ``[B, n]``, ``action`` ``[B]``): >= 0,
    and 0 only when all of the softmax's mass is on the dataset's action."""
    q_a = q.gather(1, action.long().reshape(-1, 1)).squeeze(1)
    return torch.logsumexp(q, dim=1) - q_a


class DiscreteCQLLearner(DQNLearner):
    """DQN's learner with the CQL(H) term (weight ``policy.learn.cql_alpha``) added to its loss.

    Outputs per update, besides DQN's (``q_value``, ``priority``): ``td_loss`` and ``cql_loss``
    (the mean penalty before the weight); ``total_loss = td_loss + cql_alpha * cql_loss``.
    """

    config_schema = CQL_CONFIG

    def __init__(self, model: nn.Module, cfg: Mapping) -> None:
        super().__init__(model, cfg)
        self.cql_alpha = float(policy_config(cfg, self.config_schema)['learn']['cql_alpha'])

    def compute_loss_for_module(self, module_id: str, batch: Any, fwd_out: torch.Tensor) -> Dict[str, torch.Tensor]:
        out = super().compute_loss_for_module(module_id, batch, fwd_out)
        penalty = cql_penalty(fwd_out, batch['action']).mean()
        td = out['total_loss']
        out['td_loss'] = td.detach()
        out['cql_loss'] = penalty.detach()
        out['total_loss'] = td + self.cql_alpha * penalty
        return out


class DiscreteCQLPolicy(DQNPolicy):
    """:class:`pipeline.policy.dqn.DQNPolicy` whose learn mode is a :class:`DiscreteCQLLearner`
    (same arguments: a config from ``compile_config(user, policy='cql')``)."""

    config_schema = CQL_CONFIG

    def _build_learner(self) -> DiscreteCQLLearner:
        return DiscreteCQLLearner(self.model, self.cfg)

    @property
    def learn_mode(self) -> DiscreteCQLLearner:
        """The :class:`DiscreteCQLLearner` (built on first access; its ``cql_alpha`` can change between phases)."""
        return cast(DiscreteCQLLearner, super().learn_mode)
