"""Behaviour cloning: fit the dataset's actions by supervised learning.

Discrete actions: an MLP gives logits and the loss is the cross-entropy with the dataset's action;
the eval mode takes the argmax. Continuous actions (in ``[-1, 1]``): an MLP with a ``tanh`` output
and the mean squared error to the dataset's action; the eval mode returns that output.
Config: :data:`BC_CONFIG` (``compile_config(user, policy='bc')``).
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import numpy as np
import torch
import torch.nn.functional as F
from easydict import EasyDict
from torch import nn

from ..config.schema import defaults
from ..device import DeviceLike, module_device, obs_tensor
from ..learner import Learner
from ..policy.base import ActingMode, Policy
from ..policy.config_defaults import policy_config
from ..policy.model import mlp
from .schemas import BC_CONFIG

__all__ = ['BCModel', 'BCLearner', 'BCPolicy', 'BC_CONFIG', 'CONFIG_SCHEMA', 'bc_default_config', 'check_config']

CONFIG_SCHEMA = BC_CONFIG


def bc_default_config() -> EasyDict:
    """The default BC config (from :data:`BC_CONFIG`)."""
    return EasyDict(defaults(BC_CONFIG))


def check_config(cfg: Mapping) -> List[str]:
    """Nothing beyond the schema to check."""
    return []


class BCModel(nn.Module):
    """``obs [B, obs_dim] -> logits [B, n]`` (discrete) or ``tanh`` actions ``[B, act_dim]`` (continuous)."""

    def __init__(self, obs_dim: int, out_dim: int, discrete: bool, hidden: Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.discrete = discrete
        self.out_dim = out_dim
        self.net = nn.Sequential(mlp([obs_dim, *hidden]), nn.Linear(hidden[-1], out_dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        out = self.net(obs.flatten(1) if obs.dim() > 2 else obs)
        return out if self.discrete else torch.tanh(out)


class BCLearner(Learner):
    """BC's learn mode: one module (the :class:`BCModel`); loss ``total_loss`` (cross-entropy or MSE)
    plus ``accuracy`` (discrete: share of rows whose argmax is the dataset's action)."""

    #: where a config that lacks a key gets its value (see :mod:`pipeline.policy.config_defaults`)
    config_schema = BC_CONFIG

    def __init__(self, model: BCModel, cfg: Mapping) -> None:
        lc = policy_config(cfg, self.config_schema)['learn']
        super().__init__(model, lr=float(lc['learning_rate']), grad_clip=lc['grad_clip'])
        self.model = model

    def forward_train(self, module_id: str, batch: Any) -> torch.Tensor:
        obs = batch['obs']
        return self.model(obs if obs.dtype == torch.float32 else obs.float())

    def compute_loss_for_module(self, module_id: str, batch: Any, fwd_out: torch.Tensor) -> Dict[str, torch.Tensor]:
        action = batch['action']
        if self.model.discrete:
            action = action.long().reshape(-1)
            loss = F.cross_entropy(fwd_out, action)
            acc = (fwd_out.detach().argmax(-1) == action).float().mean()
            return {'total_loss': loss, 'accuracy': acc}
        action = action.float().reshape(fwd_out.shape)
        return {'total_loss': (fwd_out - action).pow(2).sum(-1).mean()}


class BCEvalMode(ActingMode):
    """Greedy actions: argmax of the logits (int64 ``[N]``) or the ``tanh`` output (float32 ``[N, act_dim]``)."""

    def __init__(self, model: BCModel) -> None:
        self.model = model

    def forward(self, obs: object, **_: object) -> np.ndarray:
        with torch.no_grad():
            out = self.model(obs_tensor(obs, module_device(self.model), torch.float32))
        return out.argmax(-1).cpu().numpy() if self.model.discrete else out.cpu().numpy()

    __call__ = forward


class BCPolicy(Policy[BCLearner, BCEvalMode, BCEvalMode]):
    """Behaviour cloning with a learn mode and an eval mode (the collect mode is the eval mode).

    Args:
        cfg: a config from ``compile_config(user, policy='bc')`` or its ``policy`` section.
        obs_shape, action_shape: override ``policy.model`` (flat sizes; ``action_shape`` is the
            number of actions for discrete actions, the action dimensions for continuous ones).
        seed: seeds torch (network init).
        device: where the network (and the learner) live; default ``policy.device`` (:mod:`pipeline.device`).
    """

    config_schema = BC_CONFIG

    def __init__(self, cfg: Mapping, obs_shape: Union[int, Sequence[int], None] = None,
                 action_shape: Union[int, Sequence[int], None] = None,
                 seed: Optional[int] = None, device: DeviceLike = None) -> None:
        super().__init__(cfg, device)
        mc = self.cfg['model']
        obs_dim, act_dim = self._flat_sizes(obs_shape, action_shape)
        if seed is not None:
            torch.manual_seed(seed)
        self.model = BCModel(obs_dim, act_dim, mc['action_type'] == 'discrete', mc['hidden_size_list'])
        self._place_networks()

    def networks(self) -> Dict[str, nn.Module]:
        return {'model': self.model}

    def _build_learner(self) -> BCLearner:
        return BCLearner(self.model, self.cfg)

    def _build_collect_mode(self) -> BCEvalMode:
        return BCEvalMode(self.model)

    def _build_eval_mode(self) -> BCEvalMode:
        return BCEvalMode(self.model)
