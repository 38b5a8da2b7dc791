"""The EnvPool backend: envs stepped by EnvPool's C++ thread pool (optional extra ``envpool``).

EnvPool resets a finished env on the *next* step it gets (returning the first observation of the
new episode with reward 0). To keep the manager's contract -- a finished env is reset within the
same ``step``, and ``next_obs`` is the true final observation -- this backend steps the finished
envs once more right away (their action is ignored by EnvPool) and takes the reset observation
from that extra step.

EnvPool runs its own versions of the envs: pass an EnvPool task id (``envpool.list_all_envs()``,
e.g. ``'CartPole-v1'``, ``'Pong-v5'``) and EnvPool's own options in ``env_kwargs`` (for Atari see
:func:`pipeline.envs.atari.envpool_atari_kwargs`). Seeds: EnvPool seeds env ``i`` from the base
seed itself; a ``reset(seed=...)`` rebuilds the pool (so the same seed gives the same start).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from .sync_backend import StepArrays

__all__ = ['EnvPoolBackend', 'ENVPOOL_MISSING']

ENVPOOL_MISSING = ("backend='envpool' needs the envpool package, which is not installed: "
                   "pip install 'rlpipe[envpool]' (or pip install envpool), or use "
                   "backend='subprocess' (gymnasium's AsyncVectorEnv) instead")


def import_envpool():
    try:
        import envpool
    except ImportError as e:
        raise ImportError(ENVPOOL_MISSING) from e
    return envpool


class EnvPoolBackend:
    """``env_num`` copies of EnvPool task ``task_id`` (see the module docstring)."""

    name = 'envpool'

    def __init__(self, task_id: Any, env_num: int, seed: Optional[int],
                 env_kwargs: Optional[Dict[str, Any]] = None,
                 max_episode_steps: Optional[int] = None) -> None:
        envpool = import_envpool()
        if not isinstance(task_id, str):
            raise TypeError(f"backend='envpool' takes an EnvPool task id string (e.g. 'Pong-v5'), not "
                            f"{type(task_id).__name__}: EnvPool runs its own C++ envs, not Python env factories")
        known = envpool.list_all_envs()
        if task_id not in known:
            import difflib
            close = difflib.get_close_matches(task_id, known, n=4, cutoff=0.5)
            hint = f' Did you mean: {", ".join(close)}?' if close else ''
            from .env_manager import UnknownEnvError
            raise UnknownEnvError(f'{task_id!r} is not an EnvPool task id.{hint} See envpool.list_all_envs().')
        self._envpool = envpool
        self._task_id = task_id
        self._env_num = env_num
        self._kwargs = dict(env_kwargs or {})
        if max_episode_steps is not None:
            self._kwargs['max_episode_steps'] = int(max_episode_steps)
        self._seed = None
        self._pool = None
        self._make(seed)
        self.observation_space = self._pool.observation_space
        self.action_space = self._pool.action_space
        self._discrete = hasattr(self.action_space, 'n')
        self._all_ids = np.arange(env_num, dtype=np.int32)

    def _make(self, seed: Optional[int]) -> None:
        if self._pool is not None:
            self._pool.close()
        self._seed = seed
        self._fresh = True  # not reset yet: a reset with the pool's own seed need not rebuild it
        self._pool = self._envpool.make_gymnasium(self._task_id, num_envs=self._env_num, batch_size=self._env_num,
                                                  seed=0 if seed is None else int(seed), **self._kwargs)

    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        if seeds is not None and not (self._fresh and int(seeds[0]) == self._seed):
            self._make(int(seeds[0]))
        self._fresh = False
        obs, _ = self._pool.reset()
        return np.array(obs)

    def _actions(self, actions: Any) -> np.ndarray:
        a = np.asarray(actions)
        if self._discrete:
            return a.astype(np.int32, copy=False)
        return a.astype(np.float32, copy=False).reshape(len(a), *self.action_space.shape)

    @staticmethod
    def _rows(order: np.ndarray, env_id: np.ndarray) -> Optional[np.ndarray]:
        """Positions in EnvPool's answer (``info['env_id']`` order) of the envs we asked for, or None
        when it answered in our order."""
        order = np.asarray(order)
        if np.array_equal(order, env_id):
            return None
        lookup = {e: k for k, e in enumerate(order.tolist())}
        return np.fromiter((lookup[e] for e in env_id.tolist()), dtype=np.int64, count=len(env_id))

    def step(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> StepArrays:
        """As :meth:`SyncBackend.step`, with the actions as one array."""
        env_id = self._all_ids if len(ids) == self._env_num else ids.astype(np.int32)
        obs, rew, te, tr, info = self._pool.step(self._actions(actions), env_id)
        pos = self._rows(info['env_id'], env_id)
        next_obs, rew, te, tr = np.asarray(obs), np.asarray(rew), np.asarray(te), np.asarray(tr)
        if pos is not None:
            next_obs, rew, te, tr = next_obs[pos], rew[pos], te[pos], tr[pos]
        else:
            next_obs = next_obs.copy()  # EnvPool may reuse its output buffer
        reward = rew.astype(np.float64)
        terminated = te.astype(bool)
        truncated = tr.astype(bool)
        done = terminated | truncated
        after = next_obs
        final_infos: Dict[int, dict] = {}
        if done.any():
            rows = np.flatnonzero(done)
            d_ids = env_id[rows]
            robs, _, _, _, rinfo = self._pool.step(self._actions(actions)[rows], d_ids)  # actions ignored
            rpos = self._rows(rinfo['env_id'], d_ids)
            robs = np.asarray(robs)
            after = next_obs.copy()
            after[rows] = robs if rpos is None else robs[rpos]
            final_infos = {int(j): {} for j in rows}
        infos = None
        if keep_infos:
            at = np.arange(len(ids)) if pos is None else pos
            infos = [{k: v[at[j]] for k, v in info.items() if isinstance(v, np.ndarray)} for j in range(len(ids))]
        return next_obs, after, reward, terminated, truncated, infos, final_infos

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
