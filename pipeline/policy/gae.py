"""Generalized advantage estimation over a fixed-length rollout ``[T, N]`` (time x envs)."""
from __future__ import annotations

from typing import Tuple

import numpy as np

__all__ = ['gae_advantages']


def gae_advantages(reward: np.ndarray, value: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                   last_value: np.ndarray, final_value: np.ndarray, gamma: float, lam: float
                   ) -> Tuple[np.ndarray, np.ndarray]:
    """GAE(lambda) advantages and value targets (``advantage + value``), both ``[T, N]`` float32.

    Args:
        reward, value: ``[T, N]``; ``value[t]`` is the critic's value of the observation acted in.
        terminated, truncated: ``[T, N]`` bool; the episode ended after step ``t`` (a terminal
            state: no bootstrap) or was cut by a time limit (bootstrap from the final observation).
        last_value: ``[N]`` value of each env's observation after the rollout's last step.
        final_value: ``[T, N]`` value of the true final observation where ``truncated`` (else ignored).
        gamma, lam: discount and GAE lambda.

    The recursion runs backwards over time, vectorised over envs; an episode boundary (either
    kind) cuts it, so nothing leaks from the next episode into this one.
    """
    reward = np.asarray(reward, dtype=np.float32)
    value = np.asarray(value, dtype=np.float32)
    terminated = np.asarray(terminated, dtype=bool)
    truncated = np.asarray(truncated, dtype=bool)
    if reward.ndim != 2 or value.shape != reward.shape or terminated.shape != reward.shape \
            or truncated.shape != reward.shape:
        raise ValueError(f'gae_advantages needs reward, value, terminated, truncated of one shape [T, N]; got '
                         f'{reward.shape}, {value.shape}, {terminated.shape}, {truncated.shape}')
    next_value = np.empty_like(value)
    next_value[:-1] = value[1:]
    next_value[-1] = np.asarray(last_value, dtype=np.float32).reshape(reward.shape[1])
    next_value = np.where(truncated, np.asarray(final_value, dtype=np.float32), next_value)
    delta = reward + np.float32(gamma) * next_value * ~terminated - value
    carry = np.float32(gamma * lam) * ~(terminated | truncated)
    adv = np.empty_like(delta)
    a = np.zeros(reward.shape[1], dtype=np.float32)
    for t in range(reward.shape[0] - 1, -1, -1):
        a = delta[t] + carry[t] * a
        adv[t] = a
    return adv, adv + value
