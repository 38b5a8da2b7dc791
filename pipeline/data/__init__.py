"""Replay buffers: ``DequeBuffer`` with a middleware chain, prioritized replay and fast batching.

Quick start::

    from pipeline.data import DequeBuffer, PrioritizedSampler
    buf = DequeBuffer(20000, sampler=PrioritizedSampler(alpha=0.6, beta=0.4))   # default: uniform
    buf.push({"obs": obs, "action": a, "reward": r, "next_obs": obs2, "done": d})
    batch = buf.sample_batch(64)       # dict of [64, ...] tensors + "indices" (+ "weight": prioritized)
    buf.update_priority(batch["indices"], td_error.abs())             # prioritized only

A buffer is a storage (``SlotStorage``) plus a sampler (``UniformSampler``, ``PrioritizedSampler``:
``buf.sampler``) plus a writer (``FifoWriter`` by default: ``buf.writer``, which item a push evicts)
plus an optional middleware chain. DI-engine's ``buf.use(PriorityExperienceReplay(buf))``
is ``DequeBuffer(size, sampler=PrioritizedSampler(...))`` here (docs/from_di_engine.md).

What goes in and out: :class:`Transition` items, :class:`TrainBatch` batches, and the
:class:`TrainOutput` whose ``priority`` goes back (:mod:`pipeline.data.records`).

Prioritized replay's hot loops are compiled (``_per_kernels.c``, built by ``pip install -e .``)
when a C compiler was available, else numpy does the same work; ``RLPIPE_NO_EXT=1`` forces numpy.
"""
from .buffer import ACTIONS, BufferedData, DequeBuffer, Middleware
from .buffer_middleware import (
    clone_object,
    group_sample,
    padding,
    sample_range_view,
    staleness_check,
    use_time_check,
)
from .collate import collate, collate_transitions, stack_transitions, to_treetensor
from .prioritized_sampler import PrioritizedSampler
from .records import TrainBatch, TrainOutput, Transition
from .sampler import Sampler, UniformSampler
from .storage import SlotStorage, StorageListener
from .writer import DROP, FREE, FifoWriter, Writer

__all__ = [
    "ACTIONS",
    "BufferedData",
    "DequeBuffer",
    "Middleware",
    "SlotStorage",
    "StorageListener",
    "Sampler",
    "UniformSampler",
    "PrioritizedSampler",
    "Writer",
    "FifoWriter",
    "FREE",
    "DROP",
    "clone_object",
    "group_sample",
    "padding",
    "sample_range_view",
    "staleness_check",
    "use_time_check",
    "collate",
    "collate_transitions",
    "stack_transitions",
    "to_treetensor",
    "Transition",
    "TrainBatch",
    "TrainOutput",
]
