"""Refusing a bad start at once: a misspelled ``--set`` key or env id ends a run with one or two
lines on stderr and exit status 2 (as argparse's usage errors do), before torch is imported and
before a run folder is made.

Importing this module loads neither torch nor gymnasium (gymnasium is imported to check an env id)::

    from pipeline.run.precheck import precheck_config

    precheck_config(user_config, policy='dqn', env_check=True)   # UsageError (exit 2) on a problem
"""
from __future__ import annotations

import difflib
import importlib.util
import sys
from typing import List, Mapping, NoReturn, Optional, Sequence

from easydict import EasyDict

from ..config import ConfigError, check_user_config, compile_config, config_table, format_config_table
from ..device import DeviceError, device_problem, node_learns, policy_device

__all__ = ['UsageError', 'usage_error', 'env_id_problem', 'config_problems', 'device_problems', 'precheck_config',
           'compile_or_exit', 'format_problems', 'list_config']


class UsageError(SystemExit):
    """A start refused for bad input: exit status 2; ``str(e)`` is the message (already printed by
    :func:`usage_error`)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = 2


def usage_error(message: str) -> NoReturn:
    """Print ``message`` to stderr and raise :class:`UsageError` (exit status 2)."""
    print(message, file=sys.stderr, flush=True)
    raise UsageError(message)


def _short(problem: str) -> str:
    """A config problem without the list of known keys when it already suggests a close match."""
    if 'did you mean' in problem and '; known keys here:' in problem:
        return problem.split('; known keys here:')[0]
    return problem


def format_problems(problems: Sequence[str], hint: str = '') -> str:
    """``error: <problem>`` for one problem, ``error: invalid config: <p1>; <p2>`` for more, plus ``hint``
    on a second line."""
    short = [_short(p) for p in problems]
    text = f'error: {short[0]}' if len(short) == 1 else 'error: invalid config: ' + '; '.join(short)
    return text + (f'\n{hint}' if hint else '')


def env_id_problem(env_id: object) -> Optional[str]:
    """``None`` if gymnasium can make ``env_id`` (a registered id, Atari ids once ``ale-py`` registers them,
    ``module:Id`` ids, or anything not a string); otherwise what is wrong, with the closest registered ids
    or the rlpipe extra to install."""
    if not isinstance(env_id, str) or ':' in env_id:
        return None
    import gymnasium as gym  # lazy: checking an env id is the only use; importing this module stays light

    if env_id in gym.registry:
        return _missing_package(env_id, gym.registry[env_id])
    from ..envs.gym_make import _register_ale  # lazy: imports gymnasium and numpy

    atari = env_id.startswith('ALE/') or 'NoFrameskip' in env_id or 'Deterministic' in env_id
    if _register_ale():
        if env_id in gym.registry:
            return None
    elif atari:
        return f"env id {env_id!r} is an Atari game: it needs the atari extra (pip install -e '.[atari]')"
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
    hint = f'; did you mean {", ".join(repr(c) for c in close)}?' if close else '; see gymnasium.registry for the ids'
    return f'unknown gymnasium env id {env_id!r}{hint}'


#: gymnasium entry-point packages -> (module they need, how to install it)
_NEEDS = {'gymnasium.envs.mujoco': ('mujoco', "the mujoco extra: pip install -e '.[mujoco]'"),
          'gymnasium.envs.box2d': ('Box2D', 'pip install "gymnasium[box2d]"')}


def _missing_package(env_id: str, spec: object) -> Optional[str]:
    """What to install for a registered ``env_id`` whose package is missing, or ``None``."""
    entry = str(getattr(spec, 'entry_point', '') or '')
    for prefix, (module, how) in _NEEDS.items():
        if entry.startswith(prefix) and importlib.util.find_spec(module) is None:
            return f'env id {env_id!r} needs the {module!r} package, which is not installed: {how}'
    return None


def config_problems(user: Optional[Mapping], policy: str, env_check: bool = False) -> List[str]:
    """What the config schema of ``policy`` refuses in ``user`` (no torch imported) and, with
    ``env_check``, a problem with ``user['env']['env_id']``."""
    problems = check_user_config(user, policy)
    problems.extend(device_problems(user, problems))
    env = (user or {}).get('env') if isinstance(user, Mapping) else None
    if env_check and isinstance(env, Mapping) and not any(p.startswith('env.env_id') for p in problems):
        problem = env_id_problem(env.get('env_id'))
        if problem is not None:
            problems.append(f'env.env_id: {problem}')
    return problems


def device_problems(user: Optional[Mapping], problems: Sequence[str] = ()) -> List[str]:
    """A one-line problem when ``user`` asks for a CUDA device this machine does not have: ``policy.device``,
    or on a node of a multi-node run that does not learn ``policy.acting_device`` (torch is imported only when
    the value names a CUDA device). Settings already in ``problems`` (misspelt) are not checked again."""
    section = user.get('policy') if isinstance(user, Mapping) else None
    if not isinstance(section, Mapping):
        return []
    key = 'device' if node_learns() else 'acting_device'
    value = section.get(key)
    if not isinstance(value, str) or not value.strip().lower().startswith('cuda') or \
            any(p.startswith(f'policy.{key}') for p in problems):
        return []
    problem = device_problem(value, f'policy.{key}')
    return [problem] if problem is not None else []


def precheck_config(user: Optional[Mapping], policy: str, env_check: bool = False, hint: str = '') -> None:
    """:func:`config_problems`; on any, print them (one line, ``hint`` on a second) and exit with status 2."""
    problems = config_problems(user, policy, env_check)
    if problems:
        usage_error(format_problems(problems, hint))


def compile_or_exit(user: Optional[Mapping], policy: str) -> EasyDict:
    """``compile_config(user, policy=policy)``; a ``ConfigError`` (e.g. optimizer arguments the optimizer
    refuses), or a ``policy.device`` this machine does not have (e.g. ``cuda`` without a GPU; on a node that
    does not learn, ``policy.acting_device``), ends the run like :func:`precheck_config` does."""
    try:
        cfg = compile_config(user, policy=policy)
    except ConfigError as e:
        usage_error(format_problems(e.errors))
    try:
        policy_device(cfg.get('policy', {}))
    except DeviceError as e:
        usage_error(f'error: {e}')
    return cfg


def list_config(user: Optional[Mapping], policy: str, how: str = '--set KEY=VALUE') -> NoReturn:
    """``--list-config``: print every config key of ``policy`` with the value ``user`` gives it (the example's
    settings and any ``--set``, over the schema's defaults) and what is allowed, then exit with status 0. A
    misspelled key or a refused value in ``user`` ends it as :func:`precheck_config` does (no env is checked:
    the list needs no env installed)."""
    precheck_config(user, policy)
    header = f'# every {policy.upper()} config key of this run (set one with {how}): key, default, allowed'
    print(format_config_table(config_table(policy, user), header), flush=True)
    raise SystemExit(0)
