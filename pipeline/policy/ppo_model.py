"""PPO's actor-critic network, its action distributions, and running observation/return statistics.

The distribution kernels are plain functions of tensors (no ``torch.distributions`` objects, whose
argument checks cost more than the math for small batches):

- discrete: logits ``[B, n]`` -> ``log_softmax``; log-prob by gather, entropy ``-sum(p log p)``.
- continuous: a diagonal Gaussian with a state-independent ``log_std`` parameter; log-probs are of
  the unclipped sample (the env receives it clipped to the action space).

``RunningMeanStd`` buffers live inside the model (``model.obs_norm``, ``model.ret_norm``), so the
statistics travel with the weights between nodes and are saved in every checkpoint.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import nn

__all__ = ['ActorCriticModel', 'ActorCritic', 'ACTIVATIONS', 'RunningMeanStd', 'logp_entropy', 'LOG_2PI']

#: The hidden-layer activations a config can name (``policy.model.activation``).
ACTIVATIONS = {'tanh': nn.Tanh, 'relu': nn.ReLU}

LOG_2PI = math.log(2.0 * math.pi)


class RunningMeanStd(nn.Module):
    """Running mean and variance of a stream of rows (Chan et al.'s parallel merge, in float64).

    ``update(x)`` merges a batch ``[n, *shape]``; ``normalize(x)`` returns
    ``clip((x - mean) / sqrt(var + eps))`` (or ``x / sqrt(var + eps)`` with ``center=False``).
    The statistics are buffers: they are in ``state_dict()`` (checkpoints, weight exchange) and
    never trained by gradient.
    """

    mean: torch.Tensor  # the buffers registered in __init__
    var: torch.Tensor
    count: torch.Tensor

    def __init__(self, shape: Sequence[int] = (), clip: float = 10.0, eps: float = 1e-8) -> None:
        super().__init__()
        self.register_buffer('mean', torch.zeros(tuple(shape), dtype=torch.float64))
        self.register_buffer('var', torch.ones(tuple(shape), dtype=torch.float64))
        self.register_buffer('count', torch.zeros((), dtype=torch.float64))
        self.clip = float(clip)
        self.eps = float(eps)
        self._refresh()

    def _refresh(self) -> None:
        self._mean32 = self.mean.float()
        self._inv_std32 = (self.var + self.eps).rsqrt().float()

    def update(self, x: Union[np.ndarray, torch.Tensor]) -> None:
        """Merge a batch of rows (numpy array or tensor, first axis = rows)."""
        rows = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
        rows = rows.reshape((-1,) + tuple(self.mean.shape))
        n = rows.shape[0]
        if n == 0:
            return
        b_mean = torch.from_numpy(np.asarray(rows.mean(axis=0))).to(self.mean.device)
        b_var = torch.from_numpy(np.asarray(rows.var(axis=0))).to(self.mean.device)
        c = float(self.count)
        tot = c + n
        delta = b_mean - self.mean
        new_mean = self.mean + delta * (n / tot)
        m2 = self.var * c + b_var * n + delta.pow(2) * (c * n / tot)
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / tot)
        self.count.fill_(tot)
        self._refresh()

    def _load_from_state_dict(self, *args, **kwargs) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._refresh()

    def _apply(self, fn, *args, **kwargs):  # .to(device) and friends: the float32 copies follow the buffers
        out = super()._apply(fn, *args, **kwargs)
        self._refresh()
        return out

    def normalize(self, x: torch.Tensor, center: bool = True) -> torch.Tensor:
        """Normalise a float32 tensor with the statistics as of the last ``update``/load."""
        y = (x - self._mean32) * self._inv_std32 if center else x * self._inv_std32
        return y.clamp(-self.clip, self.clip)

    def scale(self, x: np.ndarray) -> np.ndarray:
        """``clip(x / sqrt(var + eps))`` on a numpy array (reward scaling by the return's std)."""
        return np.clip(x / math.sqrt(float(self.var) + self.eps), -self.clip, self.clip).astype(np.float32)


def _mlp(sizes: Sequence[int], act: type) -> nn.Sequential:
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [nn.Linear(a, b), act()]
    return nn.Sequential(*layers)


def _ortho(module: nn.Module, gain: float) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.orthogonal_(m.weight, gain)
            nn.init.zeros_(m.bias)


class ActorCriticModel(nn.Module):
    """What PPO needs of its model (the type of ``PPOPolicy(model=...)``): ``forward(obs) -> (pi_out, value)``,
    :meth:`policy_out`, :meth:`value`, ``continuous`` (a continuous one also has a ``log_std`` parameter),
    ``obs_norm`` (running observation statistics, or None) and ``ret_norm`` (running statistics of discounted
    returns, which scale rewards). :class:`ActorCritic` (two MLPs) and :class:`pipeline.policy.conv.AtariActorCritic`
    (one CNN trunk) subclass it; so does a model of your own."""

    continuous: bool
    log_std: nn.Parameter  # [action_dim], state-independent (continuous models only)
    obs_norm: Optional[RunningMeanStd]
    ret_norm: RunningMeanStd

    def forward(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """``(pi_out, value)``: logits ``[B, n]`` or means ``[B, d]``, and values ``[B]``."""
        raise NotImplementedError

    def policy_out(self, obs: torch.Tensor) -> torch.Tensor:
        """Only the policy head (acting without values, e.g. evaluation)."""
        raise NotImplementedError

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Only the value head ``[B]``."""
        raise NotImplementedError


class ActorCritic(ActorCriticModel):
    """Separate policy and value MLPs (by default tanh and orthogonal init, as Stable-Baselines3's MlpPolicy).

    Args:
        obs_dim: observation size (observations are flattened).
        action_dim: number of discrete actions, or the size of a continuous action vector.
        continuous: diagonal Gaussian head (mean from the MLP, state-independent ``log_std``).
        hidden: hidden sizes of each of the two MLPs.
        log_std_init: initial log standard deviation (continuous).
        normalize_obs: keep running observation statistics (``obs_norm``) and normalise inputs.
        activation: the hidden layers' activation class.
        ortho_init: orthogonal weights (gain sqrt(2) hidden, 0.01 policy head, 1 value head) and zero
            biases; False keeps torch's default init (SB3's ``ortho_init=False``).

    ``forward(obs) -> (pi_out, value)``: logits ``[B, n]`` or means ``[B, d]``, and values ``[B]``.
    ``ret_norm`` holds the running statistics of discounted returns used to scale rewards.
    """

    def __init__(self, obs_dim: int, action_dim: int, continuous: bool = False,
                 hidden: Sequence[int] = (64, 64), log_std_init: float = 0.0, normalize_obs: bool = False,
                 activation: type = nn.Tanh, ortho_init: bool = True) -> None:
        super().__init__()
        if obs_dim < 1 or action_dim < 1:
            raise ValueError(f'ActorCritic needs obs_dim >= 1 and action_dim >= 1, got {obs_dim}, {action_dim}')
        self.obs_dim, self.action_dim, self.continuous = int(obs_dim), int(action_dim), bool(continuous)
        sizes = [self.obs_dim, *hidden]
        self.pi_body = _mlp(sizes, activation)
        self.v_body = _mlp(sizes, activation)
        self.pi_head = nn.Linear(sizes[-1], self.action_dim)
        self.v_head = nn.Linear(sizes[-1], 1)
        if ortho_init:
            _ortho(self.pi_body, math.sqrt(2))
            _ortho(self.v_body, math.sqrt(2))
            _ortho(self.pi_head, 0.01)
            _ortho(self.v_head, 1.0)
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((self.action_dim,), float(log_std_init)))
        self.obs_norm = RunningMeanStd((self.obs_dim,)) if normalize_obs else None
        self.ret_norm = RunningMeanStd(())

    def _prep(self, obs: torch.Tensor) -> torch.Tensor:
        if obs.dtype != torch.float32:
            obs = obs.float()
        if obs.dim() > 2:
            obs = obs.flatten(1)
        if self.obs_norm is not None:
            obs = self.obs_norm.normalize(obs)
        return obs

    def forward(self, obs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self._prep(obs)
        return self.pi_head(self.pi_body(x)), self.v_head(self.v_body(x)).squeeze(-1)

    def policy_out(self, obs: torch.Tensor) -> torch.Tensor:
        """Only the policy head (acting without values, e.g. evaluation)."""
        return self.pi_head(self.pi_body(self._prep(obs)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Only the value head ``[B]``."""
        return self.v_head(self.v_body(self._prep(obs))).squeeze(-1)


def logp_entropy(pi_out: torch.Tensor, action: torch.Tensor, log_std: Optional[torch.Tensor]
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities ``[B]`` of ``action`` and entropies ``[B]`` of the action distribution.

    Discrete when ``log_std`` is None (``pi_out`` are logits, ``action`` int indices), else a
    diagonal Gaussian with means ``pi_out`` and the state-independent ``log_std`` (``action``
    the unclipped samples).
    """
    if log_std is None:
        logp_all = torch.log_softmax(pi_out, dim=-1)
        logp = logp_all.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        return logp, entropy
    z = (action - pi_out) * torch.exp(-log_std)
    logp = (-0.5 * z.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)
    entropy = (0.5 + 0.5 * LOG_2PI + log_std).sum(-1).expand(logp.shape[0])
    return logp, entropy


def sample(pi_out: torch.Tensor, log_std: Optional[torch.Tensor], generator: Optional[torch.Generator] = None
           ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Draw actions (int indices, or unclipped Gaussian samples) and their log-probabilities."""
    if log_std is None:
        logp_all = torch.log_softmax(pi_out, dim=-1)
        action = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
        return action, logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
    noise = torch.randn(pi_out.shape, generator=generator, device=pi_out.device)
    action = pi_out + noise * log_std.exp()
    logp = (-0.5 * noise.pow(2) - log_std - 0.5 * LOG_2PI).sum(-1)
    return action, logp
