"""Making one gymnasium env from its id: ``make_gym_env``, with a clear error for an unknown id or a missing
extra, and ``GymEnvFn``, a picklable call of it for the env manager's backends."""
from __future__ import annotations

import difflib
import sys
from typing import Dict, Optional

import gymnasium as gym

from .errors import UnknownEnvError
from .mujoco_log import log_mujoco_warnings

__all__ = ['make_gym_env', 'GymEnvFn', 'env_id_module']


def env_id_module(env_id: object) -> Optional[str]:
    """The module that ``gymnasium.make(env_id)`` would import first, or ``None``: an id of the form
    ``module:Name`` makes gymnasium import ``module`` (running its code) before it looks the name up. Loaders
    of files from elsewhere refuse such an id unless the user names it (see ``pipeline.policy.loading``)."""
    if not isinstance(env_id, str) or ':' not in env_id:
        return None
    return env_id.split(':', 1)[0]


def _missing_extra(env_id: str, err: Exception) -> Optional[str]:
    """The rlpipe extra to install when ``gymnasium.make(env_id)`` failed for want of a package."""
    text = f'{env_id} {err}'.lower()
    if isinstance(err, gym.error.DependencyNotInstalled):
        if 'mujoco' in text:
            return 'mujoco'
        if 'ale' in text or 'atari' in text:
            return 'atari'
    if env_id.startswith('ALE/') or 'NoFrameskip' in env_id:
        try:
            import ale_py  # noqa: F401  (optional extra: atari; is it installed?)
        except ImportError:
            return 'atari'
    return None


def _register_ale() -> bool:
    """Register ALE's Atari ids with gymnasium if ``ale-py`` is installed; True if it is."""
    try:
        import ale_py  # optional extra: atari
    except ImportError:
        return False
    gym.register_envs(ale_py)
    return True


def make_gym_env(env_id: str, max_episode_steps: Optional[int] = None, **kwargs: object) -> gym.Env:
    """``gymnasium.make`` with a clear ``UnknownEnvError`` for ids that are not registered, and an
    ``ImportError`` naming the rlpipe extra to install for Atari (``atari``) or MuJoCo (``mujoco``)."""
    try:
        try:
            env = gym.make(env_id, max_episode_steps=max_episode_steps, disable_env_checker=True, **kwargs)
        except (gym.error.NameNotFound, gym.error.NamespaceNotFound):
            if not _register_ale():  # Atari ids exist only once ale_py is imported
                raise
            env = gym.make(env_id, max_episode_steps=max_episode_steps, disable_env_checker=True, **kwargs)
        if 'mujoco' in sys.modules:  # a MuJoCo env: its warnings go to logging, not to ./MUJOCO_LOG.TXT
            log_mujoco_warnings()
        return env
    except (gym.error.Error, ImportError) as e:
        extra = _missing_extra(str(env_id), e)
        if extra is not None:
            pkg = {'atari': 'ale-py', 'mujoco': 'mujoco'}[extra]
            raise ImportError(f'gymnasium env {env_id!r} needs the {pkg!r} package, which is not installed: '
                              f"pip install 'rlpipe[{extra}]'") from e
        if isinstance(e, ImportError):
            raise
        # NameNotFound, VersionNotFound, NamespaceNotFound, DeprecatedEnv, ...
        names = list(gym.registry.keys())
        close = difflib.get_close_matches(str(env_id), names, n=4, cutoff=0.5)
        hint = f' Did you mean: {", ".join(close)}?' if close else ''
        raise UnknownEnvError(
            f'gymnasium env id {env_id!r} cannot be made: {e}.{hint} '
            f'Pass a registered id (see gymnasium.registry) or a callable returning a gymnasium.Env.'
        ) from e


class GymEnvFn:
    """A picklable ``make_gym_env`` call (subprocess workers may be started with spawn)."""

    def __init__(self, env_id: str, max_episode_steps: Optional[int], kwargs: Dict[str, object]) -> None:
        self.env_id, self.max_episode_steps, self.kwargs = env_id, max_episode_steps, kwargs

    def __call__(self) -> gym.Env:
        return make_gym_env(self.env_id, self.max_episode_steps, **self.kwargs)
