"""A vectorised, auto-resetting env manager over gymnasium, with numpy-batched env-side work.

All envs live in this process and are stepped in turn; observations, rewards and flags are
written into numpy arrays, so a collector sees one ``[env_num, ...]`` batch per step and no
per-env Python objects besides what gymnasium itself returns.

Termination (the MDP ended: no bootstrapping) and truncation (a time limit cut the episode:
bootstrapping from ``next_obs`` is correct) are kept apart in every step result.
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Union

import numpy as np

__all__ = ['EnvManager', 'EnvStep', 'EpisodeInfo', 'UnknownEnvError', 'make_gym_env']


class UnknownEnvError(ValueError):
    """The gymnasium env id is not registered."""


class EpisodeInfo(NamedTuple):
    """One finished episode: which env, its undiscounted return and length, and how it ended."""
    env_id: int
    episode_return: float
    length: int
    terminated: bool
    truncated: bool


class EnvStep(NamedTuple):
    """The result of stepping some envs once (all arrays share the first axis, one row per env).

    ``obs`` is the observation the action was taken in; ``next_obs`` is the observation reached,
    which for a finished episode is the final observation (not the reset one: the manager has
    already reset that env, and its next observation is in ``EnvManager.obs``).
    """
    env_ids: np.ndarray       # [n] int64
    obs: np.ndarray           # [n, *obs_shape]
    action: np.ndarray        # [n, *act_shape]
    reward: np.ndarray        # [n] float32
    next_obs: np.ndarray      # [n, *obs_shape]
    terminated: np.ndarray    # [n] bool
    truncated: np.ndarray     # [n] bool
    finished: List[EpisodeInfo]  # episodes that ended in this step
    infos: Optional[List[dict]]  # per-env info dicts, only when ``keep_infos=True``

    @property
    def done(self) -> np.ndarray:
        """``terminated | truncated``."""
        return self.terminated | self.truncated


def make_gym_env(env_id: str, max_episode_steps: Optional[int] = None, **kwargs: Any):
    """``gymnasium.make`` with a clear ``UnknownEnvError`` for ids that are not registered."""
    import gymnasium as gym  # lazy: gymnasium is not imported by ``import pipeline``

    try:
        return gym.make(env_id, max_episode_steps=max_episode_steps, disable_env_checker=True, **kwargs)
    except gym.error.Error as e:
        # NameNotFound, VersionNotFound, NamespaceNotFound, DeprecatedEnv, ...
        names = list(gym.registry.keys())
        close = difflib.get_close_matches(str(env_id), names, n=4, cutoff=0.5)
        hint = f' Did you mean: {", ".join(close)}?' if close else ''
        raise UnknownEnvError(
            f'gymnasium env id {env_id!r} cannot be made: {e}.{hint} '
            f'Pass a registered id (see gymnasium.registry) or a callable returning a gymnasium.Env.'
        ) from e


EnvSpec = Union[str, Callable[[], Any]]


class EnvManager:
    """Run ``env_num`` copies of an environment in lock step, auto-resetting finished episodes.

    Args:
        env: a gymnasium env id (e.g. ``'CartPole-v1'``), a callable returning an env, or a list
            of ``env_num`` such callables.
        env_num: number of envs.
        seed: base seed; env ``i`` is reset with ``seed + i`` on the first reset (later resets
            continue each env's own random stream, so episodes differ but runs repeat exactly).
            ``None`` leaves seeding to gymnasium.
        max_episode_steps: time limit passed to ``gymnasium.make`` (ids only).
        env_kwargs: extra keyword arguments for ``gymnasium.make``.
        keep_infos: return per-env ``info`` dicts in each ``EnvStep`` (off by default: cheaper).

    Usage::

        mgr = EnvManager('CartPole-v1', 4, seed=0)
        obs = mgr.reset()                       # [4, 4] float32
        step = mgr.step(np.zeros(4, np.int64))  # EnvStep; mgr.obs holds the next observations
    """

    def __init__(self, env: Union[EnvSpec, Sequence[Callable[[], Any]]], env_num: int = 1,
                 seed: Optional[int] = None, max_episode_steps: Optional[int] = None,
                 env_kwargs: Optional[Dict[str, Any]] = None, keep_infos: bool = False) -> None:
        if not isinstance(env_num, int) or isinstance(env_num, bool) or env_num < 1:
            raise ValueError(f'env_num must be a positive int, got {env_num!r}')
        env_kwargs = dict(env_kwargs or {})
        if isinstance(env, (list, tuple)):
            if len(env) != env_num:
                raise ValueError(f'got {len(env)} env factories but env_num={env_num}; pass one per env')
            fns = list(env)
        elif isinstance(env, str):
            env_id = env
            make_gym_env(env_id, max_episode_steps, **env_kwargs).close()  # fail fast on a bad id
            fns = [lambda: make_gym_env(env_id, max_episode_steps, **env_kwargs)] * env_num
        elif callable(env):
            fns = [env] * env_num
        else:
            raise TypeError(f'env must be an env id str, a callable returning an env, or a list of '
                            f'callables; got {type(env).__name__}')
        self.env_num = env_num
        self._envs = [fn() for fn in fns]
        self._seed = seed
        self._keep_infos = keep_infos
        e0 = self._envs[0]
        self.observation_space = e0.observation_space
        self.action_space = e0.action_space
        import gymnasium as gym
        self._discrete = isinstance(self.action_space, gym.spaces.Discrete)
        self._obs: Optional[np.ndarray] = None
        self._ep_return = np.zeros(env_num, dtype=np.float64)
        self._ep_len = np.zeros(env_num, dtype=np.int64)
        self._all_ids = np.arange(env_num, dtype=np.int64)
        self._closed = False
        self._first_reset = True

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
        if seed is not None:
            self._seed = seed
            self._first_reset = True
        first = []
        for i, env in enumerate(self._envs):
            if self._first_reset and self._seed is not None:
                o, _ = env.reset(seed=self._seed + i)
                env.action_space.seed(self._seed + i)
            else:
                o, _ = env.reset()
            first.append(o)
        self._first_reset = False
        self._obs = np.stack(first)
        self._ep_return[:] = 0.0
        self._ep_len[:] = 0
        return self._obs

    def step(self, actions: Any, env_ids: Optional[Sequence[int]] = None) -> EnvStep:
        """Step the envs in ``env_ids`` (default: all) with ``actions`` (one row per env).

        Finished episodes are reset at once: their final observation is ``EnvStep.next_obs`` and
        the first observation of the next episode is in ``self.obs``.
        """
        self._check_open()
        obs_all = self.obs
        if env_ids is None:
            ids = self._all_ids
            obs = obs_all
        else:
            ids = np.asarray(env_ids, dtype=np.int64)
            obs = obs_all[ids]
        n = len(ids)
        if hasattr(actions, 'detach'):  # torch tensor
            actions = actions.detach().cpu().numpy()
        actions = np.asarray(actions)
        if actions.shape[:1] != (n,):
            raise ValueError(f'expected one action per stepped env ({n}), got actions of shape '
                             f'{actions.shape}')
        act_list = actions.tolist() if self._discrete else list(actions)
        next_obs = np.empty_like(obs)
        reward = np.empty(n, dtype=np.float32)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        infos: Optional[List[dict]] = [] if self._keep_infos else None
        finished: List[EpisodeInfo] = []
        envs = self._envs
        ep_ret, ep_len = self._ep_return, self._ep_len
        new_obs = obs_all.copy()
        for j in range(n):
            i = int(ids[j])
            o, r, te, tr, info = envs[i].step(act_list[j])
            next_obs[j] = o
            reward[j] = r
            terminated[j] = te
            truncated[j] = tr
            ep_ret[i] += r
            ep_len[i] += 1
            if infos is not None:
                infos.append(info)
            if te or tr:
                finished.append(EpisodeInfo(i, float(ep_ret[i]), int(ep_len[i]), bool(te), bool(tr)))
                ep_ret[i] = 0.0
                ep_len[i] = 0
                o, _ = envs[i].reset()
            new_obs[i] = o
        self._obs = new_obs
        return EnvStep(ids, obs, actions, reward, next_obs, terminated, truncated, finished, infos)

    def close(self) -> None:
        """Close every env (idempotent)."""
        if self._closed:
            return
        for env in self._envs:
            try:
                env.close()
            except Exception:  # pragma: no cover - closing must not raise
                pass
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError('EnvManager is closed; create a new one')

    def __enter__(self) -> 'EnvManager':
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __len__(self) -> int:
        return self.env_num

    def __repr__(self) -> str:
        return f'EnvManager(env_num={self.env_num}, obs_space={self.observation_space}, ' \
               f'action_space={self.action_space})'
