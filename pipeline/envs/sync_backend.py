"""The in-process backend: every env lives in the caller's process and is stepped in turn."""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

__all__ = ['SyncBackend']

# (next_obs, after_obs, reward, terminated, truncated, infos or None, {row: final info of a finished episode})
StepArrays = Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Optional[List[dict]],
                   Dict[int, dict]]


class SyncBackend:
    """Envs made by ``fns`` in this process. See :class:`pipeline.envs.EnvManager` for the contract
    (``reset``/``step`` return fresh arrays; a finished env is reset within the same ``step``)."""

    name = 'sync'

    def __init__(self, fns: Sequence[Callable[[], Any]]) -> None:
        self._envs = [fn() for fn in fns]
        self.observation_space = self._envs[0].observation_space
        self.action_space = self._envs[0].action_space

    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        first = []
        for i, env in enumerate(self._envs):
            if seeds is not None:
                o, _ = env.reset(seed=seeds[i])
                env.action_space.seed(seeds[i])
            else:
                o, _ = env.reset()
            first.append(o)
        return np.stack(first)

    def step(self, ids: np.ndarray, act_list: List[Any], keep_infos: bool) -> StepArrays:
        """Step env ``ids[j]`` with ``act_list[j]``; return ``(next_obs, after_obs, reward, terminated,
        truncated, infos, final_infos)`` where ``next_obs`` holds the final observation of a finished
        episode, ``after_obs`` the observation each env is in now (the reset one after a finished
        episode) and ``final_infos`` the last info dict of each finished episode by row."""
        n = len(ids)
        envs = self._envs
        next_list: List[Any] = [None] * n
        after_list: Optional[List[Any]] = None
        reward = np.empty(n, dtype=np.float64)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        infos: Optional[List[dict]] = [] if keep_infos else None
        final_infos: Dict[int, dict] = {}
        for j in range(n):
            env = envs[ids[j]]
            o, r, te, tr, info = env.step(act_list[j])
            next_list[j] = o
            reward[j] = r
            terminated[j] = te
            truncated[j] = tr
            if infos is not None:
                infos.append(info)
            if te or tr:
                final_infos[j] = info
                if after_list is None:
                    after_list = list(next_list[:j])
                o, _ = env.reset()
            if after_list is not None:
                after_list.append(o)
        next_obs = np.stack(next_list)
        after = next_obs if after_list is None else np.stack(after_list)
        return next_obs, after, reward, terminated, truncated, infos, final_infos

    def close(self) -> None:
        for env in self._envs:
            try:
                env.close()
            except Exception:  # pragma: no cover - closing must not raise
                pass
