"""`MetricsLogger`: a nested dict of :class:`Stats`, plus the metric names the Learner reports."""

from __future__ import annotations

from typing import Iterable, Mapping, Optional, Sequence, Tuple, Union, Unpack, cast

from .stats import Stats, StatsSettings

__all__ = [
    "MetricsLogger",
    "ALL_MODULES",
    "TOTAL_LOSS",
    "NUM_MODULE_STEPS_TRAINED",
    "NUM_MODULE_STEPS_TRAINED_LIFETIME",
    "NUM_ENV_STEPS_TRAINED",
    "NUM_ENV_STEPS_TRAINED_LIFETIME",
    "NUM_MINIBATCH_UPDATES",
    "LEARNING_RATE",
    "GRADIENTS_NORM",
    "NUM_SKIPPED_STEPS",
    "NUM_SKIPPED_STEPS_LIFETIME",
    "WEIGHTS_SEQ_NO",
]

ALL_MODULES = "__all_modules__"
TOTAL_LOSS = "total_loss"
NUM_MODULE_STEPS_TRAINED = "num_module_steps_trained"
NUM_MODULE_STEPS_TRAINED_LIFETIME = "num_module_steps_trained_lifetime"
NUM_ENV_STEPS_TRAINED = "num_env_steps_trained"
NUM_ENV_STEPS_TRAINED_LIFETIME = "num_env_steps_trained_lifetime"
NUM_MINIBATCH_UPDATES = "num_minibatch_updates"
LEARNING_RATE = "learning_rate"
GRADIENTS_NORM = "gradients_norm"
NUM_SKIPPED_STEPS = "num_skipped_steps"
NUM_SKIPPED_STEPS_LIFETIME = "num_skipped_steps_lifetime"
WEIGHTS_SEQ_NO = "weights_seq_no"

Key = Union[str, Tuple[str, ...]]
_MISSING = object()


def _path(key: Optional[Key]) -> Tuple[str, ...]:
    if key is None:
        return ()
    if isinstance(key, str):
        return (key,)
    if isinstance(key, tuple) and all(isinstance(k, str) for k in key):
        return key
    raise TypeError(f"metric keys are a str or a tuple of str, got {key!r}")


def _leaves(tree: Mapping, prefix: Tuple[str, ...] = ()) -> Iterable[Tuple[Tuple[str, ...], Stats]]:
    for k, v in tree.items():
        if isinstance(v, Stats):
            yield prefix + (k,), v
        elif isinstance(v, Mapping):
            yield from _leaves(v, prefix + (k,))
        else:
            raise TypeError(f"metric tree leaf at {prefix + (k,)} is {type(v).__name__}, expected Stats")


class MetricsLogger:
    """A nested dict of :class:`Stats` addressed by ``"key"`` or ``("module", "key")`` paths.

    * :meth:`log_value` / :meth:`log_dict` push values (creating Stats on first use).
    * :meth:`aggregate` merges the result dicts of n parallel learners (leaves are Stats) into
      this logger: per leaf :meth:`Stats.merge_parallel`, then folded in with
      :meth:`Stats.merge_in` (lifetime sums replaced, never double counted).
    * :meth:`reduce` returns a nested dict of reduced Stats copies and clears
      ``clear_on_reduce`` stats; :meth:`peek` returns plain floats.
    """

    def __init__(self) -> None:
        self.stats: dict = {}

    # ------------------------------------------------------------------ internals
    def _get(self, path: Tuple[str, ...], default: object = _MISSING) -> object:
        node: object = self.stats
        for k in path:
            if not isinstance(node, dict) or k not in node:
                if default is _MISSING:
                    raise KeyError(f"no metric at {path!r}")
                return default
            node = node[k]
        return node

    def _parent(self, path: Tuple[str, ...]) -> dict:
        if not path:
            raise ValueError("a metric key may not be empty")
        node = self.stats
        for k in path[:-1]:
            nxt = node.get(k)
            if nxt is None:
                nxt = node[k] = {}
            elif isinstance(nxt, Stats):
                raise ValueError(f"metric {k!r} is a value, cannot nest {path!r} under it")
            node = nxt
        return node

    # ------------------------------------------------------------------ logging
    def __bool__(self) -> bool:
        return bool(self.stats)

    def has(self, key: Key) -> bool:
        """Whether a metric (or a sub-tree) exists at ``key``."""
        return self._get(_path(key), None) is not None

    def log_value(self, key: Key, value: object, **settings: Unpack[StatsSettings]) -> None:
        """Push ``value`` to the Stats at ``key``; the first call creates it with ``settings``
        (``reduce``, ``window``, ``ema_coeff``, ``clear_on_reduce``, ``throughput``: see :class:`Stats`)."""
        path = _path(key)
        parent = self._parent(path)
        s = parent.get(path[-1])
        if s is None:
            parent[path[-1]] = Stats(value, **settings)
        elif isinstance(s, Stats):
            s.push(value)
        else:
            raise ValueError(f"metric key {path!r} holds a sub-tree, not a value")

    def log_dict(self, values: Mapping, *, key: Optional[Key] = None, **settings: Unpack[StatsSettings]) -> None:
        """log_value for every leaf of a nested mapping of numbers, under ``key``."""
        base = _path(key)
        for k, v in values.items():
            if isinstance(v, Mapping):
                self.log_dict(v, key=base + (k,), **settings)
            else:
                self.log_value(base + (k,), v, **settings)

    def aggregate(self, results: Sequence[Mapping], *, key: Optional[Key] = None) -> None:
        """Merge the result trees (leaves Stats) of n parallel sources into this logger under ``key``."""
        base = _path(key)
        grouped: dict = {}
        for tree in results:
            if tree is None:
                continue
            for p, s in _leaves(tree):
                grouped.setdefault(p, []).append(s)
        for p, group in grouped.items():
            merged = Stats.merge_parallel(group)
            full = base + p
            parent = self._parent(full)
            existing = parent.get(full[-1])
            if existing is None:
                parent[full[-1]] = merged
            elif isinstance(existing, Stats):
                existing.merge_in(merged)
            else:
                raise ValueError(f"metric key {full!r} holds a sub-tree, not a value")

    # ------------------------------------------------------------------ reading
    def peek(self, key: Optional[Key] = None, default: object = _MISSING) -> object:
        """The float at ``key`` (a nested dict of floats for a sub-tree or for ``key=None``)."""
        node = self._get(_path(key), default)
        if node is default and default is not _MISSING:
            return default
        if isinstance(node, Stats):
            return node.peek()
        return MetricsLogger.peek_results(node)

    @staticmethod
    def peek_results(results: object) -> object:
        """Turn a nested dict with Stats leaves (e.g. ``Learner.update`` output) into floats."""
        if isinstance(results, Stats):
            return results.peek()
        if isinstance(results, Mapping):
            return {k: MetricsLogger.peek_results(v) for k, v in results.items()}
        return results

    def reduce(self, key: Optional[Key] = None) -> dict:
        """Reduced copies of the Stats under ``key`` (nested dict); clears clear_on_reduce stats."""
        path = _path(key)
        node = self._get(path, None)
        if node is None:
            return {}
        if isinstance(node, Stats):
            return node.reduce()  # type: ignore[return-value]

        def _red(tree: dict) -> dict:
            return {k: (v.reduce() if isinstance(v, Stats) else _red(v)) for k, v in tree.items()}

        return _red(cast(dict, node))  # a sub-tree: _get returns Stats leaves or dicts

    def delete(self, key: Key) -> None:
        """Remove the metric or sub-tree at ``key`` (KeyError if absent)."""
        path = _path(key)
        parent = self._get(path[:-1])
        if not isinstance(parent, dict) or path[-1] not in parent:
            raise KeyError(f"no metric at {path!r}")
        del parent[path[-1]]

    def reset(self) -> None:
        """Drop every metric."""
        self.stats = {}

    # ------------------------------------------------------------------ state
    def get_state(self) -> dict:
        """Plain data (lists, dicts, numbers; safe for torch.load(weights_only=True))."""
        return {"stats": [[list(p), s.get_state()] for p, s in _leaves(self.stats)]}

    def set_state(self, state: Mapping) -> None:
        """Restore from :meth:`get_state` output (replaces everything)."""
        self.stats = {}
        for path, st in state.get("stats", ()):
            path = tuple(path)
            self._parent(path)[path[-1]] = Stats.from_state(st)
