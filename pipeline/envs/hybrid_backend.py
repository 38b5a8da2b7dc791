"""The subprocess backend with some envs in the caller's process (``EnvManager(..., local_envs=L)``).

Envs ``0 .. L-1`` are stepped in this process (a :class:`~pipeline.envs.sync_backend.SyncBackend`),
envs ``L ..`` by worker processes (a :class:`~pipeline.envs.subprocess_backend.SubprocessBackend`).
A step sends the workers their part first, then steps the local envs while the workers step theirs,
then takes the workers' answers: the collector's process does a share of the env work instead of
waiting. With ``env_num`` envs on ``c`` cores, ``L = env_num // c`` local envs and ``c - 1`` workers
keep one busy process per core (the default subprocess layout runs ``c`` workers plus the collector's
process, which also has work to do: copying observations, building transitions, acting).

The local envs have no worker around them: an exception in one propagates as it is (not as
``EnvWorkerError``), and a local env that hangs is not cut off by ``step_timeout``.
"""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import numpy as np

from .subprocess_backend import SubprocessBackend
from .backend_protocol import StepArrays
from .sync_backend import SyncBackend

__all__ = ['HybridBackend']


class HybridBackend:
    """Envs ``0 .. local-1`` in this process, the rest in worker processes (see the module docstring)."""

    name = 'subprocess'

    def __init__(self, fns: Sequence[Callable[[], object]], local: int, step_timeout: Optional[float] = 60.0,
                 start_method: Optional[str] = None, workers: Optional[int] = None) -> None:
        if not 0 < local < len(fns):
            raise ValueError(f'local_envs must be between 1 and env_num - 1 ({len(fns) - 1}), got {local}')
        self.env_num = len(fns)
        self.local_num = local
        self._local = SyncBackend(fns[:local])
        try:
            self._remote = SubprocessBackend(fns[local:], step_timeout=step_timeout, start_method=start_method,
                                             workers=workers, first=local)
        except BaseException:
            self._local.close()
            raise
        self.observation_space = self._local.observation_space
        self.action_space = self._local.action_space
        self.workers, self.group_size = self._remote.workers, self._remote.group_size
        # (ids, positions of local envs, positions of remote envs, actions, keep_infos), oldest first
        self._requests: Deque[Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]] = deque()

    @property
    def split(self) -> int:
        """Where :meth:`EnvManager.halves` splits: local envs in one half, worker envs in the other."""
        return self.local_num

    @property
    def _procs(self) -> List[Any]:
        return self._remote._procs

    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        while self._requests:
            self.step_wait()
        L = self.local_num
        remote = self._remote.reset(None if seeds is None else list(seeds)[L:])
        local = self._local.reset(None if seeds is None else list(seeds)[:L])
        return np.concatenate([local, remote])

    def step(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> StepArrays:
        self.step_async(ids, actions, keep_infos)
        return self.step_wait()

    def step_async(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> None:
        """Send the worker envs' part of the step now; the local part is stepped in :meth:`step_wait`
        (while the workers step theirs)."""
        is_local = ids < self.local_num
        pos_l = np.flatnonzero(is_local)
        pos_r = np.flatnonzero(~is_local) if len(pos_l) < len(ids) else pos_l[:0]
        if len(pos_r):
            r_ids = ids[pos_r] - self.local_num
            self._remote.step_async(r_ids, actions if len(pos_r) == len(ids) else actions[pos_r], keep_infos)
        self._requests.append((ids, pos_l, pos_r, actions, keep_infos))

    def step_wait(self) -> StepArrays:
        """Step the local envs of the oldest request, then take the workers' answers; merge both."""
        ids, pos_l, pos_r, actions, keep_infos = self._requests.popleft()
        if not len(pos_r):
            return self._local.step(ids, actions, keep_infos)
        if not len(pos_l):
            return self._remote.step_wait()
        try:
            loc = self._local.step(ids[pos_l], actions[pos_l], keep_infos)
        except BaseException:
            try:  # the workers' answers to this step must still be read before any other
                self._remote.step_wait()
            except Exception:  # pragma: no cover - the local error is the one to report
                pass
            raise
        rem = self._remote.step_wait()
        n = len(ids)

        def merge(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = np.empty((n,) + a.shape[1:], dtype=np.result_type(a.dtype, b.dtype))
            out[pos_l] = a
            out[pos_r] = b
            return out

        next_obs = merge(loc[0], rem[0])
        # keep next_obs and after one array where both parts do (no finished episode in this step)
        after = next_obs if (loc[1] is loc[0] and rem[1] is rem[0]) else merge(loc[1], rem[1])
        reward, terminated, truncated = merge(loc[2], rem[2]), merge(loc[3], rem[3]), merge(loc[4], rem[4])
        infos: Optional[List[dict]] = None
        if keep_infos:
            infos = [None] * n  # type: ignore[list-item]  # every slot is filled just below
            for part, pos in ((loc[5], pos_l), (rem[5], pos_r)):
                for j, info in zip(pos.tolist(), part or []):
                    infos[j] = info
        final_infos: Dict[int, dict] = {int(pos_l[j]): info for j, info in loc[6].items()}
        final_infos.update({int(pos_r[j]): info for j, info in rem[6].items()})
        return next_obs, after, reward, terminated, truncated, infos, final_infos

    def close(self) -> None:
        self._requests.clear()
        try:
            self._remote.close()
        finally:
            self._local.close()
