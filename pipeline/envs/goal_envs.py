"""Goal-conditioned environments in the gymnasium goal-env convention.

Both envs return a dict observation with keys ``observation``, ``achieved_goal`` and
``desired_goal`` and expose vectorised ``compute_reward(achieved_goal, desired_goal, info)``,
``compute_terminated(...)`` and ``compute_truncated(...)`` (the gymnasium-robotics ``GoalEnv`` API),
so hindsight relabelling can recompute rewards and terminations for any goal.

- :class:`BitFlipEnv`: the HER paper's bit-flipping task with ``n_bits`` bits. Action ``i`` flips
  bit ``i``; reward is ``0`` when the state equals the goal and ``-1`` otherwise.
- :class:`PointGoalEnv`: a point in the square ``[-1, 1]^2`` moved by a continuous 2-D action
  (scaled to ``max_step``); reward ``0`` within ``distance_threshold`` of the goal, else ``-1``.

:class:`FlattenGoalObservation` turns the dict observation into one flat vector
``[observation, achieved_goal, desired_goal]`` for policies and collectors that expect arrays;
:class:`GoalLayout` describes where each part lives so HER can relabel flat observations.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = [
    "GoalEnv",
    "BitFlipEnv",
    "PointGoalEnv",
    "FlattenGoalObservation",
    "GoalLayout",
    "register_goal_envs",
]


def _as_goal_array(x: object, goal_dim: int, name: str) -> np.ndarray:
    arr = np.asarray(x, dtype=np.float32)
    if arr.ndim == 0 or arr.shape[-1] != goal_dim:
        raise ValueError(
            f"{name} must have last dimension {goal_dim} (one goal per row), got shape {arr.shape}; "
            f"pass a goal of shape ({goal_dim},) or a batch of shape (N, {goal_dim})"
        )
    return arr


class GoalEnv(gym.Env):
    """A goal-conditioned env (as gymnasium-robotics' ``GoalEnv``): dict observations with ``achieved_goal`` and
    ``desired_goal``, and the vectorised ``compute_reward`` / ``compute_terminated`` / ``compute_truncated``
    that hindsight relabelling calls. Subclasses set ``goal_dim`` and ``terminate_on_success`` and define
    ``_success``."""

    goal_dim: int
    terminate_on_success: bool

    def _success(self, achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def compute_reward(self, achieved_goal: object, desired_goal: object, info: object = None) -> np.ndarray:
        """Reward for reaching ``achieved_goal`` when aiming at ``desired_goal``.

        Vectorised: inputs of shape ``(goal_dim,)`` or ``(N, goal_dim)`` give a scalar array or an
        ``(N,)`` float32 array. Returns ``0`` on success and ``-1`` otherwise. ``info`` is ignored
        (accepted for API compatibility).
        """
        a = _as_goal_array(achieved_goal, self.goal_dim, "achieved_goal")
        d = _as_goal_array(desired_goal, self.goal_dim, "desired_goal")
        return self._success(a, d).astype(np.float32) - 1.0

    def compute_terminated(self, achieved_goal: object, desired_goal: object, info: object = None) -> np.ndarray:
        """Whether the episode ends (vectorised like :meth:`compute_reward`).

        True on success when the env was built with ``terminate_on_success=True``, else always False.
        """
        a = _as_goal_array(achieved_goal, self.goal_dim, "achieved_goal")
        d = _as_goal_array(desired_goal, self.goal_dim, "desired_goal")
        s = self._success(a, d)
        return s if self.terminate_on_success else np.zeros_like(s)

    def compute_truncated(self, achieved_goal: object, desired_goal: object, info: object = None) -> np.ndarray:
        """Truncation never depends on the goal here (time limits are applied by the env itself)."""
        a = _as_goal_array(achieved_goal, self.goal_dim, "achieved_goal")
        return np.zeros(a.shape[:-1], dtype=bool)


class BitFlipEnv(GoalEnv):
    """Bit flipping (Andrychowicz et al., 2017): reach a random target bit string.

    Args:
        n_bits: number of bits (state and goal size, and number of discrete actions).
        max_steps: episode length before truncation (default ``n_bits``).
        terminate_on_success: end the episode as soon as the goal is reached (default True).
    """

    metadata = {"render_modes": []}

    def __init__(self, n_bits: int = 15, max_steps: Optional[int] = None, terminate_on_success: bool = True):
        if not isinstance(n_bits, (int, np.integer)) or n_bits < 1:
            raise ValueError(f"n_bits must be a positive integer, got {n_bits!r}")
        if max_steps is None:
            max_steps = int(n_bits)
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
        self.n_bits = int(n_bits)
        self.goal_dim = self.n_bits
        self.max_steps = int(max_steps)
        self.terminate_on_success = bool(terminate_on_success)
        box = spaces.Box(0.0, 1.0, shape=(self.n_bits,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {"observation": box, "achieved_goal": box, "desired_goal": box}
        )
        self.action_space = spaces.Discrete(self.n_bits)
        self._state = np.zeros(self.n_bits, dtype=np.float32)
        self._goal = np.zeros(self.n_bits, dtype=np.float32)
        self._t = 0

    def _success(self, achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
        return np.all(np.abs(achieved_goal - desired_goal) < 0.5, axis=-1)

    def _obs(self) -> Dict[str, np.ndarray]:
        return {
            "observation": self._state.copy(),
            "achieved_goal": self._state.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[dict] = None) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
        super().reset(seed=seed)
        self._state = self.np_random.integers(0, 2, size=self.n_bits).astype(np.float32)
        self._goal = self.np_random.integers(0, 2, size=self.n_bits).astype(np.float32)
        while np.array_equal(self._state, self._goal):  # never start solved
            self._goal = self.np_random.integers(0, 2, size=self.n_bits).astype(np.float32)
        self._t = 0
        return self._obs(), {"is_success": False}

    def step(self, action: Any) -> Tuple[Dict[str, np.ndarray], float, bool, bool, Dict[str, object]]:
        a = int(np.asarray(action).reshape(-1)[0]) if np.ndim(action) else int(action)
        if not 0 <= a < self.n_bits:
            raise ValueError(f"action must be an integer in [0, {self.n_bits}), got {action!r}")
        self._state[a] = 1.0 - self._state[a]
        self._t += 1
        success = bool(self._success(self._state, self._goal))
        reward = float(success) - 1.0
        terminated = success and self.terminate_on_success
        truncated = (not terminated) and self._t >= self.max_steps
        return self._obs(), reward, terminated, truncated, {"is_success": success}


class PointGoalEnv(GoalEnv):
    """A point mass on ``[-1, 1]^2`` reaching a random goal with a continuous action.

    The action in ``[-1, 1]^2`` is clipped and scaled by ``max_step``; the position is clipped to the
    square. Observation: position (2); achieved goal: position; desired goal: target (2).

    Args:
        max_steps: episode length before truncation (default 50).
        distance_threshold: success radius (default 0.1).
        max_step: largest move per step (default 0.1).
        terminate_on_success: end the episode on success (default True).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        max_steps: int = 50,
        distance_threshold: float = 0.1,
        max_step: float = 0.1,
        terminate_on_success: bool = True,
    ):
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps!r}")
        if distance_threshold <= 0 or max_step <= 0:
            raise ValueError(
                f"distance_threshold and max_step must be > 0, got {distance_threshold!r}, {max_step!r}"
            )
        self.goal_dim = 2
        self.max_steps = int(max_steps)
        self.distance_threshold = float(distance_threshold)
        self.max_step = float(max_step)
        self.terminate_on_success = bool(terminate_on_success)
        box = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.observation_space = spaces.Dict(
            {"observation": box, "achieved_goal": box, "desired_goal": box}
        )
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._pos = np.zeros(2, dtype=np.float32)
        self._goal = np.zeros(2, dtype=np.float32)
        self._t = 0

    def _success(self, achieved_goal: np.ndarray, desired_goal: np.ndarray) -> np.ndarray:
        return np.linalg.norm(achieved_goal - desired_goal, axis=-1) < self.distance_threshold

    def _obs(self) -> Dict[str, np.ndarray]:
        return {
            "observation": self._pos.copy(),
            "achieved_goal": self._pos.copy(),
            "desired_goal": self._goal.copy(),
        }

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[dict] = None) -> Tuple[Dict[str, np.ndarray], Dict[str, object]]:
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1.0, 1.0, size=2).astype(np.float32)
        self._goal = self.np_random.uniform(-1.0, 1.0, size=2).astype(np.float32)
        while self._success(self._pos, self._goal):
            self._goal = self.np_random.uniform(-1.0, 1.0, size=2).astype(np.float32)
        self._t = 0
        return self._obs(), {"is_success": False}

    def step(self, action: object) -> Tuple[Dict[str, np.ndarray], float, bool, bool, Dict[str, object]]:
        a = np.asarray(action, dtype=np.float32).reshape(-1)
        if a.shape != (2,) or not np.all(np.isfinite(a)):
            raise ValueError(f"action must be 2 finite floats, got {action!r}")
        self._pos = np.clip(self._pos + self.max_step * np.clip(a, -1.0, 1.0), -1.0, 1.0).astype(np.float32)
        self._t += 1
        success = bool(self._success(self._pos, self._goal))
        reward = float(success) - 1.0
        terminated = success and self.terminate_on_success
        truncated = (not terminated) and self._t >= self.max_steps
        return self._obs(), reward, terminated, truncated, {"is_success": success}


@dataclass(frozen=True)
class GoalLayout:
    """Where the parts of a flattened goal observation ``[observation, achieved, desired]`` live."""

    obs_dim: int
    goal_dim: int

    @property
    def achieved(self) -> slice:
        return slice(self.obs_dim, self.obs_dim + self.goal_dim)

    @property
    def desired(self) -> slice:
        return slice(self.obs_dim + self.goal_dim, self.obs_dim + 2 * self.goal_dim)

    @property
    def size(self) -> int:
        return self.obs_dim + 2 * self.goal_dim

    def flatten(self, obs: Dict[str, object]) -> np.ndarray:
        """``{"observation", "achieved_goal", "desired_goal"}`` -> flat float32 vector(s)."""
        return np.concatenate(
            [
                np.asarray(obs["observation"], dtype=np.float32),
                np.asarray(obs["achieved_goal"], dtype=np.float32),
                np.asarray(obs["desired_goal"], dtype=np.float32),
            ],
            axis=-1,
        )


class FlattenGoalObservation(gym.ObservationWrapper):
    """Flatten a goal env's dict observation into ``[observation, achieved_goal, desired_goal]``.

    The wrapper keeps ``compute_reward``/``compute_terminated`` reachable (attribute lookups fall
    through to the wrapped env) and exposes ``goal_layout`` (a :class:`GoalLayout`).
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, spaces.Dict) or not {"observation", "achieved_goal", "desired_goal"} <= set(
            space.spaces
        ):
            raise ValueError(
                "FlattenGoalObservation needs a goal env with a Dict observation space holding "
                f"'observation', 'achieved_goal' and 'desired_goal'; got {space!r}"
            )
        boxes: List[spaces.Box] = []
        for k in ("observation", "achieved_goal", "desired_goal"):
            box = space[k]
            if not isinstance(box, spaces.Box):
                raise ValueError(f"FlattenGoalObservation needs a Box space for {k!r}; got {box!r}")
            boxes.append(box)
        o, _, g = boxes
        self.goal_layout = GoalLayout(int(np.prod(o.shape)), int(np.prod(g.shape)))
        lows = [np.ravel(b.low) for b in boxes]
        highs = [np.ravel(b.high) for b in boxes]
        self.observation_space = spaces.Box(
            np.concatenate(lows).astype(np.float32), np.concatenate(highs).astype(np.float32), dtype=np.float32
        )

    def observation(self, observation: Dict[str, object]) -> np.ndarray:
        return self.goal_layout.flatten(observation)

    def compute_reward(self, achieved_goal: object, desired_goal: object, info: object = None) -> np.ndarray:
        return getattr(self.env.unwrapped, "compute_reward")(achieved_goal, desired_goal, info)  # a goal env's

    def compute_terminated(self, achieved_goal: object, desired_goal: object, info: object = None) -> np.ndarray:
        return getattr(self.env.unwrapped, "compute_terminated")(achieved_goal, desired_goal, info)


def register_goal_envs() -> None:
    """Register ``rlpipe/BitFlip-v0`` (kwargs ``n_bits``...) and ``rlpipe/PointGoal-v0`` with gymnasium."""
    for env_id, entry in (
        ("rlpipe/BitFlip-v0", "pipeline.envs.goal_envs:BitFlipEnv"),
        ("rlpipe/PointGoal-v0", "pipeline.envs.goal_envs:PointGoalEnv"),
    ):
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=entry, disable_env_checker=True)
