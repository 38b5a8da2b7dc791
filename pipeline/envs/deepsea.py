"""DeepSea: a sparse-reward exploration chain (after bsuite's deep_sea), as a gymnasium env.

The agent starts at the top-left cell of a ``size x size`` grid. Each step it descends one row and
moves one column left or right (clipped at the walls); the episode ends after ``size`` steps. Only
going right at every step reaches the bottom-right cell, which pays ``+1``; each right move costs
``move_cost / size`` (default ``0.01 / size``). Which action index means "right" is drawn per cell
from the seed given to the constructor (``randomize_actions=True``), so no fixed action sequence
solves it. A uniformly random policy finds the reward with probability ``2**-size``.

Observation: a one-hot ``size * size`` float32 vector of the current cell (all zeros once the
episode is over). ``info["found_treasure"]`` is True on the step that reaches the reward.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces

__all__ = ["DeepSeaEnv", "register_deepsea"]


class DeepSeaEnv(gym.Env):
    """DeepSea chain of ``size`` rows (see module docstring).

    Args:
        size: grid side and episode length (default 20).
        seed: seed of the per-cell action mapping (not of episodes; the env is deterministic).
        randomize_actions: draw the "right" action per cell (default True); else action 1 is right.
        move_cost: total cost of going right at every step (default 0.01).
    """

    metadata = {"render_modes": []}

    def __init__(self, size: int = 20, seed: int = 0, randomize_actions: bool = True, move_cost: float = 0.01):
        if not isinstance(size, (int, np.integer)) or size < 2:
            raise ValueError(f"size must be an integer >= 2, got {size!r}")
        self.size = int(size)
        self.move_cost = float(move_cost)
        rng = np.random.default_rng(seed)
        if randomize_actions:
            self._right_action = rng.integers(0, 2, size=(self.size, self.size)).astype(np.int64)
        else:
            self._right_action = np.ones((self.size, self.size), dtype=np.int64)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.size * self.size,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self._row = 0
        self._col = 0
        self._done = True

    @property
    def optimal_return(self) -> float:
        """Return of the only rewarding path: ``1 - move_cost``."""
        return 1.0 - self.move_cost

    def right_action(self, row: int, col: int) -> int:
        """The action index that moves right from cell ``(row, col)``."""
        return int(self._right_action[row, col])

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.size * self.size, dtype=np.float32)
        if self._row < self.size:
            obs[self._row * self.size + self._col] = 1.0
        return obs

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None) -> Tuple[np.ndarray, Dict[str, object]]:
        super().reset(seed=seed)
        self._row, self._col, self._done = 0, 0, False
        return self._obs(), {"found_treasure": False}

    def step(self, action: Any) -> Tuple[np.ndarray, float, bool, bool, Dict[str, object]]:
        if self._done:
            raise RuntimeError("DeepSeaEnv.step called after the episode ended; call reset() first")
        a = int(np.asarray(action).reshape(-1)[0]) if np.ndim(action) else int(action)
        if a not in (0, 1):
            raise ValueError(f"action must be 0 or 1, got {action!r}")
        reward = 0.0
        right = a == self._right_action[self._row, self._col]
        # The treasure pays only when standing in the last column (reachable only by going right at
        # every earlier step, hence only on the last row) and going right once more.
        found = bool(right and self._col == self.size - 1)
        if found:
            reward += 1.0
        if right:
            self._col = min(self._col + 1, self.size - 1)
            reward -= self.move_cost / self.size
        else:
            self._col = max(self._col - 1, 0)
        self._row += 1
        if self._row == self.size:
            self._done = True
        return self._obs(), reward, self._done, False, {"found_treasure": found}


def register_deepsea() -> None:
    """Register ``rlpipe/DeepSea-v0`` (kwargs ``size``, ``seed``...) with gymnasium."""
    if "rlpipe/DeepSea-v0" not in gym.registry:
        gym.register(id="rlpipe/DeepSea-v0", entry_point="pipeline.envs.deepsea:DeepSeaEnv", disable_env_checker=True)
