"""MuJoCo through gymnasium's MuJoCo envs (optional extra ``mujoco``: ``pip install 'rlpipe[mujoco]'``).

``MujocoEnvFn('HalfCheetah-v5')`` is a picklable env factory for ``EnvManager`` (any backend but
``envpool``): gymnasium's env with float32 observations and actions rescaled to ``[-1, 1]`` (what
:class:`pipeline.policy.sac.SACPolicy` emits), keeping gymnasium's time limit (1000 steps:
truncation, not termination).
"""
from __future__ import annotations

from typing import Callable, Optional

import gymnasium as gym
import numpy as np

from .gym_make import make_gym_env
from .mujoco_log import log_mujoco_warnings

__all__ = ['MujocoEnvFn', 'RescaledEnvFn', 'make_mujoco_env', 'rescaled_float32', 'log_mujoco_warnings']


def make_mujoco_env(env_id: str = 'HalfCheetah-v5', max_episode_steps: Optional[int] = None, **kwargs: object) -> gym.Env:
    """gymnasium MuJoCo env ``env_id`` with float32 observations and actions in ``[-1, 1]``."""
    return rescaled_float32(make_gym_env(env_id, max_episode_steps, **kwargs), repr(env_id))


def rescaled_float32(env: gym.Env, name: str = 'the env') -> gym.Env:
    """``env`` with actions rescaled to ``[-1, 1]`` and float32 observations (what :func:`make_mujoco_env` makes
    of a gymnasium id); ``name`` names it in the ValueError for an env whose actions are not a Box."""
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ValueError(f'{name} has a {type(env.action_space).__name__} action space; expected Box')
    shape, dtype = env.action_space.shape, env.action_space.dtype
    env = gym.wrappers.RescaleAction(env, np.full(shape, -1.0, dtype), np.full(shape, 1.0, dtype))
    space = env.observation_space
    if not isinstance(space, gym.spaces.Box):
        raise ValueError(f'{name} has a {type(space).__name__} observation space; expected Box')
    f32 = gym.spaces.Box(space.low.astype(np.float32), space.high.astype(np.float32), dtype=np.float32)
    return gym.wrappers.TransformObservation(env, _to_float32, f32)


def _to_float32(obs: np.ndarray) -> np.ndarray:
    return np.asarray(obs, dtype=np.float32)


class MujocoEnvFn:
    """Picklable :func:`make_mujoco_env` call."""

    def __init__(self, env_id: str = 'HalfCheetah-v5', max_episode_steps: Optional[int] = None, **kwargs: object) -> None:
        self.env_id, self.max_episode_steps, self.kwargs = env_id, max_episode_steps, kwargs

    def __call__(self) -> gym.Env:
        return make_mujoco_env(self.env_id, self.max_episode_steps, **self.kwargs)

    def __repr__(self) -> str:
        return f'MujocoEnvFn({self.env_id!r})'


class RescaledEnvFn:
    """A callable returning an env (a user's), its envs made as :func:`rescaled_float32` makes them."""

    def __init__(self, maker: Callable[[], gym.Env]) -> None:
        self.maker = maker

    def __call__(self) -> gym.Env:
        return rescaled_float32(self.maker(), getattr(self.maker, '__name__', 'the env'))
