"""The minibatch plan of one ``Learner.update`` call: which (module batches, rows) each update trains on.

* ``minibatch_size=None``: each epoch is one update on the whole batch.
* ``minibatch_size=m``: every module's minibatch has exactly ``m`` rows, taken in order and wrapping
  around to the batch's start; ``ceil(num_epochs * largest_rows / m)`` updates.
* ``num_total_minibatches=k > 0``: exactly ``k`` updates, overriding ``num_epochs``.
* ``shuffle_batch_per_epoch=True`` (with ``m`` and more than one epoch or ``k > 0``): rows are permuted
  along the batch axis at each wrap-around; the first pass is in order.
* ``data_iterators`` (with ``num_iters``): up to ``num_iters`` updates, each on the next batch of
  every iterator; the plan ends early when an iterator is exhausted.

Each plan yields ``(module_batches, rows, env_rows)``: module id -> minibatch, module id -> its row
count, and the env steps the update counts (the largest module's rows).
"""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch

from .batch import Batch, ModuleBatches, RowStream

__all__ = ["check_loop_args", "plan_batch", "plan_iterators"]

#: One update's input: module id -> minibatch, module id -> its rows, the env steps the update counts.
Minibatch = Tuple[ModuleBatches, Dict[str, int], int]


def check_loop_args(
    kind: str,
    *,
    num_total_minibatches: object,
    num_epochs: object,
    minibatch_size: object,
    shuffle_batch_per_epoch: bool,
    num_iters: object,
) -> None:
    """Raise ValueError for loop arguments that do not make a plan for this input ``kind``."""
    if type(num_total_minibatches) is not int or num_total_minibatches < 0:
        raise ValueError(f"num_total_minibatches must be an int >= 0, got {num_total_minibatches!r}")
    if num_total_minibatches == 0 and (type(num_epochs) is not int or num_epochs < 1):
        raise ValueError(f"num_epochs must be an int >= 1, got {num_epochs!r}")
    if minibatch_size is not None and (type(minibatch_size) is not int or minibatch_size < 1):
        raise ValueError(f"minibatch_size must be None or an int >= 1, got {minibatch_size!r}")
    if kind == "data_iterators":
        if num_iters is None or type(num_iters) is not int or num_iters < 1:
            raise ValueError(f"data_iterators need num_iters (an int >= 1), got {num_iters!r}")
        if minibatch_size is not None or num_epochs != 1 or num_total_minibatches or shuffle_batch_per_epoch:
            raise ValueError(
                "with data_iterators each pulled batch is one minibatch: leave minibatch_size, "
                "num_epochs, num_total_minibatches and shuffle_batch_per_epoch at their defaults"
            )
    elif num_iters is not None:
        raise ValueError("num_iters only applies to data_iterators")


def plan_batch(
    module_batches: ModuleBatches,
    rows: Dict[str, int],
    *,
    num_total_minibatches: int,
    num_epochs: int,
    minibatch_size: Optional[int],
    shuffle_batch_per_epoch: bool,
    generator: Optional[torch.Generator],
) -> Iterator[Minibatch]:
    """The minibatches of one resolved batch (see the module docstring)."""
    if minibatch_size is None:
        env_rows = max(rows.values())
        for _ in range(num_total_minibatches or num_epochs):
            yield module_batches, rows, env_rows
        return
    m = minibatch_size
    n_updates = num_total_minibatches or -(-(num_epochs * max(rows.values())) // m)
    shuffle = shuffle_batch_per_epoch and (num_total_minibatches > 0 or num_epochs > 1)
    streams = {mid: RowStream(b, rows[mid], shuffle, generator) for mid, b in module_batches.items()}
    mb_rows = {mid: m for mid in module_batches}
    for _ in range(n_updates):
        yield {mid: s.take(m) for mid, s in streams.items()}, mb_rows, m


def plan_iterators(
    iterators: List[Iterator[Batch]],
    num_iters: int,
    to_module_batches: Callable[[List[Batch]], ModuleBatches],
    count_rows: Callable[[ModuleBatches], Dict[str, int]],
) -> Iterator[Minibatch]:
    """One minibatch per pull of every iterator, at most ``num_iters``; stops at the first exhausted one."""
    for _ in range(num_iters):
        pulled = []
        try:
            for it in iterators:
                pulled.append(next(it))
        except StopIteration:
            return
        mbs = to_module_batches(pulled)
        r = count_rows(mbs)
        yield mbs, r, max(r.values())
