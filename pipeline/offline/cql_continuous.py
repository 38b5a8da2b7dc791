"""Continuous CQL (the CQL(H) variant) on SAC's learner, for actions in ``[-1, 1]``.

The critic's loss is SAC's plus, for each of the two Q-networks,
``cql_alpha * (logsumexp_a Q(s, a) - Q(s, a_data))``, the ``logsumexp`` over all actions estimated by
importance sampling from ``cql_n_actions`` uniform random actions (density ``2^-act_dim``) and as many
actions of the current policy at ``s`` and at ``s'`` (density ``pi(a|.)``):
``log (1 / 3N) sum_i exp(Q(s, a_i) - log density(a_i))``. The actor and the temperature are SAC's.
Config: :data:`CQL_CONTINUOUS_CONFIG` (SAC's plus ``cql_alpha`` and ``cql_n_actions``;
``compile_config(user, policy='cql_continuous')``).
"""
from __future__ import annotations

import copy
import math
from typing import Any, Dict, List, Mapping

import torch
from easydict import EasyDict

from ..config.schema import Float, Int, SchemaTree, Str, defaults, run_section
from ..policy.config_defaults import policy_config
from ..policy.sac import SACActor, SACLearner, SACPolicy, TwinQCritic
from ..config.policy_schemas import SAC_CONFIG

__all__ = ['ContinuousCQLLearner', 'ContinuousCQLPolicy', 'CQL_CONTINUOUS_CONFIG', 'CONFIG_SCHEMA',
           'check_config', 'cql_continuous_default_config']

CQL_CONTINUOUS_CONFIG: SchemaTree = copy.deepcopy(SAC_CONFIG)
CQL_CONTINUOUS_CONFIG.update(run_section('cql_continuous'))
CQL_CONTINUOUS_CONFIG['policy']['type'] = Str('cql_continuous')
CQL_CONTINUOUS_CONFIG['policy']['discount_factor'] = Float(0.99, min=0, max=1)
CQL_CONTINUOUS_CONFIG['policy']['learn']['batch_size'] = Int(256, min=1)
CQL_CONTINUOUS_CONFIG['policy']['learn']['target_theta'] = Float(0.005, gt=0, max=1)
CQL_CONTINUOUS_CONFIG['policy']['learn']['cql_alpha'] = Float(5.0, min=0)      # weight of the conservative term
CQL_CONTINUOUS_CONFIG['policy']['learn']['cql_n_actions'] = Int(10, min=1)     # sampled actions per kind and row
CQL_CONTINUOUS_CONFIG['policy']['eval']['evaluator']['eval_freq'] = Int(1000, min=1)

CONFIG_SCHEMA = CQL_CONTINUOUS_CONFIG


def cql_continuous_default_config() -> EasyDict:
    """The default continuous CQL config."""
    return EasyDict(defaults(CQL_CONTINUOUS_CONFIG))


def check_config(cfg: Mapping) -> List[str]:
    """Nothing beyond the schema to check."""
    return []


class ContinuousCQLLearner(SACLearner):
    """SAC's learner with the conservative term added to the critic's loss (see the module docstring).

    Extra outputs of the ``critic`` module: ``sac_loss`` (SAC's critic loss) and ``cql_loss`` (the
    conservative term of both Q-networks before the weight); its ``total_loss`` is
    ``sac_loss + cql_alpha * cql_loss``.
    """

    config_schema = CQL_CONTINUOUS_CONFIG

    def __init__(self, actor: SACActor, critic: TwinQCritic, cfg: Mapping) -> None:
        super().__init__(actor, critic, cfg)
        lc = policy_config(cfg, self.config_schema)['learn']
        self.cql_alpha = float(lc['cql_alpha'])
        self.cql_n_actions = int(lc['cql_n_actions'])

    def _penalty(self, obs: torch.Tensor, next_obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        b, d = action.shape
        n = self.cql_n_actions
        rep_obs = obs.repeat_interleave(n, 0)
        with torch.no_grad():
            rand = torch.empty(b * n, d, device=obs.device).uniform_(-1.0, 1.0)
            a_s, logp_s = self.actor.sample(rep_obs)
            a_n, logp_n = self.actor.sample(next_obs.repeat_interleave(n, 0))
        log_density = torch.cat([torch.full((b * n,), -d * math.log(2.0), device=obs.device), logp_s, logp_n])
        acts = torch.cat([rand, a_s, a_n])
        q1, q2 = self.critic(torch.cat([rep_obs, rep_obs, rep_obs]), acts)
        total = obs.new_zeros(())
        data_q1, data_q2 = self.critic(obs, action)
        for q, dq in ((q1, data_q1), (q2, data_q2)):
            w = (q - log_density).reshape(3, b, n).permute(1, 0, 2).reshape(b, 3 * n)
            total = total + (torch.logsumexp(w, dim=1) - math.log(3 * n) - dq).mean()
        return total

    def compute_losses(self, batch: Dict[str, Any], fwd_out: Dict[str, object]) -> Dict[str, Any]:
        out = super().compute_losses(batch, fwd_out)
        b = batch['critic']
        action = b['action'].float()
        if action.dim() == 1:
            action = action.unsqueeze(-1)
        penalty = self._penalty(b['obs'].float(), b['next_obs'].float(), action)
        critic = out['critic']
        critic['sac_loss'] = critic['total_loss'].detach()
        critic['cql_loss'] = penalty.detach()
        critic['total_loss'] = critic['total_loss'] + self.cql_alpha * penalty
        return out


class ContinuousCQLPolicy(SACPolicy):
    """:class:`pipeline.policy.sac.SACPolicy` whose learn mode is a :class:`ContinuousCQLLearner`
    (same arguments; a config from ``compile_config(user, policy='cql_continuous')``)."""

    config_schema = CQL_CONTINUOUS_CONFIG

    def _build_learner(self) -> ContinuousCQLLearner:
        return ContinuousCQLLearner(self.actor, self.critic, self.cfg)
