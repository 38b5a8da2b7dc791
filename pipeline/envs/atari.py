"""Atari through ``ale-py`` with gymnasium's standard preprocessing (optional extra ``atari``).

``make_atari_env(env_id, training)`` builds, from an ALE env without frame skipping:

- gymnasium's ``AtariPreprocessing``: up to 30 no-op actions at reset, frame skip 4 with a max-pool
  over the last two frames, 84x84 grayscale (uint8);
- training only: episodic life (losing a life ends the *training* episode; the game goes on without
  a reset) and reward clipping to its sign (gymnasium's ``TransformReward``), with gymnasium's
  ``RecordEpisodeStatistics`` underneath so the raw game score still reaches
  ``EpisodeInfo.score`` at the end of each game;
- gymnasium's ``FrameStackObservation``: the last 4 frames, observations ``[4, 84, 84]`` uint8.

Evaluation envs (``training=False``) have neither episodic life nor clipping: their episode
returns are raw game scores. ``AtariEnvFn`` is the same as a picklable factory for ``EnvManager``
(any backend); :func:`envpool_atari_kwargs` gives EnvPool the same settings.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, SupportsFloat, Tuple

import gymnasium as gym
import numpy as np

from .gym_make import make_gym_env

__all__ = ['make_atari_env', 'AtariEnvFn', 'EpisodicLifeEnv', 'envpool_atari_task', 'envpool_atari_kwargs',
           'ATARI_MISSING']

ATARI_MISSING = ("Atari envs need the 'ale-py' and 'opencv-python-headless' packages: "
                 "pip install 'rlpipe[atari]'")


class EpisodicLifeEnv(gym.Wrapper):
    """Losing a life terminates the (training) episode; ``reset`` then goes on with the same game
    (one no-op step) instead of restarting it. A real game over resets the game."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: object) -> Tuple[object, SupportsFloat, bool, bool, Dict[str, object]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = bool(terminated or truncated)
        lives = _lives(self.env)
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Tuple[object, Dict[str, object]]:
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:  # the no-op step ended the game
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = _lives(self.env)
        return obs, info


def make_atari_env(env_id: str = 'PongNoFrameskip-v4', training: bool = True, noop_max: int = 30,
                   frame_skip: int = 4, screen_size: int = 84, frame_stack: int = 4,
                   max_episode_steps: Optional[int] = None, **kwargs: object) -> gym.Env:
    """An Atari env with the standard preprocessing (see the module docstring).

    ``env_id``: a ``...NoFrameskip-v4`` id or an ``ALE/...-v5`` id (made with ``frameskip=1`` and
    no sticky actions unless ``kwargs`` say otherwise, i.e. the v4 settings). ``training`` adds
    episodic life and reward clipping. ``max_episode_steps`` truncates games after that many agent
    steps (default: ALE's own limit of 108k frames). ``kwargs`` go to ``gymnasium.make``.
    """
    try:
        import cv2  # noqa: F401  (optional extra: atari; gymnasium's AtariPreprocessing resizes with OpenCV)
        import ale_py  # noqa: F401  (optional extra: atari)
    except ImportError as e:
        raise ImportError(ATARI_MISSING) from e

    if env_id.startswith('ALE/'):
        kwargs.setdefault('frameskip', 1)
        kwargs.setdefault('repeat_action_probability', 0.0)
    env = make_gym_env(env_id, None, **kwargs)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=noop_max, frame_skip=frame_skip,
                                          screen_size=screen_size, terminal_on_life_loss=False,
                                          grayscale_obs=True, scale_obs=False)
    if max_episode_steps is not None:  # in agent steps (the ALE env underneath counts frames)
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    if training:
        env = gym.wrappers.RecordEpisodeStatistics(env)  # raw score and length of the whole game
        env = EpisodicLifeEnv(env)
        env = gym.wrappers.TransformReward(env, _sign)
    return gym.wrappers.FrameStackObservation(env, frame_stack)


def _sign(r: SupportsFloat) -> float:
    return float(np.sign(float(r)))


def _lives(env: gym.Env) -> int:
    """The lives left in the ALE game under ``env``."""
    return int(getattr(env.unwrapped, 'ale').lives())


class AtariEnvFn:
    """Picklable ``make_atari_env`` call for ``EnvManager`` (e.g. with ``backend='subprocess'``)."""

    def __init__(self, env_id: str = 'PongNoFrameskip-v4', training: bool = True, **kwargs: Any) -> None:
        self.env_id, self.training, self.kwargs = env_id, training, kwargs

    def __call__(self) -> gym.Env:
        return make_atari_env(self.env_id, self.training, **self.kwargs)

    def __repr__(self) -> str:
        return f'AtariEnvFn({self.env_id!r}, training={self.training})'


def envpool_atari_task(env_id: str) -> str:
    """The EnvPool task id for a gymnasium Atari id: ``'PongNoFrameskip-v4'`` / ``'ALE/Pong-v5'`` ->
    ``'Pong-v5'``."""
    name = env_id.split('/')[-1]
    for suffix in ('NoFrameskip-v4', 'NoFrameskip-v0', '-v5', '-v4', '-v0'):
        if name.endswith(suffix):
            return name[:-len(suffix)] + '-v5'
    return name


def envpool_atari_kwargs(training: bool = True) -> Dict[str, object]:
    """EnvPool options matching :func:`make_atari_env` (no fire reset, no sticky actions, 30 no-ops,
    frame skip 4, 84x84 gray, 4 stacked frames, 27k-step limit; episodic life and sign-clipped
    rewards when ``training``). Note EnvPool reports the clipped return, not the raw score."""
    return dict(episodic_life=training, reward_clip=training, noop_max=30, frame_skip=4, stack_num=4,
                img_height=84, img_width=84, gray_scale=True, repeat_action_probability=0.0,
                use_fire_reset=False, max_episode_steps=27000)
