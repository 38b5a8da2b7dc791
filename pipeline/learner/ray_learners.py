"""Learners as Ray actors: data-parallel training for :class:`LearnerGroup` (``num_learners >= 1``).

How one ``update`` runs on ``n`` learner actors:

* The input goes into Ray's object store once (``batch``/``batches``/``episodes``) or already is
  there (``batch_refs``/``episodes_refs``); every actor gets the same refs, resolves them itself
  (the data never travels back through the driver) and keeps the contiguous row shard of its rank
  (sizes differ by at most one; with fewer rows than learners, learner ``i`` trains on row
  ``i % rows`` so that no learner is ever empty).
* Every actor computes the same minibatch count from the total row count and runs exactly that
  many minibatches (``num_total_minibatches``), so gradient all-reduces always pair up: uneven or
  tiny shards never deadlock (RLlib's DDP hang).
* After each backward pass the actors all-reduce their gradients over ``torch.distributed`` (gloo
  on CPU; NCCL when the learner's parameters are on a GPU, see :func:`collective_backend`), set up through Ray's own collective API (``ray.util.collective``, which rendezvouses
  through Ray's key-value store): the gradient is the row-weighted mean over learners, so with a
  mean-reduced loss and ``minibatch_size=None`` it equals the full-batch gradient of one learner.
  Clipping and the optimizer step then run on identical gradients: the weights stay identical.

Ray is optional: importing this module does not import Ray; :func:`require_ray` raises an
ImportError that names the extra (``pip install rlpipe[ray]``).
"""

from __future__ import annotations

import itertools
import math
import os
import types
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, TypeVar

import torch

from ..device import DeviceLike, ray_gpu_ids
from .batch import Batch, num_rows, split_rows, take_rows
from .learner import Learner
from .training_data import TrainingData

__all__ = ["require_ray", "LearnerWorker", "shard_for_rank", "total_minibatches", "collective_backend", "worker_device"]

_group_ids = itertools.count()
_T = TypeVar("_T")


def require_ray(what: str) -> types.ModuleType:
    """Import and return ``ray``; a clear ImportError naming the extra when it is missing."""
    try:
        import ray  # optional extra: ray
    except ImportError:
        raise ImportError(
            f"{what} needs Ray, which is not installed. Install the extra with "
            "`pip install rlpipe[ray]` (or `pip install ray`)."
        ) from None
    return ray


def collective_backend(params: Iterable[object]) -> str:
    """The all-reduce backend for these parameters: ``"nccl"`` when they live on a GPU, else ``"gloo"``.
    (Only the gloo path is exercised on this project's CPU-only CI.)"""
    return "nccl" if any(getattr(p, "is_cuda", False) for p in params) else "gloo"


def shard_for_rank(module_batches: Mapping[str, Batch], rank: int, world: int) -> Dict[str, object]:
    """Rank ``rank``'s contiguous row shard of every module batch (never empty, see module doc)."""
    out: Dict[str, object] = {}
    for mid, b in module_batches.items():
        rows = num_rows(b, where=f"module {mid!r} batch")
        if rows == 0:
            raise ValueError(f"module {mid!r} batch has zero rows; there is nothing to train on")
        if rows >= world:
            out[mid] = split_rows(b, world)[rank]
        else:
            out[mid] = take_rows(b, torch.tensor([rank % rows]))
    return out


def total_minibatches(
    rows: Mapping[str, int], world: int, *, minibatch_size: Optional[int], num_epochs: int, num_total_minibatches: int
) -> int:
    """The minibatch count every learner runs: that of the largest shard (0 = one per epoch)."""
    if num_total_minibatches:
        return num_total_minibatches
    if minibatch_size is None:
        return 0
    largest = max(max(1, math.ceil(r / world)) for r in rows.values())
    return math.ceil(num_epochs * largest / minibatch_size)


def worker_device(device: DeviceLike, gpu_ids: Optional[Sequence[object]]) -> DeviceLike:
    """Where a learner actor trains: ``device`` when given; else ``'cuda:0'`` when Ray assigned it GPUs
    (``gpu_ids`` from ``ray.get_gpu_ids()``: Ray sets ``CUDA_VISIBLE_DEVICES``, so the first assigned GPU is
    ``cuda:0`` inside the actor); else None (the learner stays where its factory put it)."""
    if device is not None:
        return device
    return "cuda:0" if gpu_ids else None


class LearnerWorker:
    """One learner of a :class:`LearnerGroup`, run as a Ray actor (``ray.remote(LearnerWorker)``).

    Args:
        learner_factory: zero-argument callable returning the :class:`Learner` (pickled to the actor).
        rank, world_size: this learner's rank and the number of learners.
        group_name: the name of the collective group (unique per LearnerGroup).
        torch_threads: torch intra-op threads in the actor (1 suits small networks).
        device: where the learner trains (see :mod:`pipeline.device`). Default: the GPU Ray assigned to this
            actor (``num_gpus_per_learner``; ``ray.get_gpu_ids()``, which the actor sees as ``cuda:0``), else
            wherever ``learner_factory`` put it.

    Weights and states leave the actor as host tensors (``Learner.get_weights`` / ``get_state``) and load
    onto the receiver's device.
    """

    def __init__(
        self,
        learner_factory: Callable[[], Learner],
        rank: int,
        world_size: int,
        group_name: str,
        torch_threads: Optional[int] = 1,
        device: DeviceLike = None,
    ) -> None:
        if torch_threads:
            torch.set_num_threads(torch_threads)
        learner = learner_factory()
        if not isinstance(learner, Learner):
            raise TypeError(f"learner_factory returned {type(learner).__name__}, not a Learner")
        target = worker_device(device, ray_gpu_ids())
        if target is not None:
            learner.to(target)
        self.learner = learner
        self.rank, self.world_size, self.group_name = rank, world_size, group_name

    # ------------------------------------------------------------------ setup
    def setup_collective(self) -> bool:
        """Join the gloo group (a no-op for a single learner) and install the gradient all-reduce."""
        if self.world_size > 1:
            from ray.util import collective  # optional extra: ray

            params = [p for m in self.learner.modules.values() for p in m.parameters()]
            collective.init_collective_group(self.world_size, self.rank, backend=collective_backend(params),
                                             group_name=self.group_name)
            self.learner.gradient_sync = self._allreduce_gradients
        return True

    def _allreduce_gradients(self, gradients: Dict[str, List[torch.nn.Parameter]], rows: Mapping[str, int]) -> None:
        """Replace each module's gradients by the row-weighted mean over all learners (one all-reduce)."""
        from ray.util import collective  # optional extra: ray

        flat_parts, weights = [], []
        for mid, params in gradients.items():
            w = float(rows[mid])
            weights.append(w)
            for p in params:
                g = p.grad
                flat_parts.append((g.reshape(-1) * w) if g is not None
                                  else torch.zeros(p.numel(), dtype=p.dtype, device=p.device))
        flat = torch.cat(flat_parts + [torch.tensor(weights, dtype=flat_parts[0].dtype, device=flat_parts[0].device)])
        collective.allreduce(flat, group_name=self.group_name)
        totals = flat[-len(weights):]
        offset = 0
        for i, (mid, params) in enumerate(gradients.items()):
            inv = 1.0 / float(totals[i])
            for p in params:
                n = p.numel()
                g = flat[offset:offset + n].view_as(p).mul_(inv)
                if p.grad is None:
                    p.grad = g.clone()
                else:
                    p.grad.copy_(g)
                offset += n

    # ------------------------------------------------------------------ training
    def update(self, kind: str, payload: Any, kwargs: Dict[str, Any]) -> Optional[dict]:
        """Resolve the input, keep this rank's shard and run ``Learner.update`` on it. ``payload`` is the input of
        kind ``kind`` and ``kwargs`` the other ``update`` arguments, both passed on to their typed parameters."""
        learner = self.learner
        if kind in ("batch_refs", "episodes_refs"):
            # refs nested in a list arrive unresolved: resolve them here, not in the driver
            data = TrainingData(**{kind: list(payload)}).solve_refs()
        else:
            data = TrainingData(**{kind: payload})
        module_batches = learner.inputs.resolve(data)
        rows = {mid: num_rows(b, where=f"module {mid!r} batch") for mid, b in module_batches.items()}
        shard = shard_for_rank(module_batches, self.rank, self.world_size)
        kwargs = dict(kwargs)
        kwargs["num_total_minibatches"] = total_minibatches(
            rows,
            self.world_size,
            minibatch_size=kwargs.get("minibatch_size"),
            num_epochs=kwargs.get("num_epochs", 1),
            num_total_minibatches=kwargs.get("num_total_minibatches", 0),
        )
        if not kwargs["num_total_minibatches"]:
            kwargs.pop("num_total_minibatches")
        return learner.update(batch=shard, **kwargs)

    # ------------------------------------------------------------------ weights / state
    def get_weights(self, module_ids: Optional[List[str]] = None) -> Dict[str, dict]:
        return self.learner.get_weights(module_ids)

    def set_weights(self, weights: Mapping, weights_seq_no: Optional[int] = None) -> bool:
        return self.learner.set_weights(weights, weights_seq_no=weights_seq_no)

    def get_state(self) -> Dict[str, object]:
        return self.learner.get_state()

    def set_state(self, state: Mapping) -> None:
        self.learner.set_state(state)

    def weights_seq_no(self) -> int:
        return self.learner.weights_seq_no

    def save_to_path(self, path: str) -> str:
        return self.learner.save_to_path(path)

    def restore_from_path(self, path: str) -> None:
        self.learner.restore_from_path(path)

    def apply(self, fn: Callable[[Learner], _T]) -> _T:
        return fn(self.learner)

    def pid(self) -> int:
        return os.getpid()


def new_group_name() -> str:
    """A collective-group name unique in this driver process."""
    return f"rlpipe-learners-{os.getpid()}-{next(_group_ids)}"
