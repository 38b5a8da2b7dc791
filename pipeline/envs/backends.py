"""Choosing and building the env manager's backend: :data:`BACKENDS` and :func:`make_backend`."""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from .backend_protocol import EnvBackend
from .envpool_backend import EnvPoolBackend
from .gym_make import GymEnvFn, make_gym_env
from .hybrid_backend import HybridBackend
from .subprocess_backend import SubprocessBackend, default_workers
from .sync_backend import SyncBackend

__all__ = ['BACKENDS', 'make_backend', 'env_fns', 'check_backend_args']

BACKENDS = ('sync', 'subprocess', 'envpool')


def check_backend_args(env_num: int, backend: str, local_envs: int) -> None:
    """A ValueError for a backend name or a ``local_envs`` the env manager does not accept."""
    if backend not in BACKENDS:
        raise ValueError(f'backend must be one of {BACKENDS}, got {backend!r}')
    if not isinstance(local_envs, int) or isinstance(local_envs, bool) or local_envs < 0:
        raise ValueError(f'local_envs must be an int >= 0, got {local_envs!r}')
    if local_envs and backend != 'subprocess':
        raise ValueError(f"local_envs is for backend='subprocess' (got backend={backend!r})")
    if local_envs and local_envs >= env_num:
        raise ValueError(f'local_envs must leave at least one env to the workers: local_envs={local_envs}, '
                         f'env_num={env_num}')


def env_fns(env: object, env_num: int, max_episode_steps: Optional[int],
            env_kwargs: Dict[str, object]) -> List[Callable[[], object]]:
    """One env factory per env: ``env``'s list itself, ``env_num`` times a callable, or a gymnasium id made
    into a picklable factory (made once here, so that a bad id fails at once)."""
    if isinstance(env, (list, tuple)):
        if len(env) != env_num:
            raise ValueError(f'got {len(env)} env factories but env_num={env_num}; pass one per env')
        return list(env)
    if isinstance(env, str):
        make_gym_env(env, max_episode_steps, **env_kwargs).close()  # fail fast on a bad id
        return [GymEnvFn(env, max_episode_steps, env_kwargs)] * env_num
    if callable(env):
        return [env] * env_num
    raise TypeError(f'env must be an env id str, a callable returning an env, or a list of '
                    f'callables; got {type(env).__name__}')


def make_backend(env: object, env_num: int, backend: str, seed: Optional[int], max_episode_steps: Optional[int],
                 env_kwargs: Dict[str, object], step_timeout: Optional[float], start_method: Optional[str],
                 workers: Optional[int], local_envs: int) -> EnvBackend:
    """The backend ``backend`` over ``env_num`` copies of ``env`` (see :class:`pipeline.envs.EnvManager` for
    the arguments)."""
    if backend == 'envpool':
        return EnvPoolBackend(env, env_num, seed, env_kwargs, max_episode_steps)
    fns = env_fns(env, env_num, max_episode_steps, env_kwargs)
    if backend == 'subprocess' and local_envs:
        if workers is None:  # one process per core, this one included
            workers = max(1, default_workers(env_num - local_envs + 1) - 1)
        return HybridBackend(fns, local_envs, step_timeout=step_timeout, start_method=start_method, workers=workers)
    if backend == 'subprocess':
        return SubprocessBackend(fns, step_timeout=step_timeout, start_method=start_method, workers=workers)
    return SyncBackend(fns)
