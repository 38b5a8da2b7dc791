"""Configuration: easydict defaults per policy, and a merge that checks user overrides.

Usage::

    from pipeline.config import compile_config
    cfg = compile_config({'env': {'env_id': 'CartPole-v1', 'stop_value': 475}}, policy='dqn')
    cfg.policy.learn.batch_size  # -> 64

``merge_config`` refuses keys that the defaults do not have (with close-match suggestions) and
values whose type does not fit the default's type; every problem is listed in one
``ConfigError``.  Sections named in ``FREE_FORM_KEYS`` (e.g. ``env.env_kwargs``) accept any key.
"""
from __future__ import annotations

import copy
import difflib
from typing import Any, Dict, Iterable, List, Mapping, Optional

from easydict import EasyDict

__all__ = [
    'ConfigError', 'dqn_default_config', 'get_default_config', 'merge_config', 'compile_config',
    'register_default_config', 'FREE_FORM_KEYS',
]


class ConfigError(ValueError):
    """Raised when user overrides do not fit the defaults. ``errors`` lists every problem."""

    def __init__(self, errors: List[str]):
        self.errors = list(errors)
        msg = 'invalid config:\n  - ' + '\n  - '.join(self.errors)
        super().__init__(msg)


# Dotted paths whose value is a free-form mapping: any keys are accepted below them.
FREE_FORM_KEYS = {'env.env_kwargs', 'policy.model.extra', 'policy.learn.optimizer_kwargs'}

# Keys whose default is None but whose type is known, so that wrong types are still caught.
_NONE_DEFAULT_TYPES: Dict[str, tuple] = {
    'env.max_episode_steps': (int,),
    'env.stop_value': (int, float),
    'policy.model.obs_shape': (int, list, tuple),
    'policy.model.action_shape': (int,),
    'policy.model.head_hidden_size': (int,),
    'policy.learn.grad_clip': (int, float),
    'policy.learn.target_theta': (int, float),
    'seed': (int,),
}


def dqn_default_config() -> EasyDict:
    """Default DQN config (DI-engine 0.5.3's CartPole DQN settings where they apply).

    Sections: ``exp_name``, ``seed``, ``env`` (env id, env counts, stop value), ``policy``
    (``model``, ``learn``, ``collect``, ``eval``, ``other.eps``, ``other.replay_buffer``).
    """
    return EasyDict({
        'exp_name': 'cartpole_dqn',
        'seed': 0,
        'env': {
            'env_id': 'CartPole-v0',
            'collector_env_num': 8,
            'evaluator_env_num': 5,
            'n_evaluator_episode': 5,
            'stop_value': 195,
            'max_episode_steps': None,
            'env_kwargs': {},
        },
        'policy': {
            'type': 'dqn',
            'cuda': False,
            'discount_factor': 0.97,
            'nstep': 1,
            'model': {
                'obs_shape': None,            # inferred from the env when None
                'action_shape': None,         # inferred from the env when None
                'encoder_hidden_size_list': [128, 128, 64],
                'dueling': True,
                'head_hidden_size': None,     # defaults to the last encoder size
                'head_layer_num': 1,
                'extra': {},
            },
            'learn': {
                'update_per_collect': 5,
                'batch_size': 64,
                'learning_rate': 1e-3,
                'optimizer': 'adam',
                'optimizer_kwargs': {},
                'double_dqn': True,
                'loss': 'mse',                # 'mse' or 'huber'
                'target_update_type': 'hard',  # 'hard' or 'soft'
                'target_update_freq': 100,    # hard update: every this many train iterations
                'target_theta': None,         # soft update: target <- theta*online + (1-theta)*target
                'grad_clip': None,            # max global grad norm, None for no clipping
                'truncation_as_terminal': True,  # DI-engine treats a time-limit end as terminal
                'learning_starts': 64,        # fetch nothing until the buffer holds this many
            },
            'collect': {
                'n_sample': 8,
                'n_episode': 8,               # used by EpisodeCollector
                'unroll_len': 1,
            },
            'eval': {
                'evaluator': {'eval_freq': 40},
            },
            'other': {
                'eps': {'type': 'exp', 'start': 0.95, 'end': 0.1, 'decay': 10000},
                'replay_buffer': {
                    'replay_buffer_size': 20000,
                    'priority': False,
                    'priority_IS_weight': False,
                    'priority_power_factor': 0.6,
                    'IS_weight_power_factor': 0.4,
                    'IS_weight_anneal_train_iter': 100000,
                },
            },
        },
    })


_DEFAULTS = {'dqn': dqn_default_config}


def register_default_config(policy: str, factory) -> None:
    """Register ``factory() -> EasyDict`` as the defaults for ``policy``."""
    _DEFAULTS[policy] = factory


def get_default_config(policy: str = 'dqn') -> EasyDict:
    """A fresh copy of the defaults for ``policy`` (e.g. ``'dqn'``)."""
    try:
        return _DEFAULTS[policy]()
    except KeyError:
        raise ValueError(
            f'no default config for policy {policy!r}; known policies: {sorted(_DEFAULTS)}'
        ) from None


def _type_ok(default: Any, value: Any, path: str) -> Optional[str]:
    """None if ``value`` fits ``default``'s type, else a message."""
    if value is None:
        return None  # None always means "unset / use the fallback"
    if default is None:
        allowed = _NONE_DEFAULT_TYPES.get(path)
        if allowed is None or (isinstance(value, allowed) and not isinstance(value, bool)):
            return None
        names = ' or '.join(t.__name__ for t in allowed)
        return f'{path}: expected {names} (or None), got {type(value).__name__} {value!r}'
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        want = 'bool'
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        want = 'int'
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        want = 'float (or int)'
    elif isinstance(default, str):
        ok = isinstance(value, str)
        want = 'str'
    elif isinstance(default, (list, tuple)):
        ok = isinstance(value, (list, tuple))
        want = 'list or tuple'
    elif isinstance(default, Mapping):
        ok = isinstance(value, Mapping)
        want = 'mapping (dict)'
    else:
        ok = isinstance(value, type(default))
        want = type(default).__name__
    if ok:
        return None
    return f'{path}: expected {want}, got {type(value).__name__} {value!r}'


def _merge(default: Mapping, user: Mapping, prefix: str, errors: List[str], out: dict) -> None:
    for key, value in user.items():
        path = f'{prefix}{key}'
        if key not in default:
            if prefix[:-1] in FREE_FORM_KEYS:
                out[key] = copy.deepcopy(value)
                continue
            close = difflib.get_close_matches(str(key), [str(k) for k in default], n=3, cutoff=0.6)
            hint = f' (did you mean {", ".join(repr(c) for c in close)}?)' if close else ''
            known = ', '.join(sorted(str(k) for k in default))
            errors.append(f'{path}: unknown key{hint}; known keys here: {known}')
            continue
        dv = default[key]
        msg = _type_ok(dv, value, path)
        if msg is not None:
            errors.append(msg)
            continue
        if isinstance(dv, Mapping) and isinstance(value, Mapping) and path not in FREE_FORM_KEYS:
            sub = dict(out[key]) if isinstance(out.get(key), Mapping) else {}
            _merge(dv, value, path + '.', errors, sub)
            out[key] = sub
        elif isinstance(dv, Mapping) and isinstance(value, Mapping):
            merged = dict(dv)
            merged.update(copy.deepcopy(dict(value)))
            out[key] = merged
        else:
            out[key] = copy.deepcopy(value)


def merge_config(default: Mapping, user: Optional[Mapping]) -> EasyDict:
    """Return ``default`` updated recursively with ``user``; neither input is modified.

    Raises:
        ConfigError: listing every unknown key (with suggestions) and every value whose type does
            not fit the default (an int is accepted where a float is expected; a bool is never an
            int; ``None`` is accepted anywhere and means "unset").
    """
    if user is None:
        return EasyDict(copy.deepcopy(dict(default)))
    if not isinstance(user, Mapping):
        raise ConfigError([f'config overrides must be a mapping (dict), got {type(user).__name__}'])
    out = copy.deepcopy(_to_dict(default))
    errors: List[str] = []
    _merge(default, user, '', errors, out)
    if errors:
        raise ConfigError(errors)
    return EasyDict(out)


def _to_dict(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {k: _to_dict(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_to_dict(v) for v in x]
    return x


def _check_values(cfg: EasyDict) -> None:
    errors = []
    p = cfg.policy
    if p.learn.target_update_type not in ('hard', 'soft'):
        errors.append(f"policy.learn.target_update_type: expected 'hard' or 'soft', "
                      f'got {p.learn.target_update_type!r}')
    if p.learn.target_update_type == 'soft' and p.learn.target_theta is None:
        errors.append('policy.learn.target_theta: soft target update needs a theta in (0, 1], e.g. 0.005')
    if p.learn.target_theta is not None and not (0.0 < p.learn.target_theta <= 1.0):
        errors.append(f'policy.learn.target_theta: must be in (0, 1], got {p.learn.target_theta}')
    if p.learn.loss not in ('mse', 'huber'):
        errors.append(f"policy.learn.loss: expected 'mse' or 'huber', got {p.learn.loss!r}")
    for path, v in [('policy.nstep', p.nstep), ('policy.learn.batch_size', p.learn.batch_size),
                    ('policy.learn.update_per_collect', p.learn.update_per_collect),
                    ('policy.collect.n_sample', p.collect.n_sample),
                    ('env.collector_env_num', cfg.env.collector_env_num),
                    ('env.evaluator_env_num', cfg.env.evaluator_env_num),
                    ('env.n_evaluator_episode', cfg.env.n_evaluator_episode)]:
        if v < 1:
            errors.append(f'{path}: must be >= 1, got {v}')
    if not (0.0 <= p.discount_factor <= 1.0):
        errors.append(f'policy.discount_factor: must be in [0, 1], got {p.discount_factor}')
    eps = p.other.eps
    if eps.type not in ('exp', 'linear'):
        errors.append(f"policy.other.eps.type: expected 'exp' or 'linear', got {eps.type!r}")
    if errors:
        raise ConfigError(errors)


def compile_config(user: Optional[Mapping] = None, policy: str = 'dqn') -> EasyDict:
    """Defaults of ``policy`` merged with ``user`` overrides, then value-checked.

    ``user`` may also carry ``policy.type``; it must match ``policy``.
    """
    cfg = merge_config(get_default_config(policy), user)
    if cfg.policy.type != policy:
        raise ConfigError([f'policy.type: {cfg.policy.type!r} does not match policy={policy!r}'])
    _check_values(cfg)
    return cfg


def flatten_keys(cfg: Mapping, prefix: str = '') -> Iterable[str]:
    """Dotted paths of every leaf in ``cfg`` (handy to see what can be set)."""
    for k, v in cfg.items():
        if isinstance(v, Mapping) and v and f'{prefix}{k}' not in FREE_FORM_KEYS:
            yield from flatten_keys(v, f'{prefix}{k}.')
        else:
            yield f'{prefix}{k}'
