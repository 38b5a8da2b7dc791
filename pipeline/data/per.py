"""Prioritized experience replay, DI-engine style: ``buf.use(PriorityExperienceReplay(buf))``.

:class:`PriorityExperienceReplay` is a thin adapter for ported DI-engine code: it builds a
:class:`~pipeline.data.prioritized_sampler.PrioritizedSampler` on the buffer's storage and, when
used, hands it to the buffer (``buffer.use`` makes it the buffer's sampler; the adapter is not called
in the middleware chain). New code builds the buffer with the sampler directly:
``DequeBuffer(size, sampler=PrioritizedSampler(alpha=0.6, beta=0.4, anneal=1e5))``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

from .buffer import DequeBuffer
from .prioritized_sampler import PrioritizedSampler
from .storage import SlotStorage

__all__ = ["PriorityExperienceReplay"]

_OWN = ("buffer", "sampler")


class PriorityExperienceReplay:
    """Prioritized experience replay (Schaul et al. 2016) for ``buffer.use(...)``: a
    :class:`~pipeline.data.prioritized_sampler.PrioritizedSampler` with DI-engine's argument names
    (``priority_power_factor`` = alpha, ``IS_weight_power_factor`` = beta at the start,
    ``IS_weight_anneal_train_iter`` = draws until beta is 1, ``IS_weight``: weights on or off).

    - push: the priority is ``meta["priority"]`` if given, else the largest priority seen so far
      (written back into ``meta["priority"]``).
    - sample: every returned item gets ``meta["priority_IS"]`` (the importance-sampling weight, with
      ``IS_weight``); ``sample_batch`` returns the weights as ``.weight``.
    - update / update_many: a ``"priority"`` in meta (finite, ``>= 0``) becomes the new priority
      (as ``buffer.update_priority`` does); ``meta["priority"]`` is written lazily (see the sampler).
    - deletes, evictions, ``clear`` and ``load_data`` are tracked through the storage, also when
      they happen through a view (a view itself samples uniformly). ``groupby`` sampling is not
      supported.

    The sampler's attributes (``max_priority``, ``sample_count``, ``beta``, ``kernel``, ...) are read
    and written through the adapter. Use one per buffer.
    """

    #: the capability pipeline middleware look for (``pipeline.data.protocols.PriorityFeedback``)
    wants_priorities = True

    def __init__(self, buffer: DequeBuffer, IS_weight: bool = True, priority_power_factor: float = 0.6,
                 IS_weight_power_factor: float = 0.4, IS_weight_anneal_train_iter: float = 1e5) -> None:
        storage = getattr(buffer, "storage", None)
        if not isinstance(storage, SlotStorage):
            raise TypeError("PriorityExperienceReplay needs a DequeBuffer (or a view of one): a buffer whose "
                            f"`storage` is a SlotStorage; got {type(buffer).__name__}")
        sampler = PrioritizedSampler(alpha=priority_power_factor, beta=IS_weight_power_factor,
                                     anneal=IS_weight_anneal_train_iter, is_weight=IS_weight)
        sampler.attach(storage)
        object.__setattr__(self, "buffer", buffer)
        object.__setattr__(self, "sampler", sampler)

    def __getattr__(self, name: str) -> Any:  # only for names the adapter does not have: the sampler's
        if name in _OWN or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.sampler, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.sampler, name, value)

    def __call__(self, action: str, chain: Callable, *args: Any, **kwargs: Any) -> Any:
        """Passes every action on (a buffer that uses this adapter samples with its sampler instead)."""
        return chain(*args, **kwargs)

    def priority(self, index: int) -> Optional[float]:
        """The current priority of item ``index`` (None if it is not stored)."""
        return self.sampler.priority(index)

    def state_dict(self) -> Dict[str, Any]:
        """The sampler's state: counters plus every live item's priority (by index)."""
        return self.sampler.state_dict()

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (priorities of indices no longer stored are ignored)."""
        self.sampler.load_state_dict(state)
