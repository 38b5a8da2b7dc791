"""A vectorised, auto-resetting env manager over gymnasium, with numpy-batched env-side work.

Backends: ``'sync'`` (every env in this process, stepped in turn), ``'subprocess'`` (worker processes
on gymnasium's ``AsyncVectorEnv`` with shared memory, by default one per core, each stepping a group
of the envs) and ``'envpool'`` (EnvPool's
C++ thread pool, optional extra); ``subprocess`` with ``local_envs`` steps some envs in this process
next to the workers. Observations, rewards and flags come back as numpy arrays, so a collector sees
one ``[env_num, ...]`` batch per step whatever the backend; ``step_async``/``step_wait`` split a step
in two so that the caller can work while the workers step.

Termination (the MDP ended: no bootstrapping) and truncation (a time limit cut the episode:
bootstrapping from ``next_obs`` is correct) are kept apart in every step result.

The pieces the manager is built on have their own modules: :mod:`~pipeline.envs.env_step` (``EnvStep``,
``EpisodeInfo``), :mod:`~pipeline.envs.gym_make` (``make_gym_env``), :mod:`~pipeline.envs.errors`,
:mod:`~pipeline.envs.backends` (choosing a backend) and :mod:`~pipeline.envs.backend_protocol` (what a
backend does); their public names are importable from here too.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

from .backend_protocol import EnvBackend
from .backends import BACKENDS, check_backend_args, make_backend
from .env_step import EnvStep, EpisodeInfo
from .errors import EnvWorkerError, UnknownEnvError
from .gym_make import make_gym_env

__all__ = ['EnvManager', 'EnvStep', 'EpisodeInfo', 'EnvWorkerError', 'UnknownEnvError', 'make_gym_env',
           'BACKENDS']

EnvSpec = Union[str, Callable[[], Any]]
EnvIds = Union[Sequence[int], np.ndarray]
"""Env indices: a sequence of ints or an integer array."""


class EnvManager:
    """Run ``env_num`` copies of an environment in lock step, auto-resetting finished episodes.

    Args:
        env: a gymnasium env id (e.g. ``'CartPole-v1'``), a callable returning an env, or a list
            of ``env_num`` such callables. With ``backend='envpool'``: an EnvPool task id.
        env_num: number of envs.
        seed: base seed; env ``i`` is reset with ``seed + i`` on the first reset (later resets
            continue each env's own random stream, so episodes differ but runs repeat exactly, and
            the ``sync`` and ``subprocess`` backends give the same trajectories for the same seed).
            ``None`` leaves seeding to gymnasium.
        max_episode_steps: time limit passed to ``gymnasium.make`` (ids only).
        env_kwargs: extra keyword arguments for ``gymnasium.make`` (or ``envpool.make_gymnasium``).
        keep_infos: return per-env ``info`` dicts in each ``EnvStep`` (off by default: cheaper).
        backend: ``'sync'`` (in this process), ``'subprocess'`` (worker processes on gymnasium's
            ``AsyncVectorEnv`` with shared memory, each stepping a group of consecutive envs: for
            envs whose step costs more than a pipe round trip, e.g. Atari, MuJoCo) or ``'envpool'``
            (``pip install 'rlpipe[envpool]'``).
        step_timeout: ``subprocess`` only: seconds to wait for a worker before reporting it as hung
            (``EnvWorkerError`` with its stack); ``None`` waits forever.
        start_method: ``subprocess`` only: multiprocessing start method (default: the platform's).
        workers: ``subprocess`` only: at most this many worker processes (default: one per usable
            core, at most ``env_num``); worker ``w`` steps envs ``w*k .. w*k+k-1`` in turn, with
            ``k = ceil(env_num / workers)``. ``workers=env_num`` gives every env its own process.
        local_envs: ``subprocess`` only: step envs ``0 .. local_envs-1`` in this process, while the
            workers step the others (:mod:`pipeline.envs.hybrid_backend`); ``workers`` then defaults
            to one per core but one. E.g. 8 Pong envs on 2 cores: ``local_envs=4`` and one worker.
            A local env's exception propagates as it is, and ``step_timeout`` does not bound it.

    Every backend keeps termination and truncation apart, returns the true final observation of a
    finished episode in ``EnvStep.next_obs``, resets finished envs at once and reports finished
    episodes' returns and lengths. A failing ``subprocess`` worker raises ``EnvWorkerError`` (env
    index and worker traceback); ``close()`` never waits on a hung worker for long.

    Usage::

        mgr = EnvManager('CartPole-v1', 4, seed=0, backend='subprocess')
        obs = mgr.reset()                       # [4, 4] float32
        step = mgr.step(np.zeros(4, np.int64))  # EnvStep; mgr.obs holds the next observations
        lo, hi = mgr.halves()                   # split-phase: one half steps while we work on the other
        mgr.step_async(np.zeros(len(lo), np.int64), lo)
        mgr.step_async(np.zeros(len(hi), np.int64), hi)
        step_lo, step_hi = mgr.step_wait(), mgr.step_wait()
        mgr.close()
    """

    def __init__(self, env: Union[EnvSpec, Sequence[Callable[[], object]]], env_num: int = 1,
                 seed: Optional[int] = None, max_episode_steps: Optional[int] = None,
                 env_kwargs: Optional[Dict[str, object]] = None, keep_infos: bool = False,
                 backend: str = 'sync', step_timeout: Optional[float] = 60.0,
                 start_method: Optional[str] = None, workers: Optional[int] = None, local_envs: int = 0) -> None:
        if not isinstance(env_num, int) or isinstance(env_num, bool) or env_num < 1:
            raise ValueError(f'env_num must be a positive int, got {env_num!r}')
        check_backend_args(env_num, backend, local_envs)
        self.env_num = env_num
        self.backend = backend
        self._seed = seed
        self._keep_infos = keep_infos
        self._backend: EnvBackend = make_backend(env, env_num, backend, seed, max_episode_steps, dict(env_kwargs or {}),
                                                 step_timeout, start_method, workers, local_envs)
        # every backend sets its spaces (EnvBackend names only methods, so that issubclass works with it)
        self.observation_space: gym.Space = getattr(self._backend, 'observation_space')
        self.action_space: gym.Space = getattr(self._backend, 'action_space')
        self._obs: Optional[np.ndarray] = None
        self._ep_return = np.zeros(env_num, dtype=np.float64)
        self._ep_len = np.zeros(env_num, dtype=np.int64)
        self._all_ids = np.arange(env_num, dtype=np.int64)
        self._closed = False
        self._first_reset = True
        # step_async calls in flight, oldest first: (ids, obs, actions, span) where span is None for a
        # step of all envs, (start, stop) for a run of consecutive envs, (-1, -1) for other subsets
        self._pending: Deque[Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[Tuple[int, int]]]] = deque()
        self._busy: Optional[np.ndarray] = None  # [env_num] bool: env has a step in flight
        self._ids_cache: Dict[bytes, Tuple[np.ndarray, Optional[Tuple[int, int]]]] = {}
        # (start, stop) -> the observations (``after``) the last step of exactly envs start..stop-1
        # returned, while no other step or reset has moved them since
        self._run_obs: Dict[Tuple[int, int], np.ndarray] = {}

    # ------------------------------------------------------------------ properties
    @property
    def obs(self) -> np.ndarray:
        """Current observation of every env, ``[env_num, *obs_shape]`` (call ``reset`` first)."""
        if self._obs is None:
            raise RuntimeError('EnvManager.obs is not available before reset(); call reset() first')
        return self._obs

    @property
    def ready_obs(self) -> Dict[int, np.ndarray]:
        """``{env_id: obs}`` for every env (DI-engine-style view of ``obs``)."""
        o = self.obs
        return {i: o[i] for i in range(self.env_num)}

    @property
    def needs_reset(self) -> bool:
        """True until the first ``reset()``."""
        return self._obs is None

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def episode_returns_so_far(self) -> np.ndarray:
        """Return accumulated by each env's running episode."""
        return self._ep_return.copy()

    # ------------------------------------------------------------------ control
    def seed(self, seed: Optional[int]) -> None:
        """Set the base seed used by the next ``reset()``."""
        self._seed = seed
        self._first_reset = True

    def reset(self, seed: Optional[int] = None) -> np.ndarray:
        """Reset every env and return the batch of first observations.

        With ``seed`` (or, on the first reset, the constructor's seed) env ``i`` gets ``seed + i``.
        """
        self._check_open()
        self._drain()
        if seed is not None:
            self._seed = seed
            self._first_reset = True
        seeds = None
        if self._first_reset and self._seed is not None:
            seeds = [self._seed + i for i in range(self.env_num)]
        self._obs = self._backend.reset(seeds)
        self._run_obs.clear()
        self._first_reset = False
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        return self._obs

    def step(self, actions: object, env_ids: Optional[EnvIds] = None) -> EnvStep:
        """Step the envs in ``env_ids`` (default: all) with ``actions`` (one row per env).

        Finished episodes are reset at once: their final observation is ``EnvStep.next_obs`` and
        the first observation of the next episode is in ``self.obs``. Refused while a
        :meth:`step_async` is in flight (collect its result with :meth:`step_wait` first).
        """
        self._check_open()
        if self._pending:
            raise RuntimeError(f'step() while {len(self._pending)} step_async() call(s) are in flight '
                               f'(envs {self._in_flight_ids()}); call step_wait() for each first')
        ids, obs, actions, span = self._prepare(actions, env_ids)
        # nothing in flight: the backend's one-call step (no request queue, no in-flight bookkeeping)
        return self._finish(ids, obs, actions, span, self._backend.step(ids, actions, self._keep_infos))

    def step_async(self, actions: object, env_ids: Optional[EnvIds] = None) -> None:
        """Start stepping the envs in ``env_ids`` (default: all) with ``actions`` and return at once;
        :meth:`step_wait` returns the ``EnvStep``.

        With ``backend='subprocess'`` the workers step while the caller goes on (e.g. computing the
        actions of the other envs); ``sync`` and ``envpool`` do the work in ``step_wait``. Several
        calls may be in flight for disjoint sets of envs; their results come back in the order they
        were started. Sending to an env that already has a step in flight raises ``RuntimeError``.
        ``reset()`` and ``close()`` with steps in flight wait for them (bounded by ``step_timeout``)
        and drop their results.
        """
        self._check_open()
        ids, obs, actions, span = self._prepare(actions, env_ids)
        busy = self._busy
        if busy is None:
            busy = self._busy = np.zeros(self.env_num, dtype=bool)
        elif (busy[span[0]:span[1]] if span is not None and span[0] >= 0 else busy[ids]).any():
            clash = ids[busy[ids]]
            raise RuntimeError(f'envs {clash.tolist()} already have a step_async() in flight; '
                               f'call step_wait() before stepping them again')
        self._backend.step_async(ids, actions, self._keep_infos)
        if span is not None and span[0] >= 0:
            busy[span[0]:span[1]] = True
        else:
            busy[ids] = True
        self._pending.append((ids, obs, actions, span))

    def _prepare(self, actions: object, env_ids: Optional[EnvIds]
                 ) -> Tuple[np.ndarray, np.ndarray, np.ndarray, Optional[Tuple[int, int]]]:
        """Check a step request: ``(ids, obs, actions, span)`` with ``obs`` the observations the actions
        are taken in and ``span`` None for all envs, ``(start, stop)`` for a run of consecutive envs,
        ``(-1, -1)`` for another subset."""
        obs_all = self.obs
        if env_ids is None:
            ids, span = self._all_ids, None
        else:
            ids, span = self._checked_ids(env_ids)
        n = len(ids)
        if hasattr(actions, 'detach'):  # torch tensor
            actions = actions.detach().cpu().numpy()
        actions = np.asarray(actions)
        if actions.shape[:1] != (n,):
            raise ValueError(f'expected one action per stepped env ({n}), got actions of shape '
                             f'{actions.shape}')
        # the observations the actions are taken in: obs_all is never written in place (a step makes
        # a new array), so a view of it can be handed out
        if env_ids is None:
            obs = obs_all
        elif span is not None:
            # the array the last step of exactly these envs returned, when they have not moved since: then
            # a transition's obs and the previous transition's next_obs share memory, as in lock step
            run_obs = self._run_obs.get(span)
            obs = run_obs if run_obs is not None else obs_all[span[0]:span[1]]
        else:
            obs = obs_all[ids]
            span = (-1, -1)
        return ids, obs, actions, span

    def _checked_ids(self, env_ids: object) -> Tuple[np.ndarray, Optional[Tuple[int, int]]]:
        """``env_ids`` as a read-only int64 array, checked (in range, no repeats), and ``(start, stop)``
        when it is a run of consecutive ids (else None). Cached: a collector passes the same few sets."""
        key = None
        if isinstance(env_ids, np.ndarray) and env_ids.dtype == np.int64 and env_ids.ndim == 1:
            key = env_ids.tobytes()
            hit = self._ids_cache.get(key)
            if hit is not None:
                return hit
        ids = np.array(env_ids, dtype=np.int64).reshape(-1)
        if len(ids) and (ids.min() < 0 or ids.max() >= self.env_num):
            raise ValueError(f'env_ids must be in 0..{self.env_num - 1}, got {ids.tolist()}')
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f'env_ids must not repeat an env, got {ids.tolist()}')
        span = (int(ids[0]), int(ids[-1]) + 1) if len(ids) and bool((np.diff(ids) == 1).all()) else None
        ids.flags.writeable = False
        if key is not None and len(self._ids_cache) < 64:
            self._ids_cache[key] = (ids, span)
        return ids, span

    def step_wait(self) -> EnvStep:
        """The ``EnvStep`` of the oldest :meth:`step_async` still in flight (waits for it).

        Raises ``RuntimeError`` when no step is in flight."""
        self._check_open()
        if not self._pending:
            raise RuntimeError('step_wait() without a step_async() in flight: call step_async(actions) first')
        ids, obs, actions, span = self._pending.popleft()
        self._busy[ids] = False  # type: ignore[index]  # set by the step_async that queued this step
        return self._finish(ids, obs, actions, span, self._backend.step_wait())

    def _finish(self, ids: np.ndarray, obs: np.ndarray, actions: np.ndarray, span: Optional[Tuple[int, int]],
                result: Any) -> EnvStep:
        """The ``EnvStep`` of a step of ``ids`` whose backend answer is ``result``; updates ``self.obs``, the
        episode returns and lengths."""
        next_obs, after, reward, terminated, truncated, infos, final_infos = result
        ep_ret, ep_len = self._ep_return, self._ep_len
        if span is None:
            ep_ret += reward
            ep_len += 1
            self._obs = after
            self._run_obs.clear()
        else:
            ep_ret[ids] += reward
            ep_len[ids] += 1
            old = self.obs
            new_obs = np.empty_like(old)  # never in place: earlier EnvSteps and obs batches may share it
            run_obs = self._run_obs
            if run_obs:  # forget the runs that share an env with this step
                stale = [r for r in run_obs if r[0] < span[1] and span[0] < r[1]] if span[0] >= 0 else list(run_obs)
                for r in stale:
                    del run_obs[r]
            if span[0] >= 0:  # a run of consecutive envs
                a, b = span
                new_obs[:a] = old[:a]
                new_obs[a:b] = after
                new_obs[b:] = old[b:]
                run_obs[span] = after
            else:
                new_obs[:] = old
                new_obs[ids] = after
            self._obs = new_obs
        finished: List[EpisodeInfo] = []
        if final_infos:
            for j in sorted(final_infos):
                i = int(ids[j])
                stats = final_infos[j].get('episode')
                score = float(np.asarray(stats['r']).reshape(-1)[0]) if isinstance(stats, dict) and 'r' in stats \
                    else None
                finished.append(EpisodeInfo(i, float(ep_ret[i]), int(ep_len[i]), bool(terminated[j]),
                                            bool(truncated[j]), score))
                ep_ret[i] = 0.0
                ep_len[i] = 0
        return EnvStep(ids, obs, actions, reward.astype(np.float32), next_obs, terminated, truncated,
                       finished, infos)

    @property
    def in_flight(self) -> int:
        """How many :meth:`step_async` calls await their :meth:`step_wait`."""
        return len(self._pending)

    def _in_flight_ids(self) -> List[int]:
        return [] if self._busy is None else np.flatnonzero(self._busy).tolist()

    def _drain(self) -> None:
        """Wait for every step in flight and drop the results (before a reset)."""
        while self._pending:
            ids = self._pending.popleft()[0]
            self._busy[ids] = False  # type: ignore[index]  # set by the step_async that queued it
            try:
                self._backend.step_wait()
            except BaseException:
                self._pending.clear()
                self._busy = None
                raise

    def halves(self) -> Tuple[np.ndarray, np.ndarray]:
        """Env ids ``0 .. m-1`` and ``m .. env_num-1`` (``env_num >= 2``), for overlapped stepping
        (one half steps while the caller works on the other).

        On ``subprocess`` the split falls on a worker group boundary where there is one (so each half
        is a set of whole workers), with ``local_envs`` between the local envs and the workers' ones;
        else it is the middle."""
        if self.env_num < 2:
            raise ValueError('halves() needs env_num >= 2')
        mid = self.env_num // 2
        k = getattr(self._backend, 'group_size', None)
        split = getattr(self._backend, 'split', None)
        workers = getattr(self._backend, 'workers', 1)
        if split:  # local envs | worker envs
            mid = split
        elif self.backend == 'subprocess' and k is not None and workers > 1:
            bounds = [w * k for w in range(1, workers)]
            mid = min(bounds, key=lambda b: (abs(b - self.env_num / 2), b))
        return self._all_ids[:mid].copy(), self._all_ids[mid:].copy()

    def close(self) -> None:
        """Close every env (idempotent; never waits long on a hung subprocess worker)."""
        if self._closed:
            return
        self._closed = True
        self._pending.clear()
        self._busy = None
        self._backend.close()  # waits for steps in flight only up to a bounded timeout

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError('EnvManager is closed; create a new one')

    def __enter__(self) -> 'EnvManager':
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if not getattr(self, '_closed', True) and hasattr(self, '_backend'):
            try:
                self.close()
            except Exception:  # pragma: no cover - interpreter shutdown
                pass

    def __len__(self) -> int:
        return self.env_num

    def __repr__(self) -> str:
        return f'EnvManager(env_num={self.env_num}, backend={self.backend!r}, ' \
               f'obs_space={self.observation_space}, action_space={self.action_space})'
