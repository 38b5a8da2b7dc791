"""SAC (soft actor-critic) for continuous actions, on ``pipeline.learner.Learner``.

``SACPolicy`` bundles a squashed-Gaussian actor, a twin Q critic (with a soft-updated target copy)
and a learned temperature, with three modes:

- ``learn_mode``: a :class:`SACLearner` (a ``Learner`` with modules ``actor``, ``critic`` and
  ``alpha``); ``update(batch=...)`` takes one batch (tree or dict of tensors with ``obs``,
  ``action``, ``reward``, ``next_obs``, ``terminated``, optional ``truncated``/``weight``) and
  trains all three modules on it. Each module only receives gradients from its own loss.
- ``collect_mode``: ``forward(obs [N, ...], **ignored) -> actions [N, act_dim]`` sampled from the
  policy (uniform random for the first ``random_collect_size`` actions).
- ``eval_mode``: ``forward(obs) -> actions``, deterministic (``tanh`` of the mean).

Actions live in ``[-1, 1]^act_dim`` (scale them in the env if needed).
Config: :data:`SAC_CONFIG` (defaults, types, ranges), checked by ``pipeline.config.compile_config(user, policy='sac')``.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
from easydict import EasyDict
from torch import nn

from ..config.schema import defaults
from ..device import DeviceLike, module_device, obs_tensor, place_module
from ..config.policy_schemas import SAC_CONFIG
from ..learner import Learner
from ..learner.target import SoftTarget
from .base import ActingMode, Policy
from .config_defaults import policy_config
from .model import mlp

__all__ = ["SACPolicy", "SACLearner", "SACActor", "TwinQCritic", "SAC_CONFIG", "CONFIG_SCHEMA", "sac_default_config"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
#: added inside the log of the tanh correction, ``log(1 - tanh(u)^2 + TANH_EPS)``
TANH_EPS = 1e-6


CONFIG_SCHEMA = SAC_CONFIG


def sac_default_config() -> EasyDict:
    """The default SAC config (from :data:`SAC_CONFIG`); check overrides with
    ``pipeline.config.compile_config(user, policy='sac')``."""
    return EasyDict(defaults(SAC_CONFIG))


class SACActor(nn.Module):
    """Squashed Gaussian policy: ``obs -> (mean, log_std)``; actions ``tanh(N(mean, std))``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (128, 128)) -> None:
        super().__init__()
        self.body = mlp([obs_dim, *hidden])
        self.mu = nn.Linear(hidden[-1], act_dim)
        self.log_std = nn.Linear(hidden[-1], act_dim)
        self.act_dim = act_dim

    def forward(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        h = self.body(obs)
        return self.mu(h), self.log_std(h).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised ``(action, log_prob)`` with the tanh change of variables,
        ``log pi(a) = log N(u) - sum log(1 - tanh(u)^2 + TANH_EPS)`` (SB3's and CleanRL's form: the epsilon
        bounds the correction of saturated actions)."""
        mu, log_std = self(obs)
        std = log_std.exp()
        noise = torch.randn_like(mu)
        u = mu + std * noise
        a = torch.tanh(u)
        logp = (-0.5 * noise.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - torch.log(1.0 - a.pow(2) + TANH_EPS).sum(-1)
        return a, logp

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


class TwinQCritic(nn.Module):
    """Two Q networks ``(obs, action) -> Q``; ``forward`` returns both, ``[B]`` each."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: Sequence[int] = (128, 128)) -> None:
        super().__init__()
        self.q1 = nn.Sequential(mlp([obs_dim + act_dim, *hidden]), nn.Linear(hidden[-1], 1))
        self.q2 = nn.Sequential(mlp([obs_dim + act_dim, *hidden]), nn.Linear(hidden[-1], 1))

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = torch.cat([obs, action], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)


class _LogAlpha(nn.Module):
    def __init__(self, init_alpha: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha), dtype=torch.float32))


class SACLearner(Learner):
    """SAC's learn mode: modules ``actor``, ``critic``, ``alpha``, one optimizer each.

    Per minibatch, in SB3's order: the critic loss (MSE to ``r + gamma (1 - terminated) (min Q_targ(s', a')
    - alpha log pi(a'|s'))``) and the temperature loss (``-log_alpha (log pi + target_entropy)``, when
    ``auto_alpha``) step first, both with the temperature from before the step; then the actor loss
    (``alpha log pi - min Q``, the critic's weights held fixed) is computed against the critic that just
    stepped, and the actor steps. Then a soft target update with ``target_theta``. Outputs ``total_loss`` per module plus
    ``q_value``, ``entropy`` (``-log pi``) and ``alpha``.
    """

    #: where a config that lacks a key gets its value (see :mod:`pipeline.policy.config_defaults`)
    config_schema = SAC_CONFIG

    def __init__(self, actor: SACActor, critic: TwinQCritic, cfg: Mapping) -> None:
        p = policy_config(cfg, self.config_schema)
        lc = p["learn"]
        self.auto_alpha = bool(lc["auto_alpha"])
        alpha_mod = place_module(_LogAlpha(float(lc["init_alpha"])), module_device(actor))
        modules = {"actor": actor, "critic": critic}
        lrs = {"actor": lc["learning_rate_actor"], "critic": lc["learning_rate_critic"]}
        if self.auto_alpha:
            modules["alpha"] = alpha_mod
            lrs["alpha"] = lc["learning_rate_alpha"]
        super().__init__(modules, lr=lrs, grad_clip=lc["grad_clip"], shared_batch=True)
        self.actor, self.critic, self.alpha_mod = actor, critic, alpha_mod
        self.soft_target = SoftTarget(critic, float(lc["target_theta"]))
        self.target_critic = self.soft_target.module
        self.gamma = float(p["discount_factor"])
        te = lc["target_entropy"]
        self.target_entropy = float(-actor.act_dim if te is None else te)
        self.truncation_as_terminal = bool(lc["truncation_as_terminal"])
        self.train_iter = 0

    @property
    def alpha(self) -> torch.Tensor:
        return self.alpha_mod.log_alpha.detach().exp()

    def forward_train(self, module_id: str, batch: Any) -> Any:
        return None  # everything happens in compute_losses (the losses share forward passes)

    def compute_losses(self, batch: Dict[str, Any], fwd_out: Dict[str, Any]) -> Dict[str, Any]:
        b = batch["critic"]
        keys = b.keys() if hasattr(b, "keys") else ()
        obs, next_obs = b["obs"].float(), b["next_obs"].float()
        action = b["action"].float()
        if action.dim() == 1:
            action = action.unsqueeze(-1)
        reward = b["reward"].float()
        done = b["terminated"]
        if self.truncation_as_terminal and "truncated" in keys:
            done = done | b["truncated"]
        done = done.float()
        alpha = self.alpha
        with torch.no_grad():
            na, nlogp = self.actor.sample(next_obs)
            tq1, tq2 = self.target_critic(next_obs, na)
            target = reward + self.gamma * (1.0 - done) * (torch.min(tq1, tq2) - alpha * nlogp)
        q1, q2 = self.critic(obs, action)
        per_row = (q1 - target).pow(2) + (q2 - target).pow(2)
        if "weight" in keys:
            per_row = per_row * b["weight"].float()
        critic_loss = per_row.mean()

        a, logp = self.actor.sample(obs)
        critic = self.critic

        def actor_loss() -> Dict[str, Any]:  # after the critic's step (see the class docstring)
            frozen = {k: v.detach() for k, v in critic.named_parameters()}
            pq1, pq2 = torch.func.functional_call(critic, frozen, (obs, a))
            loss = (alpha * logp - torch.min(pq1, pq2)).mean()
            return {"total_loss": loss, "entropy": -logp.detach().mean(), "alpha": alpha}

        out: Dict[str, Any] = {
            "critic": {"total_loss": critic_loss, "q_value": q1.detach().mean()},
            "actor": actor_loss,
        }
        if self.auto_alpha:
            alpha_loss = -(self.alpha_mod.log_alpha * (logp.detach() + self.target_entropy)).mean()
            out["alpha"] = {"total_loss": alpha_loss}
        return out

    def after_gradient_based_update(self, timesteps: Any = None) -> None:
        super().after_gradient_based_update(timesteps)
        self.train_iter += 1
        self.soft_target.update()

    def _device_moved(self) -> None:
        self.soft_target.refresh()

    def get_extra_state(self) -> Dict[str, Any]:
        return {"target_critic": self.target_critic.state_dict(), "train_iter": int(self.train_iter),
                "log_alpha": self.alpha_mod.log_alpha.detach().clone()}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        if "target_critic" in state:
            self.target_critic.load_state_dict(state["target_critic"])
        if "train_iter" in state:
            self.train_iter = int(state["train_iter"])
        if "log_alpha" in state:
            with torch.no_grad():
                self.alpha_mod.log_alpha.copy_(torch.as_tensor(state["log_alpha"]))


class SACCollectMode(ActingMode):
    """Stochastic actions ``[N, act_dim]`` (float32 numpy); uniform random for the first
    ``random_collect_size`` actions. Extra keyword arguments (e.g. ``eps``) are ignored."""

    def __init__(self, actor: SACActor, random_collect_size: int = 0, seed: Optional[int] = None) -> None:
        self.actor = actor
        self.random_left = int(random_collect_size)
        self.rng = np.random.default_rng(seed)

    def forward(self, obs: Any, **_: Any) -> np.ndarray:
        n = len(obs)
        if self.random_left > 0:
            self.random_left -= n
            return self.rng.uniform(-1.0, 1.0, size=(n, self.actor.act_dim)).astype(np.float32)
        x = obs_tensor(obs, module_device(self.actor), torch.float32)
        with torch.no_grad():
            return self.actor.sample(x)[0].cpu().numpy()

    __call__ = forward


class SACEvalMode(ActingMode):
    """Deterministic actions ``tanh(mean)``."""

    def __init__(self, actor: SACActor) -> None:
        self.actor = actor

    def forward(self, obs: Any, **_: Any) -> np.ndarray:
        with torch.no_grad():
            return self.actor.deterministic(obs_tensor(obs, module_device(self.actor), torch.float32)).cpu().numpy()

    __call__ = forward


class SACPolicy(Policy[SACLearner, SACCollectMode, SACEvalMode]):
    """SAC with learn, collect and eval modes sharing one actor.

    Args:
        cfg: a config from ``compile_config(user, policy='sac')`` or its ``policy`` section.
        obs_shape, action_shape: override ``policy.model`` (flat sizes).
        seed: seeds torch (network init) and the collect mode's random actions.
        device: where the networks (and the learner, its optimizers and batches) live; default
            ``policy.device`` (see :mod:`pipeline.device`).

    ``state_dict()`` is ``{'actor': ..., 'critic': ..., 'learn': ...}``.
    """

    config_schema = SAC_CONFIG

    def __init__(self, cfg: Mapping, obs_shape: Optional[int] = None, action_shape: Optional[int] = None,
                 seed: Optional[int] = None, device: DeviceLike = None) -> None:
        super().__init__(cfg, device)
        mc = self.cfg["model"]
        obs_dim, act_dim = self._flat_sizes(obs_shape, action_shape)
        if seed is not None:
            torch.manual_seed(seed)
        self.actor = SACActor(obs_dim, act_dim, mc["actor_hidden_size_list"])
        self.critic = TwinQCritic(obs_dim, act_dim, mc["critic_hidden_size_list"])
        self._seed = seed
        self._place_networks()

    def networks(self) -> Dict[str, nn.Module]:
        return {"actor": self.actor, "critic": self.critic}

    def _build_learner(self) -> SACLearner:
        return SACLearner(self.actor, self.critic, self.cfg)

    def _build_collect_mode(self) -> SACCollectMode:
        return SACCollectMode(self.actor, int(self.cfg["collect"]["random_collect_size"]), self._seed)

    def _build_eval_mode(self) -> SACEvalMode:
        return SACEvalMode(self.actor)
