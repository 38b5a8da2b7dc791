"""What stepping envs returns: ``EnvStep`` (one row per stepped env) and ``EpisodeInfo`` (a finished episode)."""
from __future__ import annotations

from typing import List, NamedTuple, Optional

import numpy as np

__all__ = ['EnvStep', 'EpisodeInfo']


class EpisodeInfo(NamedTuple):
    """One finished episode: which env, its undiscounted return and length, and how it ended.

    ``score`` is the game's raw score when the env reports one at the end of a game in
    ``info['episode']['r']`` (gymnasium's ``RecordEpisodeStatistics`` placed under training-only
    wrappers such as reward clipping and episodic life: see :mod:`pipeline.envs.atari`); else None.
    """
    env_id: int
    episode_return: float
    length: int
    terminated: bool
    truncated: bool
    score: Optional[float] = None


class EnvStep(NamedTuple):
    """The result of stepping some envs once (all arrays share the first axis, one row per env).

    ``obs`` is the observation the action was taken in; ``next_obs`` is the observation reached,
    which for a finished episode is the final observation (not the reset one: the manager has
    already reset that env, and its next observation is in ``EnvManager.obs``).
    """
    env_ids: np.ndarray       # [n] int64
    obs: np.ndarray           # [n, *obs_shape]
    action: np.ndarray        # [n, *act_shape]
    reward: np.ndarray        # [n] float32
    next_obs: np.ndarray      # [n, *obs_shape]
    terminated: np.ndarray    # [n] bool
    truncated: np.ndarray     # [n] bool
    finished: List[EpisodeInfo]  # episodes that ended in this step
    infos: Optional[List[dict]]  # per-env info dicts, only when ``keep_infos=True``

    @property
    def done(self) -> np.ndarray:
        """``terminated | truncated``."""
        return self.terminated | self.truncated
