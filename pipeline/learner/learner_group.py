"""`LearnerGroup`: one learner in-process, or (with Ray, later) n learner actors."""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Union

from .batch import split_rows
from .learner import Learner

__all__ = ["LearnerGroup", "plan_shards"]

_RAY_NEEDED = (
    "LearnerGroup(num_learners={n}) runs learners as Ray actors. {reason} "
    "Use num_learners=0 to train in this process."
)


def plan_shards(
    module_batches: Mapping[str, Any],
    num_learners: int,
    *,
    minibatch_size: Optional[int] = None,
    num_epochs: int = 1,
    num_total_minibatches: int = 0,
) -> tuple:
    """Split a multi-module batch across ``num_learners`` learners for data-parallel training.

    Returns ``(shards, num_total_minibatches)``: each module's rows are split contiguously into
    ``num_learners`` shards (sizes differ by at most one), and, with a minibatch size, one
    common minibatch count ``ceil(num_epochs * largest_shard_rows / minibatch_size)`` (or the
    given ``num_total_minibatches``) that every learner must run, so that learners that
    all-reduce gradients never wait on one another (RLlib's DDP deadlock).
    """
    if num_learners < 1:
        raise ValueError(f"num_learners must be >= 1, got {num_learners}")
    per_module = {mid: split_rows(b, num_learners) for mid, b in module_batches.items()}
    shards = [{mid: parts[i] for mid, parts in per_module.items()} for i in range(num_learners)]
    if num_total_minibatches:
        k = num_total_minibatches
    elif minibatch_size is not None:
        from .batch import num_rows

        largest = max(num_rows(b) for shard in shards for b in shard.values())
        k = math.ceil(num_epochs * largest / minibatch_size)
    else:
        k = 0
    return shards, k


class LearnerGroup:
    """Runs ``update`` on one or more learners and keeps their weights in sync.

    Args:
        learner_factory: a zero-argument callable returning a :class:`Learner` (e.g. a
            ``functools.partial`` of a Learner subclass); Ray actors call it remotely.
        num_learners: 0 runs one learner in this process. More learners run as Ray actors, the
            batch split across them (:func:`plan_shards`) with gradients kept in sync; that part
            lands with the distributed work and needs ``pip install rlpipe[ray]``.
    """

    def __init__(self, learner_factory: Callable[[], Learner], num_learners: int = 0) -> None:
        if not callable(learner_factory):
            raise TypeError("learner_factory must be a callable returning a Learner")
        if type(num_learners) is not int or num_learners < 0:
            raise ValueError(f"num_learners must be an int >= 0, got {num_learners!r}")
        self.num_learners = num_learners
        if num_learners > 0:
            try:
                import ray  # noqa: F401  (optional dependency)
            except ImportError:
                raise ImportError(
                    _RAY_NEEDED.format(n=num_learners, reason="Ray is not installed: `pip install rlpipe[ray]`.")
                ) from None
            raise NotImplementedError(
                _RAY_NEEDED.format(
                    n=num_learners, reason="Remote learners land with the distributed-runtime work and are not available yet."
                )
            )
        learner = learner_factory()
        if not isinstance(learner, Learner):
            raise TypeError(f"learner_factory returned {type(learner).__name__}, not a Learner")
        self._learner: Learner = learner

    # ------------------------------------------------------------------ properties
    @property
    def is_local(self) -> bool:
        """True when the single learner runs in this process."""
        return self.num_learners == 0

    @property
    def learner(self) -> Learner:
        """The in-process learner (local groups only)."""
        return self._learner

    @property
    def weights_seq_no(self) -> int:
        return self._learner.weights_seq_no

    # ------------------------------------------------------------------ training
    def update(self, *args: Any, async_update: bool = False, **kwargs: Any) -> Optional[dict]:
        """``Learner.update`` on the group (same arguments); returns its metrics.

        ``async_update=True`` needs remote learners: with ``num_learners=0`` it raises ValueError.
        """
        if async_update:
            raise ValueError(
                "async_update=True needs remote learners (num_learners > 0); a local LearnerGroup "
                "updates synchronously: call update(...) without async_update"
            )
        return self._learner.update(*args, **kwargs)

    def foreach_learner(self, fn: Callable[[Learner], Any]) -> List[Any]:
        """Call ``fn(learner)`` on every learner; returns the results in learner order."""
        return [fn(self._learner)]

    # ------------------------------------------------------------------ weights / state
    def get_weights(self, module_ids: Optional[Iterable[str]] = None, *, copy_tensors: bool = True) -> Dict[str, dict]:
        """module id -> state_dict (copies unless ``copy_tensors=False``)."""
        return self._learner.get_weights(module_ids, copy_tensors=copy_tensors)

    def set_weights(self, weights: Mapping, *, weights_seq_no: Optional[int] = None) -> bool:
        """Load weights on every learner; weights older than the group's ``weights_seq_no`` are ignored."""
        return self._learner.set_weights(weights, weights_seq_no=weights_seq_no)

    def get_state(self) -> Dict[str, Any]:
        return self._learner.get_state()

    def set_state(self, state: Mapping) -> None:
        self._learner.set_state(state)

    def save_to_path(self, path: Union[str, os.PathLike]) -> str:
        """Checkpoint the (first) learner into directory ``path``."""
        return self._learner.save_to_path(path)

    def restore_from_path(self, path: Union[str, os.PathLike]) -> None:
        """Restore every learner from a :meth:`save_to_path` directory (safe loading)."""
        self._learner.restore_from_path(path)

    def shutdown(self) -> None:
        """Release the learners (nothing to do in-process)."""
