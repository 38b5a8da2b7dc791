"""Hindsight experience replay (HER) relabelling.

An *episode* is a list of transition dicts with at least ``obs``, ``next_obs`` and ``reward`` (and
usually ``action`` and ``done``). Observations are either goal-env dicts (``observation``,
``achieved_goal``, ``desired_goal``) or flat vectors ``[observation, achieved_goal, desired_goal]``
described by a :class:`~pipeline.envs.goal_envs.GoalLayout`-like object (``achieved`` and
``desired`` slices). Values may be numpy arrays, torch tensors or Python scalars; the output uses
the same kind as the input.

For transition ``t`` of an episode of length ``T`` the candidate goals are the goals achieved in the
episode, ``ag[j] = achieved_goal(next_obs[j])`` for ``j`` in ``0..T-1``:

- ``future``: ``k`` goals with ``j`` drawn uniformly from ``t..T-1`` (states reached at or after
  this transition);
- ``final``: one goal, ``j = T-1`` (the last state reached);
- ``episode``: ``k`` goals with ``j`` drawn uniformly from ``0..T-1``.

The relabelled transition gets the new goal in both ``obs`` and ``next_obs``, ``reward =
compute_reward(ag[t], goal)`` and, when a ``compute_terminated`` function is given,
``done = compute_terminated(ag[t], goal)`` (a time-limit truncation stays non-terminal).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import torch

__all__ = ["HerRewardModel", "NoRelabel", "HER_STRATEGIES"]

HER_STRATEGIES = ("future", "final", "episode")
_GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")


def _to_numpy(x: object) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x)


def _stack(values: Sequence[Any]) -> np.ndarray:
    if isinstance(values[0], torch.Tensor):
        return torch.stack([v.detach().cpu() for v in values]).numpy()
    return np.stack([np.asarray(v) for v in values])


def _like(template: object, arr: np.ndarray) -> object:
    """Convert a numpy row back to the kind of ``template`` (tensor, array or scalar)."""
    if isinstance(template, torch.Tensor):
        return torch.as_tensor(arr, dtype=template.dtype).reshape(template.shape)
    if isinstance(template, np.ndarray):
        return np.asarray(arr, dtype=template.dtype).reshape(template.shape)
    if isinstance(template, (bool, np.bool_)):
        return bool(arr)
    if isinstance(template, (int, np.integer)) and not isinstance(template, bool):
        return int(arr)
    return float(arr)


def _episode_sampling(episode_size: object, sample_per_episode: object) -> Tuple[int, Optional[int]]:
    """``(episode_size, sample_per_episode)`` checked: positive integers (``sample_per_episode`` may be None)."""
    if not isinstance(episode_size, (int, np.integer)) or episode_size < 1:
        raise ValueError(f"episode_size must be a positive integer, got {episode_size!r}")
    if sample_per_episode is not None and (
        not isinstance(sample_per_episode, (int, np.integer)) or sample_per_episode < 1
    ):
        raise ValueError(f"sample_per_episode must be a positive integer or None, got {sample_per_episode!r}")
    return int(episode_size), None if sample_per_episode is None else int(sample_per_episode)


class HerRewardModel:
    """Relabel whole episodes with hindsight goals (see module docstring for the strategies).

    Args:
        compute_reward: vectorised ``compute_reward(achieved_goal, desired_goal, info)`` of the env
            (``(N, G), (N, G) -> (N,)``).
        strategy: ``"future"``, ``"final"`` or ``"episode"``.
        k: relabelled copies per transition for ``future`` and ``episode`` (``final`` makes one).
        compute_terminated: optional vectorised ``compute_terminated(achieved, desired, info)``; when
            given, relabelled transitions get ``done`` (and ``terminated`` if present) from it. Without
            it ``done`` is copied from the original transition.
        goal_layout: for flat observations, an object with ``achieved`` and ``desired`` slices
            (:class:`~pipeline.envs.goal_envs.GoalLayout`); ``None`` for dict observations.
        keep_original: also return the original transitions (default True).
        episode_size: episodes :func:`middleware.her.her_data_enhancer` samples per train batch.
        sample_per_episode: keep only this many of each episode's output transitions (drawn
            uniformly without replacement; only those are built). ``None`` keeps all of them.
        seed: seed of the relabelling random generator.
    """

    def __init__(
        self,
        compute_reward: Callable[..., object],
        strategy: str = "future",
        k: int = 4,
        compute_terminated: Optional[Callable[..., object]] = None,
        goal_layout: object = None,
        keep_original: bool = True,
        episode_size: int = 16,
        sample_per_episode: Optional[int] = None,
        seed: Optional[int] = None,
    ):
        if not callable(compute_reward):
            raise TypeError(
                f"compute_reward must be callable (the env's compute_reward), got {type(compute_reward).__name__}"
            )
        if strategy not in HER_STRATEGIES:
            raise ValueError(f"unknown HER strategy {strategy!r}: use one of {', '.join(HER_STRATEGIES)}")
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 1:
            raise ValueError(f"k (relabels per transition) must be a positive integer, got {k!r}")
        if goal_layout is not None and not (hasattr(goal_layout, "achieved") and hasattr(goal_layout, "desired")):
            raise TypeError("goal_layout must have 'achieved' and 'desired' slices (see pipeline.envs.goal_envs.GoalLayout)")
        self.compute_reward = compute_reward
        self.compute_terminated = compute_terminated
        self.strategy = strategy
        self.k = int(k)
        self.goal_layout = goal_layout
        self.keep_original = bool(keep_original)
        self.episode_size, self.sample_per_episode = _episode_sampling(episode_size, sample_per_episode)
        self._rng = np.random.default_rng(seed)

    @classmethod
    def from_env(cls, env: object, strategy: str = "future", k: int = 4, **kwargs: Any) -> "HerRewardModel":
        """Build from a goal env (or a :class:`FlattenGoalObservation`-wrapped one).

        Takes ``compute_reward``, ``compute_terminated`` (if the env has it) and ``goal_layout`` (if the
        env is flattened) from ``env``.
        """
        if not hasattr(env, "compute_reward"):
            raise TypeError(f"{type(env).__name__} has no compute_reward: HER needs a goal env")
        kwargs.setdefault("compute_terminated", getattr(env, "compute_terminated", None))
        kwargs.setdefault("goal_layout", getattr(env, "goal_layout", None))
        return cls(env.compute_reward, strategy=strategy, k=k, **kwargs)

    @property
    def relabels_per_transition(self) -> int:
        """Relabelled copies made of each transition (``1`` for ``final``)."""
        return 1 if self.strategy == "final" else self.k

    def output_size(self, episode_len: int) -> int:
        """Transitions :meth:`relabel` returns for one episode of ``episode_len`` transitions."""
        full = episode_len * (self.relabels_per_transition + int(self.keep_original))
        return full if self.sample_per_episode is None else min(full, self.sample_per_episode)

    # ---------------------------------------------------------------- goal access
    def _achieved(self, obs_rows: Sequence[Any]) -> np.ndarray:
        if self.goal_layout is None:
            self._check_dict(obs_rows[0])
            return _stack([o["achieved_goal"] for o in obs_rows]).reshape(len(obs_rows), -1).astype(np.float32)
        return _stack(obs_rows)[:, self.goal_layout.achieved].astype(np.float32)

    def _desired(self, obs_rows: Sequence[Any]) -> np.ndarray:
        if self.goal_layout is None:
            return _stack([o["desired_goal"] for o in obs_rows]).reshape(len(obs_rows), -1).astype(np.float32)
        return _stack(obs_rows)[:, self.goal_layout.desired].astype(np.float32)

    def _check_dict(self, obs: object) -> None:
        if not isinstance(obs, Mapping) or not all(k in obs for k in _GOAL_KEYS):
            raise ValueError(
                "HER needs goal-env observations: dicts with 'observation', 'achieved_goal' and "
                "'desired_goal', or flat vectors with goal_layout=GoalLayout(obs_dim, goal_dim); got "
                f"{type(obs).__name__}"
            )

    def _with_goal(self, obs: Any, goal: np.ndarray) -> object:
        if self.goal_layout is None:
            new = dict(obs)
            new["desired_goal"] = _like(obs["desired_goal"], goal)
            return new
        sl = self.goal_layout.desired
        if isinstance(obs, torch.Tensor):
            row = obs.clone()
            row[sl] = torch.as_tensor(goal, dtype=obs.dtype)
            return row
        arr = np.array(obs, copy=True)
        arr[sl] = goal
        return arr

    # ---------------------------------------------------------------- relabelling
    def goal_indices(self, episode_len: int) -> Tuple[np.ndarray, np.ndarray]:
        """Draw which achieved goal relabels which transition.

        Returns ``(t, j)``: integer arrays of equal length; transition ``t[i]`` is relabelled with
        ``achieved_goal(next_obs[j[i]])``. For ``future``, ``t <= j < episode_len``; ``final`` uses
        ``j = episode_len - 1``; ``episode`` any ``j`` of the episode.
        """
        T = int(episode_len)
        if T < 1:
            raise ValueError(f"cannot relabel an empty episode (length {episode_len})")
        if self.strategy == "final":
            t = np.arange(T)
            return t, np.full(T, T - 1, dtype=np.int64)
        t = np.repeat(np.arange(T), self.k)
        if self.strategy == "future":
            # uniform over t..T-1: offset in [0, T - t)
            j = t + np.floor(self._rng.random(t.shape[0]) * (T - t)).astype(np.int64)
        else:
            j = self._rng.integers(0, T, size=t.shape[0])
        return t, j

    def relabel(self, episodes: Sequence[Sequence[Mapping[str, object]]]) -> List[Dict[str, object]]:
        """Relabel ``episodes`` (a list of episodes, or one episode) and flatten them.

        Returns a new list of transition dicts (the input is never modified): per episode, the
        originals (if ``keep_original``) followed by the relabelled copies (``k`` per transition,
        in transition order), ``output_size(T)`` in all; with ``sample_per_episode`` a uniform
        subset of these, kept in the same order.
        """
        if len(episodes) == 0:
            return []
        if isinstance(episodes[0], Mapping):  # a single episode
            episodes = [episodes]  # type: ignore[list-item]  # the rows of one episode, now a list of it
        out: List[Dict[str, object]] = []
        for ep in episodes:
            out.extend(self._relabel_episode(ep))
        return out

    def _relabel_episode(self, episode: Sequence[Mapping[str, object]]) -> List[Dict[str, object]]:
        T = len(episode)
        if T == 0:
            return []
        if not isinstance(episode[0], Mapping):
            raise TypeError(
                f"an episode must be a list of transition dicts, got a list of {type(episode[0]).__name__}"
            )
        first = episode[0]
        for key in ("obs", "next_obs", "reward"):
            if key not in first:
                raise KeyError(f"HER transitions need an '{key}' entry; got keys {sorted(first)}")
        next_obs = [tr["next_obs"] for tr in episode]
        ag_next = self._achieved(next_obs)  # (T, G)
        t_idx, j_idx = self.goal_indices(T)
        n_orig = T if self.keep_original else 0
        keep_orig = list(range(n_orig))
        if self.sample_per_episode is not None and self.sample_per_episode < n_orig + t_idx.shape[0]:
            pos = np.sort(self._rng.choice(n_orig + t_idx.shape[0], self.sample_per_episode, replace=False))
            keep_orig = [int(p) for p in pos if p < n_orig]
            rel = pos[pos >= n_orig] - n_orig
            t_idx, j_idx = t_idx[rel], j_idx[rel]
        goals = ag_next[j_idx]
        achieved = ag_next[t_idx]
        rewards = np.asarray(self.compute_reward(achieved, goals, None), dtype=np.float32).reshape(-1)
        if rewards.shape[0] != t_idx.shape[0]:
            raise ValueError(
                f"compute_reward must be vectorised: for {t_idx.shape[0]} goals it returned shape {rewards.shape}"
            )
        dones = None
        if self.compute_terminated is not None:
            dones = np.asarray(self.compute_terminated(achieved, goals, None), dtype=bool).reshape(-1)

        out: List[Dict[str, object]] = [dict(episode[i]) for i in keep_orig]
        for i in range(t_idx.shape[0]):
            src = episode[t_idx[i]]
            new = dict(src)
            goal = goals[i]
            new["obs"] = self._with_goal(src["obs"], goal)
            new["next_obs"] = self._with_goal(src["next_obs"], goal)
            new["reward"] = _like(src["reward"], rewards[i])
            if dones is not None:
                d = bool(dones[i])
                for key in ("done", "terminated"):
                    if key in src:
                        new[key] = _like(src[key], np.asarray(d))
            out.append(new)
        return out

    def train(self, data: object) -> None:
        """Nothing to learn: relabelling is a pure function of the episode (kept for the interface)."""
        return None

    def __repr__(self) -> str:
        return f"HerRewardModel(strategy={self.strategy!r}, k={self.k}, keep_original={self.keep_original})"


class NoRelabel:
    """The baseline of :class:`HerRewardModel` (e.g. an example's ``--no-her``): the same episode sampling,
    no relabelled goals.

    ``relabel(episodes)`` returns copies of the episodes' transitions; with ``sample_per_episode``, a
    uniform subset of each episode's (kept in order), so that a run without hindsight trains on as many
    rows per episode as one with it. ``episode_size``: episodes :func:`middleware.her.her_data_enhancer`
    samples per train batch.
    """

    def __init__(self, episode_size: int = 16, sample_per_episode: Optional[int] = None,
                 seed: Optional[int] = None) -> None:
        self.episode_size, self.sample_per_episode = _episode_sampling(episode_size, sample_per_episode)
        self._rng = np.random.default_rng(seed)

    def relabel(self, episodes: Sequence[Sequence[Mapping[str, object]]]) -> List[Dict[str, object]]:
        """Copies of the transitions of ``episodes`` (``sample_per_episode`` of each at most)."""
        out: List[Dict[str, object]] = []
        for ep in episodes:
            rows = [dict(t) for t in ep]
            if self.sample_per_episode is not None and len(rows) > self.sample_per_episode:
                keep = np.sort(self._rng.choice(len(rows), self.sample_per_episode, replace=False))
                rows = [rows[i] for i in keep]
            out.extend(rows)
        return out
