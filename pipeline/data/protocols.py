"""What the rest of rlpipe may assume about a replay buffer and its middleware.

Pipeline middleware (``data_pusher``, ``offpolicy_data_fetcher``, HER's fetcher, ...) are handed a
buffer; these :class:`typing.Protocol` s say what they use, so any object with these methods works
(``DequeBuffer`` and its views satisfy all of them). Capabilities of buffer middleware are found by
attribute, never by class name:

* :class:`PriorityFeedback`: a buffer sampler (``buffer.sampler``, e.g. ``PrioritizedSampler``) or
  a middleware whose sampling follows priorities that the learner writes back after each train step
  (``buffer.update_priority(index, priorities)``; a middleware: ``update_many(index, meta={"priority": ...})``);
* :class:`SampleArguments`: a middleware that needs extra ``sample`` arguments from the pipeline
  (``staleness_check`` needs the current train iteration).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Protocol, Sequence, Union, overload, runtime_checkable

if TYPE_CHECKING:
    from .item import BufferedData
    from .records import TrainBatch
    from .storage import IndexBatch, ManyMeta

__all__ = ["ReplayBuffer", "BatchSampling", "PriorityFeedback", "SampleArguments",
           "wants_priorities", "samples_by_priority", "sample_arguments"]


@runtime_checkable
class ReplayBuffer(Protocol):
    """A buffer as pipeline middleware see it."""

    def push(self, data: object, meta: Optional[Mapping[str, object]] = None) -> BufferedData:
        """Store one item (a transition or a whole episode) with its meta."""

    @overload
    def sample(self, size: Optional[int] = None, *, groupby: None = None, **kwargs: Any) -> List[BufferedData]: ...

    @overload
    def sample(self, size: Optional[int] = None, *, groupby: str, **kwargs: Any) -> List[List[BufferedData]]: ...

    def sample(self, size: Optional[int] = None, *, groupby: Optional[str] = None, **kwargs: Any
               ) -> Union[List[BufferedData], List[List[BufferedData]]]:
        """Items (``.data``, ``.index``, ``.meta``) or, with ``groupby``, groups of them. ``kwargs``: the buffer's
        own ``sample`` arguments (typed by the buffer) and its middleware's."""

    def update_many(self, indices: IndexBatch, data: Optional[Sequence[object]] = None,
                    meta: ManyMeta = None) -> List[bool]:
        """Batched update (e.g. ``meta={"priority": array}``)."""

    def count(self) -> int:
        """Number of stored items."""

    @property
    def middleware(self) -> Sequence[object]:
        """The buffer's middleware, in call order."""


@runtime_checkable
class BatchSampling(Protocol):
    """A buffer that hands out whole batches (``DequeBuffer.sample_batch``)."""

    def sample_batch(self, size: int, replace: bool = False, sample_range: Optional[slice] = None,
                     ignore_insufficient: bool = False, **kwargs: object) -> TrainBatch:
        """A dict of ``[size, ...]`` tensors (non-numeric fields as lists) with ``indices`` (``[size]`` int64,
        the items' buffer indices) and, with importance-sampling weights, ``weight`` (``[size]`` float32)."""


@runtime_checkable
class PriorityFeedback(Protocol):
    """A buffer sampler or middleware that wants the learner's per-row priorities back after each train
    step (``PrioritizedSampler``, or a middleware of your own). ``wants_priorities`` is True."""

    wants_priorities: bool

    def priority(self, index: int) -> Optional[float]:
        """The current priority of item ``index`` (None if it is not stored)."""


@runtime_checkable
class SampleArguments(Protocol):
    """Buffer middleware that needs extra ``sample`` keyword arguments from the pipeline."""

    def sample_kwargs(self, train_iter: int) -> Dict[str, object]:
        """The extra ``sample`` arguments for the learner's current train iteration."""


def wants_priorities(buffer: object) -> bool:
    """True when ``buffer``'s sampler or one of its middleware takes priorities back (:class:`PriorityFeedback`)."""
    return samples_by_priority(buffer) or any(getattr(m, "wants_priorities", False) is True
                                              for m in getattr(buffer, "middleware", ()))


def samples_by_priority(buffer: object) -> bool:
    """True when ``buffer``'s sampler takes priorities: ``buffer.update_priority(indices, priorities)`` works."""
    return getattr(getattr(buffer, "sampler", None), "wants_priorities", False) is True


def sample_arguments(buffer: object, train_iter: int) -> Dict[str, object]:
    """The extra ``sample`` arguments ``buffer``'s middleware need (:class:`SampleArguments`)."""
    out: Dict[str, object] = {}
    for m in getattr(buffer, "middleware", ()):
        fn = getattr(m, "sample_kwargs", None)
        if fn is not None:
            out.update(fn(train_iter))
    return out
