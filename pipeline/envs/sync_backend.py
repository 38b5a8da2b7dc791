"""The in-process backend: every env lives in the caller's process and is stepped in turn."""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .backend_protocol import StepArrays

__all__ = ['SyncBackend']


class SyncBackend:
    """Envs made by ``fns`` in this process: an :class:`~pipeline.envs.backend_protocol.EnvBackend`
    (``reset``/``step`` return fresh arrays; a finished env is reset within the same ``step``)."""

    name = 'sync'

    def __init__(self, fns: Sequence[Callable[[], object]], mark: Optional[np.ndarray] = None,
                 first: int = 0) -> None:
        # ``mark``: a one-slot int64 array set to the index (``first + j``) of the env being made,
        # reset or stepped, so a subprocess worker's parent can name the env after a crash or a hang
        self._mark = mark
        self._first = first
        self._requests: Deque[Tuple[np.ndarray, np.ndarray, bool]] = deque()  # step_async calls, oldest first
        self._envs: List[Any] = []
        for j, fn in enumerate(fns):
            if mark is not None:
                mark[0] = first + j
            self._envs.append(fn())
        self.observation_space = self._envs[0].observation_space
        self.action_space = self._envs[0].action_space

    @property
    def envs(self) -> List[Any]:
        return self._envs

    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        first = []
        mark = self._mark
        for i, env in enumerate(self._envs):
            if mark is not None:
                mark[0] = self._first + i
            if seeds is not None:
                o, _ = env.reset(seed=seeds[i])
                env.action_space.seed(seeds[i])
            else:
                o, _ = env.reset()
            first.append(o)
        return np.array(first)

    def step_async(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> None:
        """Remember the request: the envs are stepped in :meth:`step_wait` (this process has no one
        else to step them)."""
        self._requests.append((ids, actions, keep_infos))

    def step_wait(self) -> StepArrays:
        """Step the oldest request of :meth:`step_async` now and return what :meth:`step` returns."""
        return self.step(*self._requests.popleft())

    def step(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> StepArrays:
        """Step env ``ids[j]`` with ``actions[j]`` (a numpy scalar or row); return ``(next_obs, after_obs, reward, terminated,
        truncated, infos, final_infos)`` where ``next_obs`` holds the final observation of a finished
        episode, ``after_obs`` the observation each env is in now (the reset one after a finished
        episode) and ``final_infos`` the last info dict of each finished episode by row."""
        envs = self._envs
        mark, first = self._mark, self._first
        next_list: List[object] = []
        after_list: Optional[List[object]] = None
        rewards: List[object] = []
        term: List[object] = []
        trunc: List[object] = []
        infos: Optional[List[dict]] = [] if keep_infos else None
        final_infos: Dict[int, dict] = {}
        # numpy scalars for discrete actions: gymnasium's Discrete.contains checks them faster than ints
        act_list = list(actions)
        for j, i in enumerate(ids.tolist()):
            env = envs[i]
            if mark is not None:
                mark[0] = first + i
            o, r, te, tr, info = env.step(act_list[j])
            next_list.append(o)
            rewards.append(r)
            term.append(te)
            trunc.append(tr)
            if infos is not None:
                infos.append(info)
            if te or tr:
                final_infos[j] = info
                if after_list is None:
                    after_list = next_list[:j]
                o, _ = env.reset()
            if after_list is not None:
                after_list.append(o)
        # np.array of a list of equal-shape rows: a few times cheaper than np.stack for small rows
        next_obs = np.array(next_list)
        after = next_obs if after_list is None else np.array(after_list)
        return (next_obs, after, np.array(rewards, dtype=np.float64), np.array(term, dtype=bool),
                np.array(trunc, dtype=bool), infos, final_infos)

    def close(self) -> None:
        self._requests.clear()
        for env in self._envs:
            try:
                env.close()
            except Exception:  # pragma: no cover - closing must not raise
                pass
