"""Configuration: each policy's schema (defaults, types, ranges), a checked merge, ``--set`` overrides.

Usage::

    from pipeline.config import compile_config
    cfg = compile_config({'env': {'env_id': 'CartPole-v1', 'stop_value': 475}}, policy='dqn')
    cfg.policy.learn.batch_size  # -> 64

Every policy declares its config once, as a schema (:mod:`pipeline.config.schema`) next to the
policy: ``DQN_CONFIG`` in :mod:`pipeline.policy.dqn`, ``SAC_CONFIG`` in :mod:`pipeline.policy.sac`.
:func:`compile_config` merges the user's overrides into the defaults and lists, in one
``ConfigError`` raised before anything is built, every unknown key (with close-match
suggestions), every value whose type or range the schema refuses (naming the key and what is
allowed) and every inconsistency between values that the policy checks (e.g. a soft target update
without ``target_theta``). :func:`apply_overrides` turns command-line ``KEY=VALUE`` strings (the
examples' ``--set``) into overrides.
"""
from __future__ import annotations

import ast
import copy
import difflib
import importlib
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple

from easydict import EasyDict

from . import schema as S
from .policy_schemas import SCHEMAS

__all__ = [
    'ConfigError', 'get_default_config', 'get_schema', 'merge_config', 'compile_config',
    'register_policy_config', 'apply_overrides', 'parse_override', 'flatten_keys',
    'FREE_FORM_KEYS', 'RENAMED_KEYS', 'check_user_config', 'config_table', 'format_config_table', 'find_keys',
    'SB3_NAMES',
]


class ConfigError(ValueError):
    """Raised when user overrides do not fit the defaults. ``errors`` lists every problem."""

    def __init__(self, errors: List[str]):
        self.errors = list(errors)
        msg = 'invalid config:\n  - ' + '\n  - '.join(self.errors)
        super().__init__(msg)


#: Keys that were replaced: dotted path -> the one-line message a config that still sets one gets.
RENAMED_KEYS: Dict[str, str] = {
    'policy.cuda': "policy.cuda: this key was replaced by policy.device ('auto', 'cpu', 'cuda' or 'cuda:N'; "
                   "e.g. --device cuda, or --set policy.device=cuda)",
}

# Dotted paths whose value is a free-form mapping for configs without a schema (schemas declare
# theirs with ``FreeForm``): any keys are accepted below them.
FREE_FORM_KEYS = {'env.env_kwargs', 'policy.model.extra', 'policy.learn.optimizer_kwargs'}

Checker = Callable[[EasyDict], List[str]]

# policy name -> module defining ``CONFIG_SCHEMA`` and ``check_config(cfg) -> [messages]``;
# imported on first use (the policies import torch).
_POLICY_MODULES: Dict[str, str] = {'dqn': 'pipeline.policy.dqn', 'sac': 'pipeline.policy.sac', 'ppo': 'pipeline.policy.ppo',
                                   'bc': 'pipeline.offline.bc', 'cql': 'pipeline.offline.cql',
                                   'iql': 'pipeline.offline.iql', 'cql_continuous': 'pipeline.offline.cql_continuous'}
_REGISTERED: Dict[str, Tuple[Mapping, Optional[Checker]]] = {}


def register_policy_config(policy: str, schema: Mapping, check: Optional[Checker] = None) -> None:
    """Declare ``policy``'s config: its schema and an optional cross-value ``check(cfg) -> [messages]``."""
    _REGISTERED[policy] = (schema, check)


def _lookup(policy: str) -> Optional[Tuple[Mapping, Optional[Checker]]]:
    if policy not in _REGISTERED and policy in _POLICY_MODULES:
        mod = importlib.import_module(_POLICY_MODULES[policy])
        _REGISTERED.setdefault(policy, (mod.CONFIG_SCHEMA, getattr(mod, 'check_config', None)))
    return _REGISTERED.get(policy)


def _known() -> List[str]:
    return sorted(set(_POLICY_MODULES) | set(_REGISTERED))


def get_schema(policy: str = 'dqn') -> Mapping:
    """The config schema of ``policy`` (see :mod:`pipeline.config.schema`)."""
    found = _lookup(policy)
    if found is None:
        raise ValueError(f'no config schema for policy {policy!r}; known policies: {_known()}')
    return found[0]


def get_default_config(policy: str = 'dqn') -> EasyDict:
    """A fresh copy of the defaults for ``policy`` (e.g. ``'dqn'``)."""
    found = _lookup(policy)
    if found is None:
        raise ValueError(f'no default config for policy {policy!r}; known policies: {_known()}')
    return EasyDict(S.defaults(found[0]))


def _type_ok(default: object, value: object, path: str) -> Optional[str]:
    """For keys without a schema: None if ``value`` fits ``default``'s type, else a message."""
    if value is None or default is None:
        return None  # None means "unset / use the fallback"; a None default says nothing about the type
    if isinstance(default, bool):
        ok, want = isinstance(value, bool), 'bool'
    elif isinstance(default, int):
        ok, want = isinstance(value, int) and not isinstance(value, bool), 'int'
    elif isinstance(default, float):
        ok, want = isinstance(value, (int, float)) and not isinstance(value, bool), 'float (or int)'
    elif isinstance(default, str):
        ok, want = isinstance(value, str), 'str'
    elif isinstance(default, (list, tuple)):
        ok, want = isinstance(value, (list, tuple)), 'list or tuple'
    elif isinstance(default, Mapping):
        ok, want = isinstance(value, Mapping), 'mapping (dict)'
    else:
        ok, want = isinstance(value, type(default)), type(default).__name__
    return None if ok else f'{path}: expected {want}, got {type(value).__name__} {value!r}'


#: Stable-Baselines3 hyperparameter names whose setting has another name here: SB3 name -> (the key's last
#: dotted parts here, candidates in order, and what differs, or ''). Keys that SB3 and rlpipe spell alike
#: (``learning_rate``, ``batch_size``, ``n_epochs``, ``ent_coef``, ...) need no entry.
SB3_NAMES: Dict[str, Tuple[Tuple[str, ...], str]] = {
    'gamma': (('discount_factor',), ''),
    'buffer_size': (('replay_buffer_size',), ''),
    'tau': (('target_theta',), ''),
    'exploration_initial_eps': (('eps.start',), ''),
    'exploration_final_eps': (('eps.end',), ''),
    'exploration_fraction': (('eps.decay',), 'in env steps, not a fraction of the budget'),
    'target_update_interval': (('target_update_freq',), 'in train iterations, not env steps'),
    'gradient_steps': (('update_per_collect',), ''),
    'max_grad_norm': (('grad_clip',), ''),
    'ent_coef': (('init_alpha', 'auto_alpha'), ''),
    'learning_rate': (('learning_rate_actor', 'learning_rate_critic', 'learning_rate_alpha'), ''),
    'n_envs': (('collector_env_num',), ''),
}


def _key_paths(tree: Mapping, prefix: str = '') -> Iterable[str]:
    """Dotted paths of every key of ``tree`` (sections and leaves)."""
    for k, v in tree.items():
        yield f'{prefix}{k}'
        if isinstance(v, Mapping) and f'{prefix}{k}' not in FREE_FORM_KEYS:
            yield from _key_paths(v, f'{prefix}{k}.')


def find_keys(tree: Mapping, name: str, near: str = '') -> Tuple[List[str], str]:
    """The full dotted keys of ``tree`` (a default config) that a bare or misplaced ``name`` most likely means,
    best first, and a note: the keys whose last part is ``name`` (those under ``near`` first), else the keys
    Stable-Baselines3's ``name`` is here (:data:`SB3_NAMES`; the note says so, and what differs: "Stable-Baselines3's
    'gamma'"), else keys
    whose last part is close to ``name``. ``([], '')`` when nothing fits. E.g. ``find_keys(dqn_defaults,
    'learning_rate')`` -> ``(['policy.learn.learning_rate'], '')``."""
    paths = list(_key_paths(tree))

    def ordered(found: List[str]) -> List[str]:
        return sorted(found, key=lambda p: (not p.startswith(near), p.count('.'), p))[:3]

    name = str(name)
    exact = [p for p in paths if p.rsplit('.', 1)[-1] == name and p != f'{near}{name}']
    if exact:
        return ordered(exact), ''
    if name in SB3_NAMES:
        tails, differs = SB3_NAMES[name]
        found = [p for p in paths if any(p == t or p.endswith('.' + t) for t in tails)]
        if found:
            return ordered(found), f"Stable-Baselines3's {name!r}" + (f', {differs}' if differs else '')
    leaves = {p.rsplit('.', 1)[-1] for p in paths}
    close = difflib.get_close_matches(name, sorted(leaves), n=3, cutoff=0.75)
    return ordered([p for p in paths if p.rsplit('.', 1)[-1] in close]), ''


def _unknown_key(path: str, key: object, here: Mapping, root: Mapping, prefix: str) -> str:
    """The message for a key the config does not have: close keys at the same level, else the full keys
    deeper or elsewhere in the tree it likely means (``learning_rate`` -> ``policy.learn.learning_rate``)."""
    close = difflib.get_close_matches(str(key), [str(k) for k in here], n=3, cutoff=0.6)
    known = ', '.join(sorted(str(k) for k in here))
    if close:
        return f'{path}: unknown key (did you mean {", ".join(repr(c) for c in close)}?); known keys here: {known}'
    found, note = find_keys(root, str(key), prefix)
    if not found:
        return f'{path}: unknown key; known keys here: {known}'
    full = ' or '.join(repr(f) for f in found) + '?' + (f' that is {note}' if note else '')
    return f'{path}: unknown key (did you mean {full}); known keys here: {known}'


def _merge(default: Mapping, user: Mapping, prefix: str, errors: List[str], out: dict,
           free: set, schema: Optional[Mapping], root: Optional[Mapping] = None) -> None:
    root = default if root is None else root
    for key, value in user.items():
        path = f'{prefix}{key}'
        if key not in default:
            if prefix[:-1] in free:
                out[key] = copy.deepcopy(value)
                continue
            if path in RENAMED_KEYS:
                errors.append(RENAMED_KEYS[path])
                continue
            errors.append(_unknown_key(path, key, default, root, prefix))
            continue
        dv = default[key]
        spec = schema.get(key) if isinstance(schema, Mapping) else None
        if isinstance(spec, S.Spec):
            msg = spec.problem(value, path)
        elif isinstance(spec, Mapping) and not isinstance(value, Mapping):
            msg = f'{path}: expected mapping (a config section), got {type(value).__name__} {value!r}'
        else:
            msg = _type_ok(dv, value, path)
        if msg is not None:
            errors.append(msg)
            continue
        if isinstance(dv, Mapping) and isinstance(value, Mapping) and path not in free:
            sub = dict(out[key]) if isinstance(out.get(key), Mapping) else {}
            _merge(dv, value, path + '.', errors, sub, free, spec if isinstance(spec, Mapping) else None, root)
            out[key] = sub
        elif isinstance(dv, Mapping) and isinstance(value, Mapping):
            merged = dict(dv)
            merged.update(copy.deepcopy(dict(value)))
            out[key] = merged
        else:
            out[key] = copy.deepcopy(value)


def _schema_for(default: Mapping) -> Optional[Mapping]:
    """The registered schema of the policy named by ``default['policy']['type']``, if any."""
    try:
        name = default['policy']['type']
    except (KeyError, TypeError):
        return None
    found = _lookup(name) if isinstance(name, str) else None
    return found[0] if found else None


def _merge_collect(default: Mapping, user: Optional[Mapping], schema: Optional[Mapping]) -> Tuple[dict, List[str]]:
    out = copy.deepcopy(_to_dict(default))
    if user is None:
        return out, []
    if not isinstance(user, Mapping):
        return out, [f'config overrides must be a mapping (dict), got {type(user).__name__}']
    free = set(FREE_FORM_KEYS) | (set(S.free_form_paths(schema)) if schema else set())
    errors: List[str] = []
    _merge(default, user, '', errors, out, free, schema)
    return out, errors


def merge_config(default: Mapping, user: Optional[Mapping]) -> EasyDict:
    """Return ``default`` updated recursively with ``user``; neither input is modified.

    When ``default['policy']['type']`` names a policy with a schema, each value is checked against
    it (type and range); other keys are checked against the default's type (an int is accepted
    where a float is expected, a bool is never an int, ``None`` means "unset").

    Raises:
        ConfigError: listing every unknown key (with suggestions) and every refused value.
    """
    out, errors = _merge_collect(default, user, _schema_for(default))
    if errors:
        raise ConfigError(errors)
    return EasyDict(out)


def _to_dict(x: object) -> Any:
    if isinstance(x, Mapping):
        return {k: _to_dict(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_to_dict(v) for v in x]
    return x


def compile_config(user: Optional[Mapping] = None, policy: str = 'dqn') -> EasyDict:
    """Defaults of ``policy`` merged with ``user`` overrides, every value checked before anything is built.

    ``user`` may also carry ``policy.type``; it must match ``policy``.

    Raises:
        ConfigError: listing every problem at once (unknown keys, values outside the schema's
            types and ranges, values that contradict each other).
    """
    default = get_default_config(policy)
    found = _lookup(policy)
    schema, check = found if found else (None, None)
    out, errors = _merge_collect(default, user, schema)
    cfg = EasyDict(out)
    ptype = cfg.get('policy', {}).get('type') if isinstance(cfg.get('policy'), Mapping) else None
    if ptype != policy:
        errors.append(f'policy.type: {ptype!r} does not match policy={policy!r}')
    elif check is not None:
        errors.extend(check(cfg))  # bad values were not merged: the check sees valid ones only
    if errors:
        raise ConfigError(errors)
    return cfg


def check_user_config(user: Optional[Mapping], policy: str) -> List[str]:
    """The problems :func:`compile_config` would list for ``user`` that the schema alone shows
    (unknown keys with suggestions, values outside the types and ranges), found without importing
    torch: the built-in policies' schemas are in :mod:`pipeline.config.policy_schemas`. Checks that need the
    policy's module (e.g. optimizer arguments) are left to :func:`compile_config`. Returns ``[]`` for a
    policy without a torch-free schema."""
    schema = _REGISTERED[policy][0] if policy in _REGISTERED else SCHEMAS.get(policy)
    if schema is None:
        return []
    _, errors = _merge_collect(S.defaults(schema), user, schema)
    return errors


def parse_override(item: str) -> Tuple[str, object]:
    """``'policy.learn.learning_rate=1e-3'`` -> ``('policy.learn.learning_rate', 0.001)``.

    The value is read as a Python literal (numbers, ``True``, ``None``, lists, quoted strings) or
    as ``inf``/``-inf``/``nan``; anything else is kept as a plain string.
    """
    key, sep, text = item.partition('=')
    key = key.strip()
    if not sep or not key or any(not part for part in key.split('.')):
        raise ValueError(f'an override is KEY=VALUE with a dotted KEY (e.g. policy.learn.batch_size=32), got {item!r}')
    text = text.strip()
    if text.lower() in ('inf', '+inf', '-inf', 'nan'):
        return key, float(text)  # so that the check can say what is wrong with it
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = text
    return key, value


def apply_overrides(user: Optional[Mapping], items: Iterable[str]) -> dict:
    """A copy of ``user`` with every ``KEY=VALUE`` of ``items`` set at its dotted key.

    This is what the examples' ``--set`` does; ``compile_config`` then checks the result, so a
    wrong key or value is reported with the others. Raises ValueError for an item without ``=``.
    """
    out = copy.deepcopy(_to_dict(user)) if user is not None else {}
    for item in items:
        key, value = parse_override(item)
        node = out
        *parents, leaf = key.split('.')
        for part in parents:
            nxt = node.get(part)
            node[part] = dict(nxt) if isinstance(nxt, Mapping) else {}
            node = node[part]
        node[leaf] = value
    return out


def flatten_keys(cfg: Mapping, prefix: str = '') -> Iterable[str]:
    """Dotted paths of every leaf in ``cfg`` (handy to see what can be set)."""
    for k, v in cfg.items():
        if isinstance(v, Mapping) and v and f'{prefix}{k}' not in FREE_FORM_KEYS:
            yield from flatten_keys(v, f'{prefix}{k}.')
        else:
            yield f'{prefix}{k}'


def _torch_free_schema(policy: str) -> Mapping:
    if policy in _REGISTERED:
        return _REGISTERED[policy][0]
    if policy in SCHEMAS:
        return SCHEMAS[policy]
    return get_schema(policy)  # imports the policy's module


def config_table(policy: str, user: Optional[Mapping] = None) -> List[Tuple[str, object, str]]:
    """``(dotted key, value, what is allowed)`` for every key of ``policy``'s schema, the value being ``user``
    merged over the schema's defaults (an example's or an agent's settings: what a run uses unless a key is
    set). Values the schema refuses are left at the default (:func:`check_user_config` names them). Loads
    no torch for the built-in DQN, PPO and SAC."""
    schema = _torch_free_schema(policy)
    merged, _ = _merge_collect(S.defaults(schema), user, schema)
    rows = []
    for path, spec in S.iter_specs(schema):
        node: object = merged
        for part in path.split('.'):
            node = node.get(part) if isinstance(node, Mapping) else None
        rows.append((path, node, spec.allowed()))
    return rows


def format_config_table(rows: Iterable[Tuple[str, object, str]], header: str = '') -> str:
    """The rows of :func:`config_table` as aligned text: ``key  default  allowed`` (``header``: a first line)."""
    table = [('key', 'default', 'allowed')] + [(k, repr(v), a) for k, v, a in rows]
    wk, wv = max(len(r[0]) for r in table), min(max(len(r[1]) for r in table), 28)
    lines = [header] if header else []
    lines += [f'{k:<{wk}}  {v:<{wv}}  {a}'.rstrip() for k, v, a in table]
    return '\n'.join(lines)
