"""The EnvPool backend: envs stepped by EnvPool's C++ thread pool (optional extra ``envpool``).

EnvPool resets a finished env on the *next* step it gets (returning the first observation of the
new episode with reward 0). The manager's contract is that a finished env is reset within the same
``step`` and that ``next_obs`` is the true final observation. Asking EnvPool for the reset at once
costs a second round trip through its thread pool on every step where an episode ends (a third of
the steps with CartPole's short random episodes). Instead this backend keeps spare envs:

- the pool holds ``env_num + min(env_num, 8)`` envs; each of the manager's env slots is played by
  one of them at a time, the others are spares that are already reset (their first observation is
  known);
- when a slot's episode ends, the slot moves to a spare at once (``after_obs`` is the spare's reset
  observation) and the finished env is reset by EnvPool on the *next* step, in the same call that
  steps the slots (its action is ignored); then it is a spare again.

Every episode is played from its reset to its end by one EnvPool env, so termination, truncation,
final observations and returns are EnvPool's own; only which EnvPool env plays a slot changes.
Runs repeat exactly for a seed. If more episodes end in one step than there are spares (never with
up to 8 envs), the rest are reset with an extra call.

The backend talks to EnvPool's C++ pool directly (its ``_send``/``_recv``, with the arrays in the
pool's own key order) rather than through EnvPool's Python ``step``, which builds dicts and
unflattens a tree on every call. Pools whose layout is not the plain single-player one (one
``action`` array, one ``obs`` array) go through EnvPool's ``step``, without spares (one extra call
for the finished envs).

One difference from gymnasium: when an episode ends by termination on the very step its time limit
is reached, EnvPool reports it as truncated only (gymnasium's ``TimeLimit`` reports both), and a
learner then bootstraps from that final observation.

EnvPool runs its own versions of the envs: pass an EnvPool task id (``envpool.list_all_envs()``,
e.g. ``'CartPole-v1'``, ``'Pong-v5'``) and EnvPool's own options in ``env_kwargs`` (for Atari see
:func:`pipeline.envs.atari.envpool_atari_kwargs`). Seeds: EnvPool seeds its env ``j`` from the
base seed itself; a ``reset(seed=...)`` rebuilds the pool (so the same seed gives the same start).
"""
from __future__ import annotations

import difflib
from collections import deque
from typing import Any, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .backend_protocol import StepArrays
from .errors import UnknownEnvError

__all__ = ['EnvPoolBackend', 'ENVPOOL_MISSING']

MAX_SPARES = 8  # spare EnvPool envs beyond the env_num that play the slots (see the module docstring)

ENVPOOL_MISSING = ("backend='envpool' needs the envpool package, which is not installed: "
                   "pip install 'rlpipe[envpool]' (or pip install envpool), or use "
                   "backend='subprocess' (gymnasium's AsyncVectorEnv) instead")


def import_envpool() -> Any:
    try:
        import envpool  # optional extra: envpool
    except ImportError as e:
        raise ImportError(ENVPOOL_MISSING) from e
    return envpool


class _RawLayout(NamedTuple):
    """Positions of the fields the backend reads in the list EnvPool's C++ ``_recv`` returns."""
    obs: int
    reward: int
    done: int
    trunc: int
    env_id: int
    infos: Dict[str, int]  # per-env info fields (``info:lives`` -> ``lives``; ``elapsed_step``)


def _raw_layout(pool: Any) -> Optional[_RawLayout]:
    """The layout of ``pool``'s C++ answer when it is the plain single-player one this backend can read
    without EnvPool's Python wrapper, else None (then EnvPool's ``step`` is used)."""
    try:
        states = list(pool._state_keys)
        acts = list(pool._action_keys)
        players = int(pool.config.get('max_num_players', 1))
        if not (callable(pool._send) and callable(pool._recv)):
            return None
    except (AttributeError, TypeError, ValueError):
        return None
    need = ('obs', 'reward', 'done', 'trunc', 'info:env_id')
    if acts != ['env_id', 'players.env_id', 'action'] or players != 1 or not all(k in states for k in need):
        return None
    infos = {k[5:]: i for i, k in enumerate(states) if k.startswith('info:') and '.' not in k}
    if 'elapsed_step' in states:
        infos['elapsed_step'] = states.index('elapsed_step')
    obs, reward, done, trunc, env_id = (states.index(k) for k in need)
    return _RawLayout(obs, reward, done, trunc, env_id, infos)


class EnvPoolBackend:
    """``env_num`` env slots played by EnvPool task ``task_id`` (see the module docstring)."""

    name = 'envpool'
    _pool: Any = None  # the EnvPool pool (envpool has no type hints); built by _make

    def __init__(self, task_id: object, env_num: int, seed: Optional[int],
                 env_kwargs: Optional[Dict[str, object]] = None,
                 max_episode_steps: Optional[int] = None) -> None:
        envpool = import_envpool()
        if not isinstance(task_id, str):
            raise TypeError(f"backend='envpool' takes an EnvPool task id string (e.g. 'Pong-v5'), not "
                            f"{type(task_id).__name__}: EnvPool runs its own C++ envs, not Python env factories")
        known = envpool.list_all_envs()
        if task_id not in known:
            close = difflib.get_close_matches(task_id, known, n=4, cutoff=0.5)
            hint = f' Did you mean: {", ".join(close)}?' if close else ''
            raise UnknownEnvError(f'{task_id!r} is not an EnvPool task id.{hint} See envpool.list_all_envs().')
        self._envpool = envpool
        self._task_id = task_id
        self._env_num = env_num
        self._kwargs = dict(env_kwargs or {})
        if max_episode_steps is not None:
            self._kwargs['max_episode_steps'] = int(max_episode_steps)
        self._seed: Optional[int] = None
        self._requests: Deque[Tuple[np.ndarray, np.ndarray, bool]] = deque()  # step_async calls, oldest first
        self._spares = min(env_num, MAX_SPARES)
        self._make(seed)
        self.observation_space = self._pool.observation_space
        self.action_space = self._pool.action_space
        self._act_shape = tuple(self.action_space.shape or ())
        spec = self._pool.spec.action_array_spec
        self._act_dtype = np.dtype(spec['action'].dtype) if 'action' in spec else \
            np.dtype(np.int32 if hasattr(self.action_space, 'n') else np.float32)

    def _make(self, seed: Optional[int]) -> None:
        if self._pool is not None:
            self._pool.close()
        self._seed = seed
        self._fresh = True  # not reset yet: a reset with the pool's own seed need not rebuild it
        total = self._env_num + self._spares
        make = self._envpool.make_gymnasium
        self._pool = make(self._task_id, num_envs=total, batch_size=total, seed=0 if seed is None else int(seed),
                          **self._kwargs)
        self._raw = _raw_layout(self._pool)
        if self._raw is None and self._spares:  # EnvPool's own step: no spares
            self._pool.close()
            self._spares = 0
            self._make(seed)
            return
        self._total = total
        self._where = np.zeros(total, dtype=np.int64)  # EnvPool env id -> row in the last answer
        self._reset_state()

    def _reset_state(self) -> None:
        self._slot = np.arange(self._env_num, dtype=np.int32)  # slot -> EnvPool env playing it
        self._ready: List[int] = []                            # spare EnvPool envs, reset
        self._ready_obs: Dict[int, np.ndarray] = {}            # their first observations
        self._no_pending = np.zeros(0, dtype=np.int32)
        self._pending = self._no_pending                       # finished EnvPool envs to reset next call

    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        if seeds is not None and not (self._fresh and int(seeds[0]) == self._seed):
            self._make(int(seeds[0]))
        self._fresh = False
        self._reset_state()
        obs, info = self._pool.reset()
        obs = np.asarray(obs)[np.argsort(np.asarray(info['env_id']))]  # in EnvPool env id order
        for j in range(self._env_num, self._total):
            self._ready.append(j)
            self._ready_obs[j] = obs[j].copy()
        return obs[:self._env_num].copy()

    def _actions(self, actions: object) -> np.ndarray:
        """The actions as one C-contiguous array of EnvPool's action dtype and shape."""
        a = np.asarray(actions, dtype=self._act_dtype)
        shape = (len(a),) + self._act_shape
        if a.shape != shape:
            a = a.reshape(shape)
        return a if a.flags.c_contiguous else np.ascontiguousarray(a)

    def _noop(self, k: int) -> np.ndarray:
        """``k`` placeholder actions (EnvPool ignores the action of an env it resets)."""
        return np.zeros((k,) + self._act_shape, dtype=self._act_dtype)

    def step_async(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> None:
        """Remember the request; :meth:`step_wait` steps it (EnvPool's pool answers one batch at a
        time, and its own threads already step the envs in parallel)."""
        self._requests.append((ids, actions, keep_infos))

    def step_wait(self) -> StepArrays:
        """Step the oldest request of :meth:`step_async` now."""
        return self.step(*self._requests.popleft())

    def step(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> StepArrays:
        """As :meth:`SyncBackend.step`, with the actions as one array."""
        act = self._actions(actions)
        if self._raw is None:
            return self._step_public(ids, act, keep_infos)
        raw, pool = self._raw, self._pool
        phys = self._slot[ids]  # a copy: slots move to spares below
        pending = self._pending
        if len(pending):
            send_ids = np.concatenate([phys, pending])
            act = np.concatenate([act, self._noop(len(pending))])
        else:
            send_ids = phys
        pool._send([send_ids, send_ids, act])  # the pool's action keys: env_id, players.env_id, action
        st = pool._recv()
        order, n = st[raw.env_id], len(phys)
        if order.tobytes() == send_ids.tobytes():  # answered in the order asked (EnvPool's sync mode does)
            pos = None
            next_obs = st[raw.obs][:n].copy()  # a copy: EnvPool may reuse its buffers
            done, trunc, reward = st[raw.done][:n], st[raw.trunc][:n].copy(), st[raw.reward][:n].astype(np.float64)
        else:
            where = self._where
            where[order] = np.arange(len(order))
            pos = where[phys]
            next_obs = st[raw.obs][pos]
            done, trunc, reward = st[raw.done][pos], st[raw.trunc][pos], st[raw.reward][pos].astype(np.float64)
        terminated = done & ~trunc
        if len(pending):
            at = np.arange(n, len(order)) if pos is None else self._where[pending]
            obs_p = st[raw.obs][at]
            for k, e in enumerate(pending.tolist()):
                self._ready.append(e)
                self._ready_obs[e] = obs_p[k]
            self._pending = pending = self._no_pending
        infos = None
        if keep_infos:
            rows = range(n) if pos is None else pos.tolist()
            infos = [{name: st[i][p].copy() for name, i in raw.infos.items()} for p in rows]
            for j, info in enumerate(infos):
                info['env_id'] = int(ids[j])  # the slot, not the EnvPool env playing it
        after = next_obs
        final_infos: Dict[int, dict] = {}
        if done.any():
            after = next_obs.copy()
            finished, left = [], []
            for j in np.flatnonzero(done).tolist():
                final_infos[j] = {}
                e = int(phys[j])
                if self._ready:  # move the slot to a spare; reset the finished env on the next call
                    spare = self._ready.pop()
                    self._slot[ids[j]] = spare
                    after[j] = self._ready_obs.pop(spare)
                    finished.append(e)
                else:
                    left.append(j)
            self._pending = np.asarray(finished, dtype=np.int32)
            if left:  # no spare left: reset these now
                rows = np.asarray(left)
                r_ids = phys[rows].astype(np.int32)
                pool._send([r_ids, r_ids, self._noop(len(rows))])
                rst = pool._recv()
                self._where[rst[raw.env_id]] = np.arange(len(rows))
                after[rows] = rst[raw.obs][self._where[r_ids]]
        return next_obs, after, reward, terminated, trunc, infos, final_infos

    def _step_public(self, ids: np.ndarray, act: np.ndarray, keep_infos: bool) -> StepArrays:
        """:meth:`step` through EnvPool's Python ``step`` (pools whose layout is not the plain one; no
        spares: the finished envs are reset with a second call)."""
        env_id = ids.astype(np.int32)
        obs, rew, te, tr, info = self._pool.step(act, env_id)
        pos = _rows(info['env_id'], env_id)
        next_obs, rew, te, tr = np.asarray(obs)[pos], np.asarray(rew)[pos], np.asarray(te)[pos], np.asarray(tr)[pos]
        reward = rew.astype(np.float64)
        terminated = te.astype(bool)
        truncated = tr.astype(bool)
        done = terminated | truncated
        after = next_obs
        final_infos: Dict[int, dict] = {}
        if done.any():
            rows = np.flatnonzero(done)
            d_ids = env_id[rows]
            robs, _, _, _, rinfo = self._pool.step(self._noop(len(rows)), d_ids)  # actions ignored: a reset
            after = next_obs.copy()
            after[rows] = np.asarray(robs)[_rows(rinfo['env_id'], d_ids)]
            final_infos = {int(j): {} for j in rows}
        infos = None
        if keep_infos:
            infos = [{k: v[pos[j]] for k, v in info.items() if isinstance(v, np.ndarray)}
                     for j in range(len(env_id))]
        return next_obs, after, reward, terminated, truncated, infos, final_infos

    def close(self) -> None:
        self._requests.clear()
        if self._pool is not None:
            self._pool.close()
            self._pool = None


def _rows(order: object, env_id: np.ndarray) -> np.ndarray:
    """Positions in EnvPool's answer (``info['env_id']`` order) of the envs we asked for."""
    lookup = {e: k for k, e in enumerate(np.asarray(order).tolist())}
    return np.fromiter((lookup[e] for e in env_id.tolist()), dtype=np.int64, count=len(env_id))
