"""DQN: double-DQN targets, dueling head, n-step returns, hard/soft target updates, grad clipping.

``DQNPolicy`` bundles one Q-network and three modes:

- ``learn_mode``: a :class:`DQNLearner`, i.e. a ``pipeline.learner.Learner`` whose ``update``
  trains on a batch (a treetensor tree or a dict of tensors with ``obs``, ``action``, ``reward``,
  ``next_obs``, ``terminated`` and optionally ``truncated``, ``nstep``, ``weight``).
- ``collect_mode``: ``forward(obs, eps) -> actions`` (eps-greedy, vectorised over envs).
- ``eval_mode``: ``forward(obs) -> actions`` (greedy; a network with noisy layers acts on its mean
  weights, see :mod:`pipeline.policy.noisy`).

``state_dict()`` / ``load_state_dict()`` hold only tensors and plain numbers, so checkpoints load
with ``torch.load(..., weights_only=True)``.
"""
from __future__ import annotations

import contextlib
import copy
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from easydict import EasyDict

from ..device import DeviceLike, module_device, obs_tensor
from ..learner import Learner
from ..config.schema import defaults
from ..config.policy_schemas import DQN_CONFIG, OPTIMIZER_NAMES
from .base import ActingMode, Policy, optimizer_factory, optimizer_problems
from .config_defaults import policy_config
from .model import DQNModel
from .noisy import has_noise, noise_off

__all__ = ['DQNPolicy', 'DQNLearner', 'DQNCollectMode', 'DQNEvalMode', 'dqn_targets', 'DQN_CONFIG', 'CONFIG_SCHEMA',
           'dqn_default_config', 'check_config']

_OPTIMIZERS = OPTIMIZER_NAMES

CONFIG_SCHEMA = DQN_CONFIG


def dqn_default_config() -> EasyDict:
    """The default DQN config (from :data:`DQN_CONFIG`)."""
    return EasyDict(defaults(DQN_CONFIG))


def check_config(cfg: Mapping) -> List[str]:
    """What the schema cannot say: values that contradict each other, optimizer arguments."""
    errors = []
    lc = cfg['policy']['learn']
    if lc['target_update_type'] == 'soft' and lc['target_theta'] is None:
        errors.append('policy.learn.target_theta: a soft target update needs a theta in (0, 1], e.g. 0.005')
    errors.extend(optimizer_problems(lc['optimizer'], lc['learning_rate'], lc['optimizer_kwargs'], 'policy.learn'))
    return errors



def dqn_targets(reward: torch.Tensor, done: torch.Tensor, next_q_target: torch.Tensor,
                next_q_online: Optional[torch.Tensor], gamma: Any) -> torch.Tensor:
    """TD targets ``r + gamma * (1 - done) * Q_target(s', a*)``.

    ``a*`` is the argmax of ``next_q_online`` (double DQN) or of ``next_q_target`` when it is None.
    ``gamma`` is a float or a per-row tensor (``discount ** nstep`` for n-step returns).
    """
    sel = next_q_online if next_q_online is not None else next_q_target
    a_star = sel.argmax(dim=-1, keepdim=True)
    next_v = next_q_target.gather(1, a_star).squeeze(1)
    return reward + gamma * (1.0 - done) * next_v


class DQNLearner(Learner):
    """DQN's learn mode: a ``Learner`` with the DQN TD loss and a target network.

    Loss outputs per update: ``total_loss``, ``q_value`` (mean Q of the taken actions) and
    ``priority`` (``|TD error|`` per row, in ``last_outputs[module_id]['priority']``).
    The target net is updated in ``after_gradient_based_update``: hard (copy every
    ``target_update_freq`` updates) or soft (``theta``-lerp after every update).
    """

    #: where a config that lacks a key gets its value (see :mod:`pipeline.policy.config_defaults`)
    config_schema = DQN_CONFIG

    def __init__(self, model: nn.Module, cfg: Mapping) -> None:
        p = policy_config(cfg, self.config_schema)
        lc = p['learn']
        kwargs = dict(lr=lc['learning_rate'], grad_clip=lc['grad_clip'])
        kwargs['optimizer'] = optimizer_factory(lc['optimizer'], lc['optimizer_kwargs'])
        super().__init__({Learner.DEFAULT_MODULE_ID: model}, **kwargs)
        self.module_id = Learner.DEFAULT_MODULE_ID
        self.model = model
        self.target_model = copy.deepcopy(model)
        self.target_model.requires_grad_(False)
        self.gamma = float(p['discount_factor'])
        self.nstep = int(p['nstep'])
        self.double_dqn = bool(lc['double_dqn'])
        self.loss_type = lc['loss']
        self.truncation_as_terminal = bool(lc['truncation_as_terminal'])
        self.target_update_type = lc['target_update_type']
        self.target_update_freq = int(lc['target_update_freq'])
        self.target_theta = lc['target_theta']
        if self.target_update_type == 'soft' and not self.target_theta:
            raise ValueError('soft target update needs policy.learn.target_theta in (0, 1]')
        self.train_iter = 0  # number of update() calls (learner iterations)
        self._target_is_online = self.target_update_type == 'hard' and self.target_update_freq == 1
        self._online_params: List[torch.Tensor] = list(model.parameters())
        self._target_params: List[torch.Tensor] = list(self.target_model.parameters())

    # -- Learner hooks -------------------------------------------------------------
    def forward_train(self, module_id: str, batch: Any) -> torch.Tensor:
        return self.model(batch['obs'])

    def compute_loss_for_module(self, module_id: str, batch: Any, fwd_out: torch.Tensor) -> Dict[str, torch.Tensor]:
        action = batch['action']
        if action.dtype != torch.int64:
            action = action.long()
        if action.dim() == 1:
            action = action.unsqueeze(1)
        q_a = fwd_out.gather(1, action).squeeze(1)
        keys = batch.keys() if hasattr(batch, 'keys') else ()
        with torch.no_grad():
            next_obs = batch['next_obs']
            next_q_t = self.target_model(next_obs)
            # a hard copy after every update: the target net equals the online net here, and double
            # DQN's online forward pass would repeat this one
            next_q_o = None if not self.double_dqn or self._target_is_online else self.model(next_obs)
            done = batch['terminated']
            if self.truncation_as_terminal and 'truncated' in keys:
                done = done | batch['truncated']
            done = done.to(q_a.dtype)
            gamma: Union[float, torch.Tensor]
            if 'nstep' in keys:
                gamma = torch.pow(self.gamma, batch['nstep'].to(q_a.dtype))
            elif self.nstep > 1:
                raise ValueError(
                    f'policy.nstep={self.nstep} but the batch has no "nstep" column: add '
                    f'nstep_reward_enhancer(cfg) after the collector so transitions carry '
                    f'n-step returns')
            else:
                gamma = self.gamma
            reward = batch['reward']
            if reward.dtype != q_a.dtype:
                reward = reward.to(q_a.dtype)
            target = dqn_targets(reward, done, next_q_t, next_q_o, gamma)
        td = q_a - target
        if self.loss_type == 'huber':
            per_row = F.smooth_l1_loss(q_a, target, reduction='none')
        else:
            per_row = td.pow(2)
        if 'weight' in keys:
            loss = (per_row * batch['weight'].to(per_row.dtype)).mean()
        else:
            loss = per_row.mean()
        return {'total_loss': loss, 'q_value': q_a.detach().mean(), 'priority': td.detach().abs()}

    def after_gradient_based_update(self, timesteps: Any = None) -> None:
        super().after_gradient_based_update(timesteps)
        self.train_iter += 1
        if self.target_update_type == 'soft':
            with torch.no_grad():
                torch._foreach_lerp_(self._target_params, self._online_params, float(self.target_theta))
        elif self.train_iter % self.target_update_freq == 0:
            self.sync_target()

    def _device_moved(self) -> None:
        self._online_params = list(self.model.parameters())
        self._target_params = list(self.target_model.parameters())

    # -- DQN extras ------------------------------------------------------------------
    def sync_target(self) -> None:
        """Copy the online weights into the target network."""
        with torch.no_grad():
            torch._foreach_copy_(self._target_params, self._online_params)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        """The Q-network's optimizer."""
        return self.optimizers[self.module_id]

    def get_extra_state(self) -> Dict[str, object]:
        """Target net and DQN iteration counter (tensors and plain values only)."""
        return {'target_model': self.target_model.state_dict(), 'train_iter': int(self.train_iter)}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        if 'target_model' in state:
            self.target_model.load_state_dict(state['target_model'])
        if 'train_iter' in state:
            self.train_iter = int(state['train_iter'])


class DQNCollectMode(ActingMode):
    """Eps-greedy acting for a batch of envs: ``forward(obs [N, ...], eps) -> actions [N] int64``.

    Runs the online network under ``torch.no_grad`` with no tree conversions, and only for the envs
    whose eps draw says greedy (a step where every env explores runs no network); random actions
    come from a numpy generator seeded by ``seed`` (the same draws, in the same order, whatever
    the network outputs). The observations become one tensor on the network's device per step; the
    actions come back to the host as a numpy array. Noisy layers act with fresh noise on each call.

    With ``repeat_exponent`` (temporally-extended eps-greedy, "ez-greedy", Dabney et al. 2021), an env whose
    eps draw says "explore" takes a uniform random action and holds it for ``n`` steps, ``n`` drawn from a
    zeta distribution with that exponent (``P(n) ~ n^-exponent``, e.g. 2.0) and capped at ``repeat_max``;
    while it holds, it neither draws eps nor runs the network. ``hold`` is ``(steps left, action)`` per env
    (save it with ``rng`` to resume a run exactly). None: plain eps-greedy. With ``repeat_min_eps``, only
    steps whose eps is above it start holds; at or below it a random action lasts its one step (e.g. the
    schedule's final eps: ez-greedy while eps decays, eps-greedy after).
    """

    def __init__(self, model: nn.Module, action_shape: int, seed: Optional[int] = None, *,
                 repeat_exponent: Optional[float] = None, repeat_max: int = 100, repeat_min_eps: float = 0.0) -> None:
        if repeat_exponent is not None and not repeat_exponent > 1.0:
            raise ValueError(f'repeat_exponent must be > 1 (a zeta distribution), got {repeat_exponent!r}')
        if repeat_max < 1:
            raise ValueError(f'repeat_max must be >= 1, got {repeat_max!r}')
        if not 0.0 <= repeat_min_eps <= 1.0:
            raise ValueError(f'repeat_min_eps must be in [0, 1], got {repeat_min_eps!r}')
        self.model = model
        self.action_shape = int(action_shape)
        self.rng = np.random.default_rng(seed)
        self.repeat_exponent = repeat_exponent
        self.repeat_max = int(repeat_max)
        self.repeat_min_eps = float(repeat_min_eps)
        #: per env: steps the held random action still runs (0: none) and that action
        self.hold: Tuple[np.ndarray, np.ndarray] = (np.zeros(0, np.int64), np.zeros(0, np.int64))
        # where the model's first tensor is held: (a submodule's _parameters or _buffers dict, its key)
        self._probe: Optional[tuple] = None

    def _device(self) -> torch.device:
        """The model's device: that of its first parameter (or buffer), looked up where the module holds it
        (so a tensor that ``module.to()`` replaced is seen) instead of walking the module tree per call."""
        probe = self._probe
        if probe is not None:
            t = probe[0].get(probe[1])
            if t is not None:
                return t.device
        for kind in ('_parameters', '_buffers'):  # the tensor module_device reads: parameters first
            for m in self.model.modules():
                held = getattr(m, kind)
                for k, t in held.items():
                    if t is not None:
                        self._probe = (held, k)
                        return t.device
        return module_device(self.model)  # a model without tensors

    def forward(self, obs: object, eps: float = 0.0) -> np.ndarray:
        x = obs_tensor(obs, self._device())
        if self.repeat_exponent is not None:
            return self._forward_held(x, eps, self.repeat_exponent)
        if eps > 0.0:
            n = x.shape[0]
            explore = self.rng.random(n) < eps
            n_explore = int(np.count_nonzero(explore))
            if n_explore:
                act = self.rng.integers(0, self.action_shape, n)
                if n_explore < n:  # the network runs only for the envs that act greedily
                    rows = np.flatnonzero(~explore)
                    act[rows] = self._greedy(x.index_select(0, torch.from_numpy(rows).to(x.device)))  # no sync
                return act
        return self._greedy(x)

    def _forward_held(self, x: torch.Tensor, eps: float, exponent: float) -> np.ndarray:
        n = x.shape[0]
        left, held = self.hold
        if left.shape[0] != n:  # first call, or the number of envs changed: nothing held
            left, held = np.zeros(n, np.int64), np.zeros(n, np.int64)
        holding = left > 0
        act = held.copy()
        left = np.where(holding, left - 1, 0)
        free = np.flatnonzero(~holding)
        if eps > 0.0 and free.size:
            starts = free[self.rng.random(free.size) < eps]
            if starts.size:
                act[starts] = self.rng.integers(0, self.action_shape, starts.size)
                if eps > self.repeat_min_eps:  # zeta draws, capped; the first step is this one
                    left[starts] = np.minimum(self.rng.zipf(exponent, starts.size), self.repeat_max) - 1
                free = np.setdiff1d(free, starts, assume_unique=True)
        if free.size:
            idx = torch.from_numpy(free).to(x.device)
            act[free] = self._greedy(x if free.size == n else x.index_select(0, idx))
        self.hold = (left, act)
        return act

    def _greedy(self, x: torch.Tensor) -> np.ndarray:
        if x.dtype != torch.float32:
            x = x.float()
        with torch.no_grad():
            return self.model(x).argmax(dim=-1).cpu().numpy()

    __call__ = forward


class DQNEvalMode(ActingMode):
    """Greedy acting: ``forward(obs [N, ...]) -> actions [N] int64``. Noisy layers
    (:class:`~pipeline.policy.noisy.NoisyLinear`) act on their mean weights here, as in Rainbow's
    evaluation; the collect mode keeps their noise (it is the exploration)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self._noisy = has_noise(model)

    def forward(self, obs: object) -> np.ndarray:
        x = obs_tensor(obs, module_device(self.model))
        if x.dtype != torch.float32:
            x = x.float()
        with torch.no_grad(), (noise_off(self.model) if self._noisy else contextlib.nullcontext()):
            return self.model(x).argmax(dim=-1).cpu().numpy()

    __call__ = forward


class DQNPolicy(Policy[DQNLearner, DQNCollectMode, DQNEvalMode]):
    """DQN with its learn, collect and eval modes sharing one Q-network.

    Args:
        cfg: a full config from ``pipeline.config.compile_config`` or its ``policy`` section.
        model: a Q-network mapping ``[B, obs]`` to ``[B, actions]``; default ``DQNModel`` built
            from ``cfg.policy.model`` (``obs_shape`` and ``action_shape`` must then be set, or
            passed here).
        obs_shape, action_shape: override the model config's shapes.
        seed: seeds torch (model init) and the collect mode's exploration generator.
        device: where the Q-network (and the learner, its optimizer and batches) live; default
            ``policy.device`` (``'auto'``: the GPU when there is one; see :mod:`pipeline.device`).

    The learner (and its optimizer) is built on first access to ``learn_mode``, so collector or
    evaluator nodes never build one. ``state_dict()`` is ``{'model': ..., 'learn': ...}``. The collect
    mode's ``rng`` and held actions (``hold``) are the state a resumable run saves beside it.
    """

    config_schema = DQN_CONFIG

    def __init__(self, cfg: Mapping, model: Optional[nn.Module] = None, obs_shape: Any = None,
                 action_shape: Optional[int] = None, seed: Optional[int] = None, device: DeviceLike = None) -> None:
        super().__init__(cfg, device)
        mc = self.cfg['model']
        obs_shape = obs_shape if obs_shape is not None else mc['obs_shape']
        action_shape = action_shape if action_shape is not None else mc['action_shape']
        if seed is not None:
            torch.manual_seed(seed)
        if model is None:
            if obs_shape is None or action_shape is None:
                raise ValueError('DQNPolicy needs policy.model.obs_shape and policy.model.action_shape '
                                 '(or obs_shape=/action_shape= arguments, or a model=)')
            model = DQNModel(obs_shape, int(action_shape), mc['encoder_hidden_size_list'], dueling=mc['dueling'],
                             head_hidden_size=mc['head_hidden_size'], head_layer_num=mc['head_layer_num'],
                             layer_norm=mc['layer_norm'])
        elif action_shape is None:
            action_shape = getattr(model, 'action_shape', None)
            if action_shape is None:
                raise ValueError('pass action_shape= when giving a custom model')
        self.model = model
        self.action_shape = int(action_shape)
        self._seed = seed
        self._place_networks()

    def networks(self) -> Dict[str, nn.Module]:
        return {'model': self.model}

    def _build_learner(self) -> DQNLearner:
        return DQNLearner(self.model, self.cfg)

    def _build_collect_mode(self) -> DQNCollectMode:
        e = self.cfg['other']['eps']
        return DQNCollectMode(self.model, self.action_shape, self._seed, repeat_exponent=e['repeat_exponent'],
                              repeat_max=e['repeat_max'], repeat_min_eps=e['repeat_min_eps'])

    def _build_eval_mode(self) -> DQNEvalMode:
        return DQNEvalMode(self.model)
