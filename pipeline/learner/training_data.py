"""`TrainingData`: exactly one kind of input for ``Learner.update``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Iterable, List, Mapping as MappingT, Optional, Sequence, Union

from .batch import Batch, is_tree

#: One episode: its transitions in order (dicts or trees), or module id -> such a sequence.
Episode = Union[Sequence[object], MappingT[str, Sequence[object]]]
#: ``data_iterators``: an iterator of batches, or a list of iterators (or iterables) of batches.
DataIterators = Union[Iterator[Batch], Sequence[Iterable[Batch]]]

__all__ = ["TrainingData", "INPUT_KINDS", "ray_get"]

INPUT_KINDS = ("batch", "batches", "batch_refs", "episodes", "episodes_refs", "data_iterators")

_RAY_HINT = (
    "{what} holds Ray object refs, and resolving them needs Ray, which is not installed. "
    "Install it with `pip install rlpipe[ray]`, or pass the data itself (batch=/episodes=)."
)


def ray_get(refs: Sequence[object], *, what: str = "batch_refs") -> List[object]:
    """``ray.get(refs)``, with a clear ImportError when Ray is not installed."""
    try:
        import ray  # optional dependency
    except ImportError as exc:
        raise ImportError(_RAY_HINT.format(what=what)) from exc
    return ray.get(refs)


def _as_list(value: object, what: str) -> List[object]:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise TypeError(f"{what} must be a list, got {type(value).__name__}")


@dataclass
class TrainingData:
    """Exactly one of the input kinds accepted by ``Learner.update``.

    * ``batch``: one batch (multi-module mapping ``module_id -> batch`` or a single batch).
    * ``batches``: a list of batches, concatenated along the batch axis into one.
    * ``batch_refs``: a list of Ray object refs of batches (resolved with ``ray.get``).
    * ``episodes``: a list of episodes; an episode is a sequence of transitions (dicts or
      trees), or a mapping ``module_id -> sequence of transitions``; turned into one batch.
    * ``episodes_refs``: a list of Ray object refs of episodes (or of lists of episodes).
    * ``data_iterators``: an iterator of batches, or a list of them; each update step pulls
      the next batch from every iterator (concatenated). Needs ``num_iters`` in ``update``.
    """

    batch: Optional[Batch] = None
    batches: Optional[List[Batch]] = None
    batch_refs: Optional[List[object]] = None  # Ray object refs
    episodes: Optional[List[Episode]] = None
    episodes_refs: Optional[List[object]] = None  # Ray object refs
    data_iterators: Optional[DataIterators] = None

    def given(self) -> List[str]:
        """Names of the input kinds that are set (not None)."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]

    @property
    def kind(self) -> str:
        """The single input kind; ValueError unless exactly one is given."""
        given = self.given()
        if len(given) != 1:
            if not given:
                raise ValueError(f"update needs exactly one input, none was given (one of {', '.join(INPUT_KINDS)})")
            raise ValueError(f"update needs exactly one input, got {len(given)}: {', '.join(given)}")
        return given[0]

    def validate(self) -> str:
        """Check there is exactly one input; return its kind."""
        return self.kind

    def solve_refs(self) -> "TrainingData":
        """Resolve ``batch_refs``/``episodes_refs`` with ``ray.get`` into ``batches``/``episodes``."""
        kind = self.kind
        if kind == "batch_refs":
            refs = _as_list(self.batch_refs, "batch_refs")
            return TrainingData(batches=list(ray_get(refs, what="batch_refs")))
        if kind == "episodes_refs":
            refs = _as_list(self.episodes_refs, "episodes_refs")
            resolved = ray_get(refs, what="episodes_refs")
            episodes: list = []
            for item in resolved:
                # a ref may hold one episode or a list of episodes
                if isinstance(item, list) and item and _looks_like_episode(item[0]):
                    episodes.extend(item)
                else:
                    episodes.append(item)
            return TrainingData(episodes=episodes)
        return self

    def iterators(self) -> List[Iterator]:
        """``data_iterators`` as a list of iterators."""
        its = self.data_iterators
        if isinstance(its, Iterator):
            return [its]
        if isinstance(its, (list, tuple)):
            out = []
            for i, it in enumerate(its):
                if isinstance(it, Iterator):
                    out.append(it)
                elif isinstance(it, Mapping) or is_tree(it) or not hasattr(it, "__iter__"):
                    raise TypeError(
                        f"data_iterators[{i}] is a {type(it).__name__}, not an iterator of batches; "
                        "pass batch=/batches= for data you already have"
                    )
                else:
                    out.append(iter(it))
            if not out:
                raise ValueError("data_iterators is an empty list")
            return out
        raise TypeError(
            f"data_iterators must be an iterator of batches or a list of them, got {type(its).__name__}"
        )


def _looks_like_episode(x: object) -> bool:
    """An episode is a list/tuple of transitions or a mapping module_id -> such a list."""
    if isinstance(x, (list, tuple)):
        return True
    if isinstance(x, Mapping):
        return bool(x) and all(isinstance(v, (list, tuple)) for v in x.values())
    return False
