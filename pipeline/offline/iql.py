"""IQL (implicit Q-learning) for continuous actions in ``[-1, 1]``.

Three modules, each trained by its own loss on the same minibatch:

- ``value`` ``V(s)``: expectile regression (``tau = policy.learn.expectile``) towards ``min(Q1, Q2)``
  of the target critic at the dataset's action: ``|tau - 1(u < 0)| * u^2`` with ``u = Q - V``;
- ``critic`` (twin Q): MSE to ``r + gamma * (1 - terminated) * V(s')`` -- no action is sampled, so
  no value of an action outside the dataset is ever queried;
- ``actor``: advantage-weighted regression, ``-exp(beta * (Q - V))`` (clipped to ``max_weight``)
  times the log-likelihood of the dataset's action under a Gaussian with mean ``tanh(mu(s))`` and a
  learned state-independent standard deviation.

The target critic follows the critic by a ``target_theta`` lerp after every update. The eval mode
returns ``tanh(mu(s))``. Config: :data:`IQL_CONFIG` (``compile_config(user, policy='iql')``).
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..config.schema import defaults
from ..device import DeviceLike, module_device, obs_tensor
from ..learner import Learner
from ..learner.target import SoftTarget
from ..policy.base import ActingMode, Policy
from ..policy.config_defaults import policy_config
from ..policy.model import mlp
from ..policy.sac import TwinQCritic
from .schemas import IQL_CONFIG

__all__ = ['IQLActor', 'ValueNet', 'IQLLearner', 'IQLPolicy', 'expectile_loss', 'IQL_CONFIG', 'CONFIG_SCHEMA',
           'iql_default_config', 'check_config']

CONFIG_SCHEMA = IQL_CONFIG


def iql_default_config() -> EasyDict:
    """The default IQL config (from :data:`IQL_CONFIG`)."""
    return EasyDict(defaults(IQL_CONFIG))


def check_config(cfg: Mapping) -> List[str]:
    """Nothing beyond the schema to check."""
    return []


def expectile_loss(diff: torch.Tensor, tau: float) -> torch.Tensor:
    """Per row ``|tau - 1(diff < 0)| * diff^2`` (``diff = target - prediction``)."""
    weight = torch.where(diff < 0, 1.0 - tau, tau)
    return weight * diff.pow(2)


class IQLActor(nn.Module):
    """Gaussian policy ``N(tanh(mu(s)), exp(log_std))`` with a state-independent ``log_std``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.net = nn.Sequential(mlp([obs_dim, *hidden]), nn.Linear(hidden[-1], act_dim))
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.act_dim = act_dim

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """The mean action ``tanh(mu(s))`` ``[B, act_dim]``."""
        return torch.tanh(self.net(obs))

    def log_prob(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``log N(action; tanh(mu(s)), std)`` summed over action dims, ``[B]``."""
        mean = self(obs)
        log_std = self.log_std.clamp(-5.0, 2.0)
        z = (action - mean) / log_std.exp()
        return (-0.5 * z.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)


class ValueNet(nn.Module):
    """``V(s)`` ``[B]``."""

    def __init__(self, obs_dim: int, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.net = nn.Sequential(mlp([obs_dim, *hidden]), nn.Linear(hidden[-1], 1))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)


class IQLLearner(Learner):
    """IQL's learn mode: modules ``actor``, ``critic``, ``value`` (one optimizer each; see the module
    docstring). Outputs ``total_loss`` per module plus ``q_value``, ``v_value`` and ``adv_weight``
    (the mean advantage weight)."""

    #: where a config that lacks a key gets its value (see :mod:`pipeline.policy.config_defaults`)
    config_schema = IQL_CONFIG

    def __init__(self, actor: IQLActor, critic: TwinQCritic, value: ValueNet, cfg: Mapping) -> None:
        p = policy_config(cfg, self.config_schema)
        lc = p['learn']
        lrs = {'actor': lc['learning_rate_actor'], 'critic': lc['learning_rate_critic'],
               'value': lc['learning_rate_value']}
        super().__init__({'actor': actor, 'critic': critic, 'value': value}, lr=lrs, grad_clip=lc['grad_clip'],
                         shared_batch=True)
        self.actor, self.critic, self.value = actor, critic, value
        self.soft_target = SoftTarget(critic, float(lc['target_theta']))
        self.target_critic = self.soft_target.module
        self.gamma = float(p['discount_factor'])
        self.tau = float(lc['expectile'])
        self.beta = float(lc['beta'])
        self.max_weight = float(lc['max_weight'])
        self.truncation_as_terminal = bool(lc['truncation_as_terminal'])
        self.train_iter = 0

    def forward_train(self, module_id: str, batch: object) -> object:
        return None  # the losses share forward passes: everything happens in compute_losses

    def compute_losses(self, batch: Dict[str, Any], fwd_out: Mapping[str, object]) -> Dict[str, Any]:
        b = batch['critic']
        obs, next_obs = b['obs'].float(), b['next_obs'].float()
        action = b['action'].float()
        if action.dim() == 1:
            action = action.unsqueeze(-1)
        reward = b['reward'].float()
        done = b['terminated']
        if self.truncation_as_terminal:
            done = done | b['truncated']
        done = done.float()
        with torch.no_grad():
            tq1, tq2 = self.target_critic(obs, action)
            q_t = torch.min(tq1, tq2)
            next_v = self.value(next_obs)
            target = reward + self.gamma * (1.0 - done) * next_v
        v = self.value(obs)
        value_loss = expectile_loss(q_t - v, self.tau).mean()
        q1, q2 = self.critic(obs, action)
        critic_loss = ((q1 - target).pow(2) + (q2 - target).pow(2)).mean()
        with torch.no_grad():
            weight = torch.exp(self.beta * (q_t - v.detach())).clamp(max=self.max_weight)
        actor_loss = -(weight * self.actor.log_prob(obs, action)).mean()
        return {
            'value': {'total_loss': value_loss, 'v_value': v.detach().mean()},
            'critic': {'total_loss': critic_loss, 'q_value': q1.detach().mean()},
            'actor': {'total_loss': actor_loss, 'adv_weight': weight.mean()},
        }

    def after_gradient_based_update(self, timesteps: Any = None) -> None:
        super().after_gradient_based_update(timesteps)
        self.train_iter += 1
        self.soft_target.update()

    def _device_moved(self) -> None:
        self.soft_target.refresh()

    def get_extra_state(self) -> Dict[str, object]:
        return {'target_critic': self.target_critic.state_dict(), 'train_iter': int(self.train_iter)}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        if 'target_critic' in state:
            self.target_critic.load_state_dict(state['target_critic'])
        if 'train_iter' in state:
            self.train_iter = int(state['train_iter'])


class IQLEvalMode(ActingMode):
    """Deterministic actions ``tanh(mu(s))`` (float32 ``[N, act_dim]``)."""

    def __init__(self, actor: IQLActor) -> None:
        self.actor = actor

    def forward(self, obs: object, **_: object) -> np.ndarray:
        with torch.no_grad():
            return self.actor(obs_tensor(obs, module_device(self.actor), torch.float32)).cpu().numpy()

    __call__ = forward


class IQLPolicy(Policy[IQLLearner, IQLEvalMode, IQLEvalMode]):
    """IQL with a learn mode and an eval mode (the collect mode is the eval mode).

    Args:
        cfg: a config from ``compile_config(user, policy='iql')`` or its ``policy`` section.
        obs_shape, action_shape: override ``policy.model`` (flat sizes).
        seed: seeds torch (network init).
        device: where the networks (and the learner) live; default ``policy.device`` (:mod:`pipeline.device`).

    ``state_dict()`` is ``{'actor': ..., 'critic': ..., 'value': ..., 'learn': ...}``.
    """

    config_schema = IQL_CONFIG

    def __init__(self, cfg: Mapping, obs_shape: Union[int, Sequence[int], None] = None,
                 action_shape: Union[int, Sequence[int], None] = None,
                 seed: Optional[int] = None, device: DeviceLike = None) -> None:
        super().__init__(cfg, device)
        mc = self.cfg['model']
        obs_dim, act_dim = self._flat_sizes(obs_shape, action_shape)
        if seed is not None:
            torch.manual_seed(seed)
        hidden_a = mc['actor_hidden_size_list']
        hidden_c = mc['critic_hidden_size_list']
        self.actor = IQLActor(obs_dim, act_dim, hidden_a)
        self.critic = TwinQCritic(obs_dim, act_dim, hidden_c)
        self.value = ValueNet(obs_dim, hidden_c)
        self._place_networks()

    def networks(self) -> Dict[str, nn.Module]:
        return {'actor': self.actor, 'critic': self.critic, 'value': self.value}

    def _build_learner(self) -> IQLLearner:
        return IQLLearner(self.actor, self.critic, self.value, self.cfg)

    def _build_collect_mode(self) -> IQLEvalMode:
        return IQLEvalMode(self.actor)

    def _build_eval_mode(self) -> IQLEvalMode:
        return IQLEvalMode(self.actor)
