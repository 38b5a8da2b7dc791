"""Samplers: which stored items a :class:`~pipeline.data.DequeBuffer` draws (one component of a buffer).

A buffer is a composition: the *storage* (:class:`~pipeline.data.storage.SlotStorage`) holds the
items in fixed slots; the *writer* (:mod:`.writer`) decides which item a push evicts (the oldest, by
default); the *sampler* picks slots; the buffer gathers
the picked slots' items (or their column rows, for ``sample_batch``) and hands out the sampler's
importance-sampling weights with them. Two samplers exist:

* :class:`UniformSampler` (the default): every stored item equally likely;
* :class:`~pipeline.data.prioritized_sampler.PrioritizedSampler`: items drawn in proportion to
  ``priority ** alpha`` (prioritized replay), priorities set by ``buffer.update_priority``.

A sampler is bound to one storage (:meth:`Sampler.attach`) and may listen to it (the storage's
listener interface, :class:`~pipeline.data.storage.StorageListener`) to keep per-slot state. The
buffer calls it under the storage's lock.
"""
from __future__ import annotations

import math
from typing import (TYPE_CHECKING, Dict, List, Optional, Protocol, Sequence, SupportsFloat, Tuple, Union, cast,
                    runtime_checkable)

import numpy as np

from .item import BufferedData
from .storage import SlotStorage

if TYPE_CHECKING:
    import torch

#: New priorities for some items, one each: an array, a tensor (any device, may require grad) or a list of numbers.
Priorities = Union[np.ndarray, "torch.Tensor", Sequence[float]]

__all__ = ["Sampler", "UniformSampler", "check_priority", "priority_array"]


@runtime_checkable
class Sampler(Protocol):
    """What a buffer asks of its sampler (the caller holds the storage's lock).

    ``wants_priorities``: True when :meth:`update_priority` is meaningful (the pipeline writes the
    learner's per-row priorities back); ``supports_groupby``: False when ``sample(groupby=...)``
    cannot follow this sampler's law (the buffer then refuses it).
    """

    wants_priorities: bool
    supports_groupby: bool

    def attach(self, storage: SlotStorage) -> None:
        """Bind to ``storage`` (once; attaching again to the same storage does nothing)."""

    def draw(self, k: int, replace: bool, pool: Optional[np.ndarray] = None
             ) -> Tuple[np.ndarray, Optional[List[int]], Optional[np.ndarray]]:
        """``(slots, ids, weights)``: ``k`` slots (``1 <= k``; distinct unless ``replace``, and then ``k <=``
        the pool's size) from the occupied slots, or from ``pool`` (an array of occupied slots); the
        indices of their items as a list, or None (the buffer reads them from the storage when it
        needs them); their float32 importance-sampling weights, or None (all weigh 1). One sample."""

    def weights(self, slots: np.ndarray) -> Optional[np.ndarray]:
        """IS weights of these occupied slots without drawing (``sample(indices=...)``), or None."""

    def items(self, slots: np.ndarray, weights: Optional[np.ndarray], replace: bool,
              meta_weights: bool) -> List[BufferedData]:
        """The stored items of the slots :meth:`draw` just returned, as the storage's sample list
        (``storage.result(slots, True, replace)``), their meta up to date; ``meta["priority_IS"]`` from
        ``weights`` too when ``meta_weights``."""

    def update_priority(self, indices: Sequence[int], priorities: Priorities) -> List[bool]:
        """New priorities for the items ``indices``; one bool per index: was it stored."""

    def state_dict(self) -> Dict[str, object]:
        """The sampler's own state (loadable with ``torch.load(weights_only=True)``)."""

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Restore :meth:`state_dict`."""


class UniformSampler:
    """Every stored item equally likely: the offsets the storage draws (``SlotStorage.draw``) into the
    occupied slots. Keeps no state of its own; priorities are not supported."""

    wants_priorities = False
    supports_groupby = True

    def __init__(self) -> None:
        self.storage: Optional[SlotStorage] = None

    def __repr__(self) -> str:
        return "UniformSampler()"

    def attach(self, storage: SlotStorage) -> None:
        """Bind to ``storage``."""
        _bind(self, storage)

    def draw(self, k: int, replace: bool, pool: Optional[np.ndarray] = None
             ) -> Tuple[np.ndarray, Optional[List[int]], Optional[np.ndarray]]:
        """``k`` uniformly drawn slots of ``pool`` (default: every occupied slot); no ids, no weights."""
        s = self.storage
        assert s is not None, "UniformSampler: attach() it to a storage first"
        if pool is None:
            return s.dense[s.draw(s.count, k, replace)], None, None
        return pool[s.draw(len(pool), k, replace)], None, None

    def weights(self, slots: np.ndarray) -> Optional[np.ndarray]:
        """None: uniform samples weigh 1."""
        return None

    def items(self, slots: np.ndarray, weights: Optional[np.ndarray], replace: bool,
              meta_weights: bool) -> List[BufferedData]:
        """The storage's sample list of ``slots`` (no weights to write)."""
        s = self.storage
        assert s is not None, "UniformSampler: attach() it to a storage first"
        return s.result(slots, True, replace)

    def update_priority(self, indices: Sequence[int], priorities: Priorities) -> List[bool]:
        """Always raises: a uniform sampler has no priorities."""
        raise TypeError("update_priority(): this buffer samples uniformly (UniformSampler) and keeps no priorities; "
                        "build it with DequeBuffer(size, sampler=PrioritizedSampler(...))")

    def state_dict(self) -> Dict[str, object]:
        """Empty: nothing to save."""
        return {}

    def load_state_dict(self, state: Dict[str, object]) -> None:
        """Nothing to restore."""


class _Bound(Protocol):
    """A sampler that keeps the storage it serves in ``storage``."""

    storage: Optional[SlotStorage]


def _bind(sampler: _Bound, storage: SlotStorage) -> bool:
    """Set ``sampler.storage``; False when it was already bound to ``storage`` (nothing to do)."""
    if sampler.storage is storage:
        return False
    if sampler.storage is not None:
        raise ValueError(f"{type(sampler).__name__} is already used by another buffer's storage: "
                         "create one sampler per buffer")
    sampler.storage = storage
    return True


def check_priority(p: object) -> float:
    """``p`` as a float; ``ValueError`` unless it is a finite number ``>= 0``."""
    try:
        f = float(cast(SupportsFloat, p))  # anything float() takes; other values are refused below
    except (TypeError, ValueError):
        f = math.nan
    if not (math.isfinite(f) and f >= 0):
        raise ValueError(f"priority must be a finite number >= 0, got {p!r}")
    return f


def priority_array(priorities: Priorities, n: int, where: str = "update_priority") -> Tuple[np.ndarray, float, float]:
    """``priorities`` (array, tensor, list; possibly on another device or requiring grad) as a flat
    float64 array of length ``n`` with its min and max; ``ValueError`` for a length mismatch or a
    NaN, infinite or negative value."""
    if hasattr(priorities, "detach"):  # a torch tensor
        priorities = priorities.detach().cpu().numpy()
    arr = np.asarray(priorities, dtype=np.float64).reshape(-1)
    if len(arr) != n:
        raise ValueError(f"{where}: {len(arr)} priorities for {n} indices")
    if not n:
        return arr, math.inf, -math.inf
    lo, hi = float(np.minimum.reduce(arr)), float(np.maximum.reduce(arr))
    if not (lo >= 0 and hi < math.inf):
        raise ValueError("priorities must be finite and >= 0 (got NaN, inf or a negative value)")
    return arr, lo, hi


_NO_SLOTS = np.zeros(0, dtype=np.int64)


def _check_size(name: str, value: object, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def draw_slots(s: SlotStorage, sampler: "Sampler", size: int, replace: bool, sample_range: Optional[slice],
               ignore_insufficient: bool) -> Tuple[np.ndarray, Optional[List[int]], Optional[np.ndarray]]:
    """The sampler's ``(slots, ids or None, IS weights or None)`` for ``size`` items of the buffer or
    of ``sample_range`` (``_NO_SLOTS`` when there is nothing to draw and that is allowed)."""
    if sample_range is not None and not isinstance(sample_range, slice):
        raise TypeError(f"sample_range must be a slice (e.g. slice(-1000, None)), got {sample_range!r}")
    k = size if type(size) is int and size >= 0 else _check_size("sample size", size)
    if sample_range is None:
        pool, n = None, s.count
    else:
        pool = s.ordered_slots()[sample_range].copy()
        n = len(pool)
    if k > 0 and (n == 0 or (not replace and k > n)):
        if not ignore_insufficient:
            where = "" if sample_range is None else f" in sample_range {sample_range}"
            raise ValueError(f"cannot sample {k} items{'' if replace else ' without replacement'}: "
                             f"the buffer holds {n}{where}; push more data first or pass "
                             "ignore_insufficient=True")
        k = 0 if n == 0 else (k if replace else n)
    if k == 0:
        return _NO_SLOTS, [], None
    return sampler.draw(k, replace, pool)
