"""Config schemas: every config value's default, type and allowed range, declared in one place.

A schema is a nested dict whose leaves are :class:`Spec` s (a section is a plain dict)::

    SCHEMA = {
        'seed': Int(0, min=0),
        'policy': {
            'learn': {
                'learning_rate': Float(1e-3, gt=0, max=1),
                'optimizer': Choice('adam', ('adam', 'sgd')),
                'grad_clip': Float(None, gt=0, optional=True),
                'optimizer_kwargs': FreeForm(),
            },
        },
    }

:func:`defaults` builds the default config from it; :func:`check` lists every value that breaks
it, each message naming the dotted key and what is allowed. Floats are always finite (no NaN;
``inf`` only where ``allow_inf=True``); ``bool`` is never accepted as a number; ``None`` only where
``optional=True`` (it then means "unset: use the fallback").
"""
from __future__ import annotations

import copy
import math
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..device import DEVICE_CHOICES, device_spec_problem

__all__ = ['Spec', 'Int', 'Float', 'Bool', 'Str', 'Choice', 'IntList', 'Shape', 'FreeForm', 'Device',
           'defaults', 'check', 'free_form_paths', 'iter_specs', 'spec_at', 'run_section', 'env_section']


def _num(x: float) -> str:
    return repr(int(x)) if float(x).is_integer() and abs(x) < 1e15 else repr(x)


class Spec:
    """One config value: its default, whether None is allowed, and :meth:`problem`."""

    type_name = 'a value'

    def __init__(self, default: object, *, optional: bool = False, doc: str = '') -> None:
        self.default = default
        self.optional = optional or default is None
        self.doc = doc

    def allowed(self) -> str:
        """What is allowed, in words (e.g. ``'an int >= 1'``)."""
        return self.type_name + (' (or None)' if self.optional else '')

    def type_ok(self, value: object) -> bool:
        return True

    def range_ok(self, value: object) -> bool:
        return True

    def problem(self, value: object, path: str) -> Optional[str]:
        """None if ``value`` is allowed, else a message naming ``path`` and the allowed values."""
        if value is None:
            return None if self.optional else f'{path}: expected {self.allowed()}, got None'
        if not self.type_ok(value):
            return f'{path}: expected {self.allowed()}, got {type(value).__name__} {value!r}'
        if not self.range_ok(value):
            return f'{path}: must be {self.allowed()}, got {value!r}'
        return None


class _Number(Spec):
    def __init__(self, default: object, *, min: Optional[float] = None, max: Optional[float] = None,
                 gt: Optional[float] = None, lt: Optional[float] = None, optional: bool = False,
                 doc: str = '') -> None:
        super().__init__(default, optional=optional, doc=doc)
        self.lo, self.lo_open = (gt, True) if gt is not None else (min, False)
        self.hi, self.hi_open = (lt, True) if lt is not None else (max, False)

    def range_text(self) -> str:
        lo, hi = self.lo, self.hi
        if lo is not None and hi is not None:
            return f" in {'(' if self.lo_open else '['}{_num(lo)}, {_num(hi)}{')' if self.hi_open else ']'}"
        if lo is not None:
            return f" {'>' if self.lo_open else '>='} {_num(lo)}"
        if hi is not None:
            return f" {'<' if self.hi_open else '<='} {_num(hi)}"
        return ''

    def allowed(self) -> str:
        return self.type_name + self.range_text() + (' (or None)' if self.optional else '')

    def range_ok(self, value: Any) -> bool:
        if self.lo is not None and not (value > self.lo if self.lo_open else value >= self.lo):
            return False
        if self.hi is not None and not (value < self.hi if self.hi_open else value <= self.hi):
            return False
        return True


class Int(_Number):
    """An int (never a bool), optionally bounded: ``Int(64, min=1)``."""

    type_name = 'an int'

    def type_ok(self, value: object) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)


class Float(_Number):
    """A finite float (an int is accepted), optionally bounded: ``Float(0.97, min=0, max=1)``.

    NaN is never allowed; infinities only with ``allow_inf=True``.
    """

    type_name = 'float'

    def __init__(self, default: object, *, allow_inf: bool = False, **kw: Any) -> None:
        super().__init__(default, **kw)
        self.allow_inf = allow_inf

    def allowed(self) -> str:
        return ('a float' if self.allow_inf else 'a finite float') + super().allowed()[len(self.type_name):]

    def type_ok(self, value: object) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    def range_ok(self, value: Any) -> bool:
        v = float(value)
        if math.isnan(v) or (math.isinf(v) and not self.allow_inf):
            return False
        return super().range_ok(v)


class Bool(Spec):
    type_name = 'a bool'

    def type_ok(self, value: object) -> bool:
        return isinstance(value, bool)


class Str(Spec):
    """A string (non-empty unless ``allow_empty``)."""

    type_name = 'str'

    def __init__(self, default: object, *, allow_empty: bool = False, **kw: Any) -> None:
        super().__init__(default, **kw)
        self.allow_empty = allow_empty

    def allowed(self) -> str:
        return ('a str' if self.allow_empty else 'a non-empty str') + (' (or None)' if self.optional else '')

    def type_ok(self, value: object) -> bool:
        return isinstance(value, str)

    def range_ok(self, value: object) -> bool:
        return self.allow_empty or bool(value)


class Choice(Spec):
    """One of a few strings (compared case-insensitively when ``ignore_case``)."""

    type_name = 'str'

    def __init__(self, default: object, choices: Sequence[str], *, ignore_case: bool = False, **kw: Any) -> None:
        super().__init__(default, **kw)
        self.choices = tuple(choices)
        self.ignore_case = ignore_case

    def allowed(self) -> str:
        return 'one of ' + ', '.join(repr(c) for c in self.choices) + (' (or None)' if self.optional else '')

    def type_ok(self, value: object) -> bool:
        return isinstance(value, str)

    def range_ok(self, value: Any) -> bool:
        if self.ignore_case:
            return value.lower() in {c.lower() for c in self.choices}
        return value in self.choices


class Device(Spec):
    """A device setting: ``'auto'``, ``'cpu'``, ``'cuda'`` or ``'cuda:N'`` (see :mod:`pipeline.device`; whether
    the machine has that device is checked when the policy is built, not here)."""

    type_name = 'str'

    def allowed(self) -> str:
        return DEVICE_CHOICES + (' (or None)' if self.optional else '')

    def type_ok(self, value: object) -> bool:
        return isinstance(value, str)

    def range_ok(self, value: object) -> bool:
        return device_spec_problem(value) is None


class IntList(Spec):
    """A non-empty list (or tuple) of ints, each bounded by ``item_min``: layer sizes, shapes."""

    type_name = 'list'

    def __init__(self, default: object, *, item_min: int = 1, **kw: Any) -> None:
        super().__init__(default, **kw)
        self.item_min = item_min

    def allowed(self) -> str:
        return f'a non-empty list of ints >= {self.item_min}' + (' (or None)' if self.optional else '')

    def type_ok(self, value: object) -> bool:
        return isinstance(value, (list, tuple))

    def range_ok(self, value: Any) -> bool:
        return len(value) > 0 and all(
            isinstance(v, int) and not isinstance(v, bool) and v >= self.item_min for v in value)


class Shape(IntList):
    """An int >= 1 or a non-empty list of ints >= 1 (an observation shape)."""

    def allowed(self) -> str:
        return 'an int >= 1 or a non-empty list of ints >= 1' + (' (or None)' if self.optional else '')

    def type_ok(self, value: object) -> bool:
        return (isinstance(value, int) and not isinstance(value, bool)) or isinstance(value, (list, tuple))

    def range_ok(self, value: object) -> bool:
        if isinstance(value, int):
            return value >= 1
        return super().range_ok(value)


class FreeForm(Spec):
    """A mapping with any keys (e.g. keyword arguments passed through to a constructor)."""

    type_name = 'a mapping (dict)'

    def __init__(self, default: Optional[Mapping] = None, **kw: Any) -> None:
        super().__init__({} if default is None else dict(default), **kw)
        self.optional = kw.get('optional', False)

    def type_ok(self, value: object) -> bool:
        return isinstance(value, Mapping)


def run_section(exp_name: str, seed: int = 0) -> Dict[str, Spec]:
    """The top-level keys every policy's config has: ``exp_name`` (output directory) and ``seed``."""
    return {'exp_name': Str(exp_name), 'seed': Int(seed, min=0)}


def env_section(env_id: Optional[str], *, collector_env_num: int, evaluator_env_num: int,
                n_evaluator_episode: int, stop_value: Optional[float]) -> Dict[str, Spec]:
    """The ``env`` section every policy's config has, with that policy's defaults."""
    return {
        'env_id': Str(env_id, optional=env_id is None),
        'collector_env_num': Int(collector_env_num, min=1),
        'evaluator_env_num': Int(evaluator_env_num, min=1),
        'n_evaluator_episode': Int(n_evaluator_episode, min=1),
        'stop_value': Float(stop_value, allow_inf=True, optional=True),  # None: never stop on the eval return
        'max_episode_steps': Int(None, min=1, optional=True),
        'env_kwargs': FreeForm(),  # passed to the env constructor
    }


SchemaTree = Dict[str, Any]
"""A config schema: key -> :class:`Spec` or a nested schema (nested to varying depths, so the values are
``Any``: a schema module assigns into its sections, e.g. ``CQL_CONFIG['policy']['learn']['cql_alpha']``)."""


def iter_specs(schema: Mapping[str, Any], prefix: str = '') -> Iterator[Tuple[str, Spec]]:
    """``(dotted path, spec)`` for every leaf of ``schema``."""
    for key, node in schema.items():
        path = f'{prefix}{key}'
        if isinstance(node, Spec):
            yield path, node
        else:
            yield from iter_specs(node, path + '.')


def spec_at(schema: Mapping[str, object], path: str) -> object:
    """The spec or section at a dotted ``path`` (KeyError if the schema has none)."""
    node: Any = schema
    for part in path.split('.'):
        node = node[part]
    return node


def defaults(schema: Mapping[str, Any]) -> Dict[str, object]:
    """The default config of ``schema`` as nested plain dicts (fresh copies)."""
    return {k: copy.deepcopy(v.default) if isinstance(v, Spec) else defaults(v) for k, v in schema.items()}


def free_form_paths(schema: Mapping[str, object]) -> List[str]:
    """Dotted paths of the :class:`FreeForm` entries (any keys are accepted below them)."""
    return [p for p, s in iter_specs(schema) if isinstance(s, FreeForm)]


def check(schema: Mapping, cfg: Mapping, prefix: str = '') -> List[str]:
    """Every value of ``cfg`` that breaks ``schema`` (missing sections/keys count), one message each.

    Keys of ``cfg`` that the schema does not declare are not reported here (``merge_config`` reports
    unknown keys with suggestions).
    """
    errors: List[str] = []
    for key, node in schema.items():
        path = f'{prefix}{key}'
        if not isinstance(cfg, Mapping) or key not in cfg:
            errors.append(f'{path}: missing')
            continue
        value = cfg[key]
        if isinstance(node, Spec):
            msg = node.problem(value, path)
            if msg is not None:
                errors.append(msg)
        elif not isinstance(value, Mapping):
            errors.append(f'{path}: expected a mapping (a config section), got {type(value).__name__} {value!r}')
        else:
            errors.extend(check(node, value, path + '.'))
    return errors


def describe(schema: Mapping) -> Iterable[str]:
    """One line per key: ``path: allowed (default ...)``, e.g. for ``--help`` texts."""
    for path, spec in iter_specs(schema):
        yield f'{path}: {spec.allowed()} (default {spec.default!r})'
