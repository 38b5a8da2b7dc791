"""What the env manager asks of a backend (``sync``, ``subprocess``, hybrid, ``envpool``): :class:`EnvBackend`.

A backend owns ``env_num`` envs, indexed ``0 .. env_num-1``, and sets ``observation_space`` and
``action_space`` (one env's). ``reset(seeds)`` resets every env (env ``i`` with ``seeds[i]`` when given) and
returns the first observations ``[env_num, ...]``. ``step(ids, actions, keep_infos)`` steps env ``ids[j]`` with
``actions[j]`` and returns :data:`StepArrays`; a finished env is reset within the same step. ``step_async``
starts such a step and ``step_wait`` returns the oldest one's :data:`StepArrays` (backends without workers do
the work in ``step_wait``). ``close()`` releases the envs and never waits long on a hung worker.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Protocol, Sequence, Tuple, runtime_checkable

import numpy as np

__all__ = ['EnvBackend', 'StepArrays']

#: ``(next_obs, after_obs, reward, terminated, truncated, infos or None, {row: final info of a finished
#: episode})``: ``next_obs`` holds the final observation of a finished episode, ``after_obs`` the one each env
#: is in now (the reset one after a finished episode); one row per stepped env, in the order of ``ids``.
StepArrays = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Optional[List[dict]],
                   Dict[int, dict]]


@runtime_checkable
class EnvBackend(Protocol):
    """The methods the env manager calls on a backend (see the module docstring); ``isinstance`` and
    ``issubclass`` check that they exist."""

    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        """Reset every env; the batch of first observations."""

    def step(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> StepArrays:
        """Step envs ``ids`` with ``actions`` (one row each) and return the result."""

    def step_async(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> None:
        """Start stepping envs ``ids``; :meth:`step_wait` returns the result."""

    def step_wait(self) -> StepArrays:
        """The result of the oldest :meth:`step_async` still in flight."""

    def close(self) -> None:
        """Close every env."""
