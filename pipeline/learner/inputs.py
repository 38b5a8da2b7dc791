"""The door into ``Learner.update``: which one of the seven input kinds was given, and turning it into the one
form the learner's core trains on: a stream of minibatches, each ``module id -> batch`` with each module's row
count (:meth:`LearnerInputs.minibatches`). Past the door the learner never sees which kind came in."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

from ..device import to_device
from .batch import Batch, ModuleBatches, cat_rows, num_rows, stack_transitions, untree
from .minibatch_plan import Minibatch, check_loop_args, plan_batch, plan_iterators
from .training_data import INPUT_KINDS, DataIterators, Episode, TrainingData

__all__ = ["LearnerInputs", "select_input", "normalize_timesteps", "stack_episodes", "TS_KEY"]

#: the timestep a learner's lr schedules are evaluated at
TS_KEY = "num_env_steps_sampled_lifetime"


def select_input(
    batch: Optional[Batch],
    batches: Optional[List[Batch]],
    batch_refs: Optional[List[object]],
    episodes: Optional[List[Episode]],
    episodes_refs: Optional[List[object]],
    data_iterators: Optional[DataIterators],
    training_data: Optional[TrainingData],
) -> Tuple[str, Optional[TrainingData]]:
    """``(kind, data)`` for exactly one given input; ``data`` is None for a plain ``batch=``."""
    given = (batch, batches, batch_refs, episodes, episodes_refs, data_iterators)
    if training_data is not None:
        others = [n for n, v in zip(INPUT_KINDS, given) if v is not None]
        if others:
            raise ValueError(f"update needs exactly one input, got training_data and {', '.join(others)}")
        return training_data.kind, training_data
    if batch is not None and all(v is None for v in given[1:]):
        return "batch", None
    data = TrainingData(*given)
    return data.kind, data  # .kind raises ValueError unless exactly one was given


def normalize_timesteps(timesteps: Union[None, int, Mapping[str, int]]) -> Dict[str, int]:
    """``update``'s ``timesteps`` (None, an int or a mapping) as a dict."""
    if timesteps is None:
        return {}
    if isinstance(timesteps, Mapping):
        return dict(timesteps)
    if isinstance(timesteps, int) and not isinstance(timesteps, bool):
        return {TS_KEY: timesteps}
    raise TypeError(f"timesteps must be a dict like {{'{TS_KEY}': n}} or an int, got {type(timesteps).__name__}")


def stack_episodes(episodes: List[Episode], module_ids: Sequence[str]) -> ModuleBatches:
    """The default ``Learner.episodes_to_batch``: every transition of a module stacked along a new batch axis,
    episodes one after another. An episode is a sequence of transitions (dicts or trees) for a single-module
    learner, or a mapping module id -> sequence of transitions."""
    single = module_ids[0] if len(module_ids) == 1 else None
    per_module: Dict[str, list] = {}
    for i, ep in enumerate(episodes):
        if isinstance(ep, Mapping) and not (single is not None and single not in ep):
            for mid, transitions in ep.items():
                per_module.setdefault(mid, []).extend(transitions)
        elif isinstance(ep, (list, tuple)):
            if single is None:
                raise ValueError(
                    f"episodes[{i}] is a list of transitions, but this learner has several modules "
                    f"{list(module_ids)}; pass each episode as a mapping module_id -> transitions"
                )
            per_module.setdefault(single, []).extend(ep)
        else:
            raise TypeError(
                f"episodes[{i}] must be a list of transitions or a mapping module_id -> transitions, "
                f"got {type(ep).__name__}"
            )
    return {mid: stack_transitions(tr, where=f"episodes for module {mid!r}") for mid, tr in per_module.items()}


def _is_batch_like(x: object) -> bool:
    return isinstance(x, Mapping)


class LearnerInputs:
    """Turns any input of ``Learner.update`` but ``data_iterators`` into ``module id -> batch`` for the learner's
    ``module_ids`` (:meth:`module_batches`), and counts each module's rows (:meth:`rows`). ``episodes_to_batch``
    is the learner's hook that turns a list of episodes into a batch; with ``shared`` a batch that is not keyed by
    module ids goes to every module."""

    def __init__(self, module_ids: Sequence[str], episodes_to_batch: Callable[[List[Episode]], Batch],
                 shared: bool = False) -> None:
        self.module_ids = list(module_ids)
        self.single_id: Optional[str] = self.module_ids[0] if len(self.module_ids) == 1 else None
        self.episodes_to_batch = episodes_to_batch
        self.shared = shared

    def minibatches(self, batch: Optional[Batch], batches: Optional[List[Batch]],
                    batch_refs: Optional[List[object]], episodes: Optional[List[Episode]],
                    episodes_refs: Optional[List[object]], data_iterators: Optional[DataIterators],
                    training_data: Optional[TrainingData], *, num_total_minibatches: int,
                    num_epochs: int, minibatch_size: Optional[int], shuffle_batch_per_epoch: bool,
                    num_iters: Optional[int], device: Optional[torch.device],
                    generator: Optional[torch.Generator]) -> Iterator[Minibatch]:
        """The door: exactly one input of ``Learner.update`` (any kind) as the stream of minibatches its core
        trains on, each ``(module id -> batch, module id -> rows, env rows)`` with its tensors on ``device``
        (None: where they are). The input and the loop arguments are checked, and a batch is resolved (refs
        solved, episodes stacked, moved to ``device`` once), before this returns; iterators are pulled as the
        stream is read (:mod:`pipeline.learner.minibatch_plan`)."""
        kind, data = select_input(batch, batches, batch_refs, episodes, episodes_refs, data_iterators, training_data)
        check_loop_args(kind, num_total_minibatches=num_total_minibatches, num_epochs=num_epochs,
                        minibatch_size=minibatch_size, shuffle_batch_per_epoch=shuffle_batch_per_epoch,
                        num_iters=num_iters)
        if kind == "data_iterators":
            assert data is not None and num_iters is not None  # checked above

            def pulled(batches: List[Batch]) -> ModuleBatches:
                out = self.pulled(batches)
                return out if device is None else to_device(out, device)

            return plan_iterators(data.iterators(), num_iters, pulled, self.rows)
        module_batches = self.module_batches(kind, batch, data)
        if device is not None:  # the whole input, once per call (not per minibatch or field)
            module_batches = to_device(module_batches, device)
        return plan_batch(module_batches, self.rows(module_batches), num_total_minibatches=num_total_minibatches,
                          num_epochs=num_epochs, minibatch_size=minibatch_size,
                          shuffle_batch_per_epoch=shuffle_batch_per_epoch, generator=generator)

    def module_batches(self, kind: str, batch: Optional[Batch], data: Optional[TrainingData]) -> ModuleBatches:
        """module id -> batch for a ``kind`` from :func:`select_input` (refs are solved here)."""
        if kind == "batch":
            given = batch if data is None else data.batch
            assert given is not None  # the kind says it was given
            return self.as_module_batches(given)
        assert data is not None
        return self.resolve(data.solve_refs())

    def as_module_batches(self, batch: Batch) -> ModuleBatches:
        """Normalize one batch to a dict module id -> per-module batch (trees become nested dicts: :func:`untree`)."""
        batch = untree(batch)
        single = self.single_id
        if type(batch) is dict and single is not None and single not in batch:
            return {single: batch}  # hot path: a plain single-module batch
        ids = self.module_ids
        if self.shared and not (isinstance(batch, Mapping) and batch and set(batch.keys()) <= set(ids)):
            return {mid: batch for mid in ids}
        if isinstance(batch, Mapping):
            keys = list(batch.keys())
            if not keys and single is None:
                return {}  # reported by rows() as "no module batches"
            if any(k in ids and _is_batch_like(batch[k]) for k in keys):
                unknown = [k for k in keys if k not in ids]
                if unknown:
                    raise ValueError(f"batch names unknown module ids {unknown}; this learner has {ids}")
                return {k: batch[k] for k in keys}
        if single is not None:
            return {single: batch}
        if isinstance(batch, Mapping):
            raise ValueError(f"batch keys {list(batch.keys())} are not module ids; this learner has modules "
                             f"{ids}: pass a mapping module_id -> batch")
        raise TypeError(f"batch is a {type(batch).__name__}; pass a mapping module_id -> batch (dict of tensors "
                        "or a tree)")

    def rows(self, module_batches: ModuleBatches) -> Dict[str, int]:
        """module id -> rows of its batch; ``ValueError`` for no module batch or an empty one."""
        if not module_batches:
            raise ValueError("the batch has no module batches; pass data for at least one module")
        rows = {}
        for mid, b in module_batches.items():
            n = num_rows(b, where=f"module {mid!r} batch")
            if n == 0:
                raise ValueError(f"module {mid!r} batch has zero rows; there is nothing to train on")
            rows[mid] = n
        return rows

    def combine(self, module_batches_list: List[ModuleBatches]) -> ModuleBatches:
        """Several ``module id -> batch`` dicts as one, each module's rows concatenated in order."""
        if len(module_batches_list) == 1:
            return module_batches_list[0]
        grouped: Dict[str, list] = {}
        for mb in module_batches_list:
            for mid, b in mb.items():
                grouped.setdefault(mid, []).append(b)
        return {mid: cat_rows(parts) for mid, parts in grouped.items()}

    def resolve(self, data: TrainingData) -> ModuleBatches:
        """``module id -> batch`` for a :class:`TrainingData` whose refs are solved."""
        kind = data.kind
        if kind == "batch":
            assert data.batch is not None  # the kind says it was given
            return self.as_module_batches(data.batch)
        if kind == "batches":
            if not isinstance(data.batches, (list, tuple)) or not data.batches:
                raise ValueError("batches must be a non-empty list of batches")
            return self.combine([self.as_module_batches(b) for b in data.batches])
        if kind == "episodes":
            if not isinstance(data.episodes, (list, tuple)) or not data.episodes:
                raise ValueError("episodes must be a non-empty list of episodes")
            return self.as_module_batches(self.episodes_to_batch(list(data.episodes)))
        raise ValueError(f"cannot turn {kind} into a batch")  # pragma: no cover (refs solved before)

    def pulled(self, batches: List[Batch]) -> ModuleBatches:
        """One batch pulled from each of ``data_iterators`` as one ``module id -> batch``."""
        return self.combine([self.as_module_batches(b) for b in batches])
