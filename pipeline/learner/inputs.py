"""Input resolution for ``Learner.update``: which one of the seven input kinds was given, and turning
it into ``module id -> batch`` with each module's row count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Dict, List, Optional, Tuple

from .batch import cat_rows, is_tree, num_rows, stack_transitions
from .training_data import INPUT_KINDS, TrainingData

__all__ = ["LearnerInputsMixin", "TS_KEY"]

TS_KEY = "num_env_steps_sampled_lifetime"


class LearnerInputsMixin:
    """The input half of :class:`~pipeline.learner.Learner`: uses ``modules`` and ``_single_id``.

    :meth:`episodes_to_batch` is a hook: override it for returns, advantages, ...
    """

    @staticmethod
    def _select_input(
        batch: Any,
        batches: Any,
        batch_refs: Any,
        episodes: Any,
        episodes_refs: Any,
        data_iterators: Any,
        training_data: Optional[TrainingData],
    ) -> Tuple[str, Optional[TrainingData]]:
        """``(kind, data)`` for exactly one given input; ``data`` is None for a plain ``batch=``."""
        if training_data is not None:
            if (
                batch is not None
                or batches is not None
                or batch_refs is not None
                or episodes is not None
                or episodes_refs is not None
                or data_iterators is not None
            ):
                given = (batch, batches, batch_refs, episodes, episodes_refs, data_iterators)
                others = [n for n, v in zip(INPUT_KINDS, given) if v is not None]
                raise ValueError(f"update needs exactly one input, got training_data and {', '.join(others)}")
            return training_data.kind, training_data
        if (
            batch is not None
            and batches is None
            and batch_refs is None
            and episodes is None
            and episodes_refs is None
            and data_iterators is None
        ):
            return "batch", None
        data = TrainingData(batch, batches, batch_refs, episodes, episodes_refs, data_iterators)
        return data.kind, data  # .kind raises ValueError unless exactly one was given

    def _module_batches(self, kind: str, batch: Any, data: Optional[TrainingData]) -> Dict[str, Any]:
        """module id -> batch for every kind but ``data_iterators``."""
        if kind == "batch":
            return self._as_module_batches(batch if data is None else data.batch)
        return self._resolve(data.solve_refs())

    def episodes_to_batch(self, episodes: List[Any]) -> Any:
        """Hook: turn a list of episodes into a batch (override for returns, advantages, ...).

        An episode is a sequence of transitions (dicts or trees) for a single-module learner,
        or a mapping module id -> sequence of transitions. All transitions of a module are
        stacked along a new batch axis, episodes one after another.
        """
        per_module: Dict[str, list] = {}
        for i, ep in enumerate(episodes):
            if isinstance(ep, Mapping) and not (self._single_id is not None and self._single_id not in ep):
                for mid, transitions in ep.items():
                    per_module.setdefault(mid, []).extend(transitions)
            elif isinstance(ep, (list, tuple)):
                if self._single_id is None:
                    raise ValueError(
                        f"episodes[{i}] is a list of transitions, but this learner has several modules "
                        f"{list(self.modules)}; pass each episode as a mapping module_id -> transitions"
                    )
                per_module.setdefault(self._single_id, []).extend(ep)
            else:
                raise TypeError(
                    f"episodes[{i}] must be a list of transitions or a mapping module_id -> transitions, "
                    f"got {type(ep).__name__}"
                )
        return {mid: stack_transitions(tr, where=f"episodes for module {mid!r}") for mid, tr in per_module.items()}

    def _as_module_batches(self, batch: Any) -> Dict[str, Any]:
        """Normalize a batch to a dict module_id -> per-module batch."""
        modules = self.modules
        if type(batch) is dict and self._single_id is not None and self._single_id not in batch:
            return {self._single_id: batch}  # hot path: a plain single-module batch
        if isinstance(batch, Mapping) or is_tree(batch):
            keys = list(batch.keys())
            if not keys and self._single_id is None:
                return {}  # reported by _rows as "no module batches"
            if any(k in modules and _is_batch_like(batch[k]) for k in keys):
                unknown = [k for k in keys if k not in modules]
                if unknown:
                    raise ValueError(
                        f"batch names unknown module ids {unknown}; this learner has {list(modules)}"
                    )
                return {k: batch[k] for k in keys}
        if self._single_id is not None:
            return {self._single_id: batch}
        if isinstance(batch, Mapping) or is_tree(batch):
            raise ValueError(
                f"batch keys {list(batch.keys())} are not module ids; this learner has modules "
                f"{list(modules)}: pass a mapping module_id -> batch"
            )
        raise TypeError(
            f"batch is a {type(batch).__name__}; pass a mapping module_id -> batch (dict of tensors or a tree)"
        )

    def _rows(self, module_batches: Dict[str, Any]) -> Dict[str, int]:
        if not module_batches:
            raise ValueError("the batch has no module batches; pass data for at least one module")
        rows = {}
        for mid, b in module_batches.items():
            n = num_rows(b, where=f"module {mid!r} batch")
            if n == 0:
                raise ValueError(f"module {mid!r} batch has zero rows; there is nothing to train on")
            rows[mid] = n
        return rows

    def _combine(self, module_batches_list: List[Dict[str, Any]]) -> Dict[str, Any]:
        if len(module_batches_list) == 1:
            return module_batches_list[0]
        grouped: Dict[str, list] = {}
        for mb in module_batches_list:
            for mid, b in mb.items():
                grouped.setdefault(mid, []).append(b)
        return {mid: cat_rows(parts) for mid, parts in grouped.items()}

    def _resolve(self, data: TrainingData) -> Dict[str, Any]:
        kind = data.kind
        if kind == "batch":
            return self._as_module_batches(data.batch)
        if kind == "batches":
            if not isinstance(data.batches, (list, tuple)) or not data.batches:
                raise ValueError("batches must be a non-empty list of batches")
            return self._combine([self._as_module_batches(b) for b in data.batches])
        if kind == "episodes":
            if not isinstance(data.episodes, (list, tuple)) or not data.episodes:
                raise ValueError("episodes must be a non-empty list of episodes")
            return self._as_module_batches(self.episodes_to_batch(list(data.episodes)))
        raise ValueError(f"cannot turn {kind} into a batch")  # pragma: no cover (refs solved before)

    @staticmethod
    def _normalize_timesteps(timesteps: Any) -> Dict[str, Any]:
        if timesteps is None:
            return {}
        if isinstance(timesteps, Mapping):
            return dict(timesteps)
        if isinstance(timesteps, int) and not isinstance(timesteps, bool):
            return {TS_KEY: timesteps}
        raise TypeError(
            f"timesteps must be a dict like {{'{TS_KEY}': n}} or an int, got {type(timesteps).__name__}"
        )


def _is_batch_like(x: Any) -> bool:
    return isinstance(x, Mapping) or is_tree(x)
