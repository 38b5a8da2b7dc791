"""PPO: clipped surrogate, optional value clipping, entropy bonus, schedules, KL early stop.

``PPOPolicy`` bundles one :class:`~pipeline.policy.ppo_model.ActorCritic` and three modes:

- ``learn_mode``: a :class:`PPOLearner` (a ``pipeline.learner.Learner``); one
  ``update(batch=..., minibatch_size=m, num_epochs=k, shuffle_batch_per_epoch=True)`` per rollout,
  on a flat batch with ``obs``, ``action``, ``logp``, ``value``, ``advantage``, ``return``.
- ``collect_mode``: ``forward(obs [N, ...]) -> dict(env_action, action, logp, value)`` (sampled;
  continuous actions clipped for the env, log-probs of the unclipped sample) and ``value(obs)``.
- ``eval_mode``: ``forward(obs) -> actions`` (argmax, or the clipped Gaussian mean).

Config: :data:`PPO_CONFIG` (defaults, types, ranges: the RL-Zoo CartPole-v1 settings);
``make_ppo_config(user)`` = ``compile_config(user, policy='ppo')`` merges and checks overrides. ``state_dict()`` holds tensors and plain values only (``weights_only`` loads).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional, Union

import numpy as np
import torch
from easydict import EasyDict

from pipeline.config import compile_config
from pipeline.config.schema import defaults
from pipeline.device import DeviceLike, module_device, to_host
from pipeline.config.policy_schemas import PPO_CONFIG
from pipeline.learner import Learner

from .base import ActingMode, Policy, optimizer_factory
from .config_defaults import policy_config
from .ppo_model import ACTIVATIONS, ActorCritic, ActorCriticModel, logp_entropy, sample

__all__ = ['PPOPolicy', 'PPOLearner', 'PPOCollectMode', 'PPOEvalMode', 'ppo_loss', 'ppo_default_config',
           'make_ppo_config', 'linear_schedule', 'sampling_seed', 'PPO_CONFIG', 'CONFIG_SCHEMA']


CONFIG_SCHEMA = PPO_CONFIG


def ppo_default_config() -> EasyDict:
    """The default PPO config (from :data:`PPO_CONFIG`)."""
    return EasyDict(defaults(PPO_CONFIG))


def make_ppo_config(user: Optional[Mapping] = None) -> EasyDict:
    """``compile_config(user, policy='ppo')``: the defaults merged with ``user``, every value checked."""
    return compile_config(user, policy='ppo')


def linear_schedule(start: float, total: int) -> Callable[[float], float]:
    """``t -> start * max(0, 1 - t / total)`` (Stable-Baselines3's linear schedule, floored at 0)."""
    return lambda t: start * max(0.0, 1.0 - float(t) / total)


def ppo_loss(pi_out: torch.Tensor, value: torch.Tensor, batch: Mapping[str, torch.Tensor],
             log_std: Optional[torch.Tensor], clip_range: float, clip_range_vf: Optional[float] = None,
             vf_coef: float = 0.5, ent_coef: float = 0.0, normalize_advantage: bool = True
             ) -> Dict[str, torch.Tensor]:
    """PPO's loss on one minibatch, with metrics (Stable-Baselines3's formulation).

    ``total = -mean(min(r A, clip(r, 1-c, 1+c) A)) + vf_coef * value_loss - ent_coef * mean(entropy)``
    with ``r = exp(logp - batch.logp)``, ``A`` the advantages (normalised over the minibatch when
    ``normalize_advantage``); ``value_loss = mean((V - R)^2)`` or, with ``clip_range_vf``,
    ``mean(max((V - R)^2, (V_old + clip(V - V_old, -cv, cv) - R)^2))``.
    Metrics: ``policy_loss``, ``value_loss``, ``entropy``, ``approx_kl`` (``mean((r - 1) - log r)``)
    and ``clip_fraction`` (share of rows with ``|r - 1| > c``).
    """
    logp, entropy = logp_entropy(pi_out, batch['action'], log_std)
    adv = batch['advantage']
    if normalize_advantage and adv.shape[0] > 1:
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    log_ratio = logp - batch['logp']
    ratio = log_ratio.exp()
    pg_loss = -torch.min(ratio * adv, ratio.clamp(1.0 - clip_range, 1.0 + clip_range) * adv).mean()
    ret = batch['return']
    v_err = (value - ret).pow(2)
    if clip_range_vf is not None:
        old_v = batch['value']
        v_clipped = old_v + (value - old_v).clamp(-clip_range_vf, clip_range_vf)
        v_err = torch.max(v_err, (v_clipped - ret).pow(2))
    value_loss = v_err.mean()
    ent = entropy.mean()
    total = pg_loss + vf_coef * value_loss - ent_coef * ent
    with torch.no_grad():
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_range).float().mean()
    return {'total_loss': total, 'policy_loss': pg_loss.detach(), 'value_loss': value_loss.detach(),
            'entropy': ent.detach(), 'approx_kl': approx_kl, 'clip_fraction': clip_fraction}


class PPOLearner(Learner):
    """PPO's learn mode. ``update(batch, minibatch_size, num_epochs, shuffle_batch_per_epoch=True,
    timesteps=env_steps)`` once per rollout; the lr and clip-range schedules are evaluated at
    ``timesteps`` (env steps sampled so far). With ``target_kl`` set, a minibatch whose approx-KL
    exceeds ``1.5 * target_kl`` takes no step and ends the call (metric ``kl_early_stop``)."""

    #: where a config that lacks a key gets its value (see :mod:`pipeline.policy.config_defaults`)
    config_schema = PPO_CONFIG

    def __init__(self, model: ActorCriticModel, cfg: Mapping, seed: Optional[int] = None) -> None:
        lc = policy_config(cfg, self.config_schema)['learn']
        total = int(lc['total_env_steps'])
        lr = float(lc['learning_rate'])
        eps = float(lc['adam_eps'])
        super().__init__(
            {Learner.DEFAULT_MODULE_ID: model}, lr=lr, grad_clip=lc['max_grad_norm'], seed=seed,
            lr_schedule=linear_schedule(lr, total) if lc['lr_schedule'] == 'linear' else None,
            optimizer=optimizer_factory('adam', {'eps': eps}))
        self.model = model
        self.clip_start = float(lc['clip_range'])
        self.clip_schedule = (linear_schedule(self.clip_start, total)
                              if lc['clip_schedule'] == 'linear' else (lambda t: self.clip_start))
        self.clip_range = self.clip_start
        self.clip_range_vf = lc['clip_range_vf']
        self.vf_coef = float(lc['vf_coef'])
        self.ent_coef = float(lc['ent_coef'])
        self.normalize_advantage = bool(lc['normalize_advantage'])
        self.target_kl = lc['target_kl']
        self.kl_stops = 0  # update calls ended early by the KL limit

    def before_gradient_based_update(self, timesteps: Dict[str, Any]) -> None:
        t = timesteps.get('num_env_steps_sampled_lifetime', self.num_env_steps_trained_lifetime)
        # floored so that a clip range never reaches 0 (SB3's schedule reaches 0 at the very end)
        self.clip_range = max(float(self.clip_schedule(int(t))), 1e-8)

    def forward_train(self, module_id: str, batch: Any) -> object:
        return self.model(batch['obs'])

    def compute_loss_for_module(self, module_id: str, batch: Any,
                                fwd_out: Any) -> Dict[str, Union[torch.Tensor, float]]:
        pi_out, value = fwd_out
        out: Dict[str, Union[torch.Tensor, float]] = {**ppo_loss(pi_out, value, batch, getattr(self.model, 'log_std', None), self.clip_range,
                       self.clip_range_vf, self.vf_coef, self.ent_coef, self.normalize_advantage)}
        out['clip_range'] = self.clip_range
        if self.target_kl is not None and float(out['approx_kl']) > 1.5 * self.target_kl:
            self.kl_stops += 1
            out['kl_early_stop'] = 1.0
            self.stop_update()
        return out

    def get_extra_state(self) -> Dict[str, object]:
        return {'kl_stops': int(self.kl_stops)}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        self.kl_stops = int(state.get('kl_stops', 0))


def sampling_seed(seed: Optional[int]) -> Optional[int]:
    """The seed of the collect mode's action sampler: a stream independent of ``torch.manual_seed(seed)``.

    Seeding the sampler with ``seed`` itself replays the random numbers that initialised the weights
    as the first actions' noise; on CartPole-v1 that doubled the median env steps to solve (8
    seeds: ~20k against ~10k for Stable-Baselines3, which samples from the global stream)."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed), 0x5A3]).generate_state(1, dtype=np.uint64)[0] >> 1)


def _as_float_obs(obs: object, device: Optional[torch.device] = None) -> torch.Tensor:
    x = torch.as_tensor(obs, device=device)
    return x if x.dtype == torch.float32 else x.float()


class PPOCollectMode(ActingMode):
    """Sample actions for a batch of envs: ``forward(obs) -> {'env_action', 'action', 'logp', 'value'}``
    (numpy). ``env_action`` is ``action`` clipped to ``[low, high]`` for continuous spaces. It acts on the
    model's device; with a ``seed`` the samples come from a generator on that device seeded with it."""

    def __init__(self, model: ActorCriticModel, low: object = None, high: object = None, seed: Optional[int] = None) -> None:
        self.model = model
        self.continuous = model.continuous
        self.low = None if low is None else np.asarray(low, dtype=np.float32)
        self.high = None if high is None else np.asarray(high, dtype=np.float32)
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed) if seed is not None else None

    def _generator_on(self, device: torch.device) -> Optional[torch.Generator]:
        """The sampler's generator on ``device`` (made, seeded with ``seed``, when the model moved there)."""
        g, seed = self.generator, self.seed
        if g is not None and g.device != device and seed is not None:  # (a generator has a seed)
            g = self.generator = torch.Generator(device=device).manual_seed(seed)
        return g

    def forward(self, obs: object) -> Dict[str, np.ndarray]:
        dev = module_device(self.model)
        with torch.no_grad():
            pi_out, value = self.model(_as_float_obs(obs, dev))
            action, logp = sample(pi_out, self.model.log_std if self.continuous else None, self._generator_on(dev))
        if dev.type != 'cpu':  # the outputs back to the host, once per step
            action, logp, value = to_host((action, logp, value))
        a = action.numpy()
        env_a = np.clip(a, self.low, self.high) if self.continuous and self.low is not None else a
        return {'env_action': env_a, 'action': a, 'logp': logp.numpy(), 'value': value.numpy()}

    def value(self, obs: object) -> np.ndarray:
        """Critic values ``[N]`` of observations ``[N, ...]``."""
        with torch.no_grad():
            return self.model.value(_as_float_obs(obs, module_device(self.model))).cpu().numpy()


class PPOEvalMode(ActingMode):
    """Deterministic acting: ``forward(obs) -> actions`` (argmax, or the Gaussian mean clipped)."""

    def __init__(self, model: ActorCriticModel, low: Optional[np.ndarray] = None, high: Optional[np.ndarray] = None) -> None:
        self.model, self.low, self.high = model, low, high

    def forward(self, obs: object) -> np.ndarray:
        with torch.no_grad():
            out = self.model.policy_out(_as_float_obs(obs, module_device(self.model)))
        if self.model.continuous:
            a = out.cpu().numpy()
            return np.clip(a, self.low, self.high) if self.low is not None else a
        return out.argmax(-1).cpu().numpy()


class PPOPolicy(Policy[PPOLearner, PPOCollectMode, PPOEvalMode]):
    """PPO with learn, collect and eval modes sharing one actor-critic (built on first use).

    Args:
        cfg: a config from :func:`make_ppo_config` (or its ``policy`` section).
        observation_space, action_space: gymnasium spaces (``Discrete`` or ``Box`` actions); they
            size the default model and give the clipping bounds of continuous actions.
        model: an ``ActorCriticModel`` (``pipeline.policy.ppo_model``) to use instead of the default
            ``ActorCritic`` (e.g. ``conv.AtariActorCritic``).
        seed: seeds torch (model init), the action sampler and the minibatch shuffling.
        device: where the model (and the learner, its optimizer and batches) live; default
            ``policy.device`` (see :mod:`pipeline.device`).
    """

    config_schema = PPO_CONFIG

    def __init__(self, cfg: Mapping, observation_space: Any, action_space: Any,
                 model: Optional[ActorCriticModel] = None, seed: Optional[int] = None, device: DeviceLike = None) -> None:
        super().__init__(cfg, device)
        mc = self.cfg['model']
        continuous = not hasattr(action_space, 'n')
        if continuous and len(action_space.shape) != 1:
            raise ValueError(f'PPOPolicy supports Discrete or 1-D Box action spaces, got {action_space}')
        self.low = action_space.low if continuous else None
        self.high = action_space.high if continuous else None
        if seed is not None:
            torch.manual_seed(seed)
        if model is None:
            model = ActorCritic(int(np.prod(observation_space.shape)),
                                int(action_space.shape[0]) if continuous else int(action_space.n),
                                continuous=continuous, hidden=tuple(mc['hidden']),
                                log_std_init=float(mc['log_std_init']),
                                normalize_obs=bool(mc['normalize_obs']),
                                activation=ACTIVATIONS[mc['activation']],
                                ortho_init=bool(mc['ortho_init']))
        self.model = model
        self._seed = seed
        self._place_networks()

    def networks(self) -> Dict[str, torch.nn.Module]:
        """``{'model': actor-critic}``; its state holds the running obs/return statistics too."""
        return {'model': self.model}

    def _build_learner(self) -> PPOLearner:
        return PPOLearner(self.model, self.cfg, seed=self._seed)

    def _build_collect_mode(self) -> PPOCollectMode:
        return PPOCollectMode(self.model, self.low, self.high, seed=sampling_seed(self._seed))

    def _build_eval_mode(self) -> PPOEvalMode:
        return PPOEvalMode(self.model, self.low, self.high)
