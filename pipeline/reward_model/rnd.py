"""Random network distillation (Burda et al., 2018) as a reward model.

A fixed, randomly initialised *target* network maps an observation to an embedding; a *predictor*
network is trained to match it on the observations the agent has seen. The prediction error is high
on novel observations: it is the intrinsic reward. Observations are normalised with running
statistics (clipped to ``[-obs_clip, obs_clip]``) and the intrinsic reward is divided by a running
standard deviation so its scale stays stable while the predictor improves.

Interface (shared by all reward models):

- ``estimate(train_data)`` returns a *new* batch whose ``reward`` is ``extrinsic_weight * reward +
  intrinsic_weight * normalised_intrinsic``; the input (possibly still referenced by a replay buffer)
  is not modified.
- ``train(data)`` takes one or more gradient steps of the predictor on ``data``'s observations.

``train_data`` may be a list of transition dicts or a mapping / treetensor of stacked columns.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

__all__ = ["RndRewardModel", "RunningMeanStd"]


class RunningMeanStd:
    """Running mean and variance over the first axis (parallel/Welford merge of batch moments)."""

    def __init__(self, shape: Tuple[int, ...] = (), epsilon: float = 1e-4):
        self.mean = torch.zeros(shape, dtype=torch.float64)
        self.var = torch.ones(shape, dtype=torch.float64)
        self.count = float(epsilon)

    def update(self, x: torch.Tensor) -> None:
        """Fold a batch ``x`` of shape ``(N, *shape)`` into the statistics."""
        x = x.detach().to(torch.float64)
        n = x.shape[0]
        if n == 0:
            return
        b_mean = x.mean(0)
        b_var = x.var(0, unbiased=False)
        delta = b_mean - self.mean
        tot = self.count + n
        self.mean = self.mean + delta * n / tot
        m2 = self.var * self.count + b_var * n + delta.pow(2) * self.count * n / tot
        self.var = m2 / tot
        self.count = tot

    @property
    def std(self) -> torch.Tensor:
        return self.var.sqrt()

    def state_dict(self) -> Dict[str, object]:
        return {"mean": self.mean.clone(), "var": self.var.clone(), "count": self.count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.mean = torch.as_tensor(state["mean"], dtype=torch.float64).clone()
        self.var = torch.as_tensor(state["var"], dtype=torch.float64).clone()
        self.count = float(state["count"])


def _mlp(in_dim: int, hidden: Sequence[int], out_dim: int) -> nn.Sequential:
    layers: List[nn.Module] = []
    d = in_dim
    for h in hidden:
        layers += [nn.Linear(d, h), nn.LeakyReLU()]
        d = h
    layers.append(nn.Linear(d, out_dim))
    return nn.Sequential(*layers)


def _column(data: Any, key: str) -> torch.Tensor:
    """A stacked float tensor of ``data[key]`` for a list of dicts or a column mapping."""
    if isinstance(data, (list, tuple)):
        if len(data) == 0:
            raise ValueError("reward model got an empty list of transitions")
        if not isinstance(data[0], Mapping) or key not in data[0]:
            raise KeyError(f"reward model needs transitions with a '{key}' entry")
        vals = [d[key] for d in data]
        if isinstance(vals[0], torch.Tensor):
            return torch.stack([v.detach().float().reshape(-1) if v.dim() == 0 else v.detach().float() for v in vals])
        return torch.as_tensor(np.stack([np.asarray(v, dtype=np.float32) for v in vals]))
    try:
        col = data[key]
    except (KeyError, TypeError, AttributeError):
        raise KeyError(f"reward model needs a '{key}' column in the train data") from None
    return torch.as_tensor(col).detach().float()


class RndRewardModel:
    """RND intrinsic reward with observation and reward normalisation.

    Args:
        obs_dim: flat observation size (observations are flattened to ``(N, obs_dim)``).
        hidden: hidden layer sizes of target and predictor (default ``(64, 64)``).
        embed_dim: embedding size (default 64).
        lr: predictor Adam learning rate.
        intrinsic_weight: weight of the normalised intrinsic reward in the combined reward.
        extrinsic_weight: weight of the env reward.
        obs_key: which observation to score (default ``"next_obs"``: novelty of the state reached).
        obs_norm: normalise observations with running mean/std (default True).
        obs_clip: clip normalised observations to this magnitude.
        update_per_train: predictor gradient steps per :meth:`train` call.
        batch_size: optional minibatch size inside :meth:`train` (``None``: the whole data).
        seed: seed for the networks' initialisation.
    """

    def __init__(
        self,
        obs_dim: int,
        hidden: Sequence[int] = (64, 64),
        embed_dim: int = 64,
        lr: float = 1e-3,
        intrinsic_weight: float = 1.0,
        extrinsic_weight: float = 1.0,
        obs_key: str = "next_obs",
        obs_norm: bool = True,
        obs_clip: float = 5.0,
        update_per_train: int = 1,
        batch_size: Optional[int] = None,
        seed: Optional[int] = None,
    ):
        if int(obs_dim) < 1:
            raise ValueError(f"obs_dim must be >= 1, got {obs_dim!r}")
        if update_per_train < 1:
            raise ValueError(f"update_per_train must be >= 1, got {update_per_train!r}")
        self.obs_dim = int(obs_dim)
        self.obs_key = obs_key
        self.intrinsic_weight = float(intrinsic_weight)
        self.extrinsic_weight = float(extrinsic_weight)
        self.obs_norm = bool(obs_norm)
        self.obs_clip = float(obs_clip)
        self.update_per_train = int(update_per_train)
        self.batch_size = batch_size
        gen_state = torch.random.get_rng_state()
        if seed is not None:
            torch.manual_seed(seed)
        try:
            self.target = _mlp(self.obs_dim, hidden, embed_dim)
            self.predictor = _mlp(self.obs_dim, hidden, embed_dim)
        finally:
            if seed is not None:
                torch.random.set_rng_state(gen_state)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.predictor.parameters(), lr=lr)
        self.obs_rms = RunningMeanStd((self.obs_dim,))
        self.reward_rms = RunningMeanStd(())
        self.train_iter = 0
        self.last_loss: Optional[float] = None

    # ------------------------------------------------------------------ internals
    def _obs(self, data: object) -> torch.Tensor:
        obs = _column(data, self.obs_key)
        obs = obs.reshape(obs.shape[0], -1)
        if obs.shape[1] != self.obs_dim:
            raise ValueError(f"RND was built for obs_dim={self.obs_dim}, got observations of size {obs.shape[1]}")
        return obs

    def _normalise_obs(self, obs: torch.Tensor) -> torch.Tensor:
        if not self.obs_norm:
            return obs
        mean = self.obs_rms.mean.float()
        std = self.obs_rms.std.float().clamp_min(1e-4)
        return ((obs - mean) / std).clamp(-self.obs_clip, self.obs_clip)

    def intrinsic_reward(self, obs: torch.Tensor, normalise: bool = True) -> torch.Tensor:
        """Raw (or normalised) prediction error per row of ``obs`` (``(N, obs_dim)``)."""
        with torch.no_grad():
            x = self._normalise_obs(obs.float())
            err = (self.predictor(x) - self.target(x)).pow(2).mean(-1)
        if normalise:
            err = err / self.reward_rms.std.float().clamp_min(1e-8)
        return err

    # ------------------------------------------------------------------ interface
    def train(self, data: object) -> float:
        """Train the predictor on ``data``'s observations; returns the last loss.

        Also updates the observation statistics (before the step, so the first call already
        normalises sensibly).
        """
        obs = self._obs(data)
        if self.obs_norm:
            self.obs_rms.update(obs)
        x = self._normalise_obs(obs)
        n = x.shape[0]
        loss_v = 0.0
        for _ in range(self.update_per_train):
            if self.batch_size is not None and self.batch_size < n:
                xb = x[torch.randint(0, n, (self.batch_size,))]
            else:
                xb = x
            loss = (self.predictor(xb) - self.target(xb)).pow(2).mean()
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self.optimizer.step()
            loss_v = float(loss.detach())
        self.train_iter += 1
        self.last_loss = loss_v
        return loss_v

    def estimate(self, train_data: object) -> object:
        """Combined reward for ``train_data``, returned in a new batch (the input is not modified).

        The raw intrinsic rewards of this batch update the running reward statistics, then they are
        divided by its standard deviation.
        """
        obs = self._obs(train_data)
        raw = self.intrinsic_reward(obs, normalise=False)
        self.reward_rms.update(raw)
        intrinsic = raw / self.reward_rms.std.float().clamp_min(1e-8)
        return self._with_reward(train_data, intrinsic)

    def _with_reward(self, data: Any, intrinsic: torch.Tensor) -> object:
        w_i, w_e = self.intrinsic_weight, self.extrinsic_weight
        if isinstance(data, (list, tuple)):
            out = []
            for row, bonus in zip(data, intrinsic.tolist()):
                new = dict(row)
                r = row["reward"]
                if isinstance(r, torch.Tensor):
                    new["reward"] = r.detach().float() * w_e + w_i * bonus
                elif isinstance(r, np.ndarray):
                    new["reward"] = (r.astype(np.float32) * w_e + w_i * bonus).astype(np.float32)
                else:
                    new["reward"] = float(r) * w_e + w_i * bonus
                out.append(new)
            return out
        try:
            reward = data["reward"]
        except (KeyError, TypeError):
            raise KeyError("reward model needs a 'reward' column in the train data") from None
        r = torch.as_tensor(reward).detach().float()
        combined = r * w_e + w_i * intrinsic.reshape(r.shape[0], *([1] * (r.dim() - 1)))
        if isinstance(data, dict):
            new = dict(data)
            new["reward"] = combined
            return new
        # treetensor or another mapping type: rebuild it (copy.copy of a treetensor shares storage)
        cols = {k: data[k] for k in data.keys()}
        cols["reward"] = combined
        try:
            return type(data)(cols)
        except Exception:
            return cols

    def state_dict(self) -> Dict[str, object]:
        return {
            "predictor": self.predictor.state_dict(),
            "target": self.target.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "obs_rms": self.obs_rms.state_dict(),
            "reward_rms": self.reward_rms.state_dict(),
            "train_iter": self.train_iter,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.predictor.load_state_dict(state["predictor"])
        self.target.load_state_dict(state["target"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.obs_rms.load_state_dict(state["obs_rms"])
        self.reward_rms.load_state_dict(state["reward_rms"])
        self.train_iter = int(state["train_iter"])
