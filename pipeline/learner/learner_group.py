"""`LearnerGroup`: one learner in-process, or (with Ray, later) n learner actors."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, TypeVar, Union

from .batch import Batch, num_rows, split_rows
from .learner import Learner
from .metrics import MetricsLogger
from .ray_learners import LearnerWorker, new_group_name, require_ray
from .training_data import INPUT_KINDS

if TYPE_CHECKING:
    from ray import ObjectRef
    from ray.actor import ActorHandle

_T = TypeVar("_T")

__all__ = ["LearnerGroup", "plan_shards"]

_RAY_NEEDED = (
    "LearnerGroup(num_learners={n}) runs learners as Ray actors. {reason} "
    "Use num_learners=0 to train in this process."
)


def plan_shards(
    module_batches: Mapping[str, Batch],
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

        largest = max(num_rows(b) for shard in shards for b in shard.values())
        k = math.ceil(num_epochs * largest / minibatch_size)
    else:
        k = 0
    return shards, k


class LearnerGroup:
    """Runs ``update`` on one or more learners and keeps their weights in sync.

    Args:
        learner_factory: a zero-argument callable returning a :class:`Learner` (e.g. a
            ``functools.partial`` of a Learner subclass); Ray actors call it remotely, so it must
            pickle (a module-level class or function, not a lambda in ``__main__`` on a cluster).
        num_learners: 0 runs one learner in this process. ``n >= 1`` runs ``n`` learners as Ray
            actors (``pip install 'rlpipe[ray]'``; uses the running Ray, or starts a local one):
            each update's rows are sharded across them and their gradients averaged with
            ``torch.distributed`` (gloo), so their weights stay identical (see
            :mod:`pipeline.learner.ray_learners`).
        num_cpus_per_learner, num_gpus_per_learner: Ray resources of each learner actor. A learner actor
            with a GPU trains on it (``ray.get_gpu_ids()``; gradients are then all-reduced with NCCL); weights
            and states come back as host tensors.
        torch_threads: torch threads inside each learner actor.
        max_requests_in_flight: with ``async_update=True``, at most this many updates are queued;
            one more waits for the oldest to finish (nothing is dropped).
        start_timeout: seconds to wait for the learner actors to start (e.g. while the cluster
            lacks free CPUs/GPUs) before raising instead of hanging.
    """

    def __init__(
        self,
        learner_factory: Callable[[], Learner],
        num_learners: int = 0,
        *,
        num_cpus_per_learner: float = 1,
        num_gpus_per_learner: float = 0,
        torch_threads: Optional[int] = 1,
        max_requests_in_flight: int = 2,
        start_timeout: float = 300.0,
    ) -> None:
        if not callable(learner_factory):
            raise TypeError("learner_factory must be a callable returning a Learner")
        if type(num_learners) is not int or num_learners < 0:
            raise ValueError(f"num_learners must be an int >= 0, got {num_learners!r}")
        if type(max_requests_in_flight) is not int or max_requests_in_flight < 1:
            raise ValueError(f"max_requests_in_flight must be an int >= 1, got {max_requests_in_flight!r}")
        self.num_learners = num_learners
        self._actors: List[ActorHandle] = []
        self._in_flight: List[List[ObjectRef]] = []
        self._max_in_flight = max_requests_in_flight
        if num_learners > 0:
            self._start_actors(learner_factory, num_cpus_per_learner, num_gpus_per_learner, torch_threads, start_timeout)
            self._learner: Optional[Learner] = None
            return
        learner = learner_factory()
        if not isinstance(learner, Learner):
            raise TypeError(f"learner_factory returned {type(learner).__name__}, not a Learner")
        self._learner = learner

    def _start_actors(
        self, factory: Callable, cpus: float, gpus: float, threads: Optional[int], timeout: float
    ) -> None:

        ray = require_ray(f"LearnerGroup(num_learners={self.num_learners})")
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=False)
        n = self.num_learners
        total = ray.cluster_resources()
        for what, per, key in (("CPUs", cpus, "CPU"), ("GPUs", gpus, "GPU")):
            if per * n > total.get(key, 0) + 1e-9:
                raise ValueError(
                    f"LearnerGroup(num_learners={n}) asks for {per * n:g} {what} ({per:g} per learner) but "
                    f"the Ray cluster has {total.get(key, 0):g}: lower num_{what[:-1].lower()}s_per_learner "
                    "or num_learners, or add nodes"
                )
        remote_cls = ray.remote(num_cpus=cpus, num_gpus=gpus)(LearnerWorker)
        name = new_group_name()
        self._actors = [remote_cls.remote(factory, rank, n, name, threads) for rank in range(n)]
        ready, pending = ray.wait([a.setup_collective.remote() for a in self._actors], num_returns=n, timeout=timeout)
        if pending:
            self.shutdown()
            raise TimeoutError(
                f"{len(pending)} of {n} learner actors did not start within {timeout:g} s; is the Ray "
                "cluster short of free CPUs/GPUs (other actors holding them)?"
            )
        self._get(ready)
        if n > 1:  # start from rank 0's weights and state on every learner
            state = self._get(self._actors[0].get_state.remote())
            self._get([a.set_state.remote(state) for a in self._actors[1:]])

    def _get(self, refs: Union[ObjectRef, List[ObjectRef]]) -> Any:
        """``ray.get`` that reports a dead learner at once (its peers may be blocked in an all-reduce): what the
        actors' methods returned."""
        import ray  # optional extra: ray

        try:
            if isinstance(refs, list):
                pending = list(refs)
                while pending:  # surface the first failure instead of waiting in list order
                    ready, pending = ray.wait(pending, num_returns=1)
                    ray.get(ready)
            return ray.get(refs)
        except ray.exceptions.RayActorError as exc:
            raise RuntimeError(
                f"a learner actor of this LearnerGroup died ({exc.__class__.__name__}); its updates "
                "are lost: shut the group down and restore a new one from the last checkpoint"
            ) from exc

    # ------------------------------------------------------------------ properties
    @property
    def is_local(self) -> bool:
        """True when the single learner runs in this process."""
        return self.num_learners == 0

    @property
    def learner(self) -> Learner:
        """The in-process learner (local groups only)."""
        if self._learner is None:
            raise ValueError("this LearnerGroup's learners are Ray actors; use foreach_learner(fn) to reach them")
        return self._learner

    @property
    def weights_seq_no(self) -> int:
        if self._learner is not None:
            return self._learner.weights_seq_no
        return self._get(self._actors[0].weights_seq_no.remote())

    # ------------------------------------------------------------------ training
    def update(self, *args: Any, async_update: bool = False, **kwargs: Any) -> Union[None, dict, List[dict]]:
        """``Learner.update`` on the group (same arguments, passed on); returns its metrics.

        With Ray learners the metrics of all learners are merged (``MetricsLogger.aggregate``).
        ``async_update=True`` (Ray learners only) queues the update and returns, without
        blocking, a list with the merged metrics of every queued update that has finished.
        """
        if self._learner is not None:
            if async_update:
                raise ValueError(
                    "async_update=True needs remote learners (num_learners > 0); a local LearnerGroup "
                    "updates synchronously: call update(...) without async_update"
                )
            return self._learner.update(*args, **kwargs)
        kind, payload = self._remote_input(args, kwargs)
        refs = [a.update.remote(kind, payload, kwargs) for a in self._actors]
        if not async_update:
            return self._merge(self._get(refs))
        import ray  # optional extra: ray

        done: List[dict] = []
        while len(self._in_flight) >= self._max_in_flight:
            done.append(self._merge(self._get(self._in_flight.pop(0))))
        self._in_flight.append(refs)
        while self._in_flight:
            ready, _ = ray.wait(self._in_flight[0], num_returns=len(self._in_flight[0]), timeout=0)
            if len(ready) < len(self._in_flight[0]):
                break
            done.append(self._merge(self._get(self._in_flight.pop(0))))
        return done

    def wait_for_updates(self) -> List[dict]:
        """Block until every queued async update finished; their merged metrics, oldest first."""
        out = []
        while self._in_flight:
            out.append(self._merge(self._get(self._in_flight.pop(0))))
        return out

    def _remote_input(self, args: tuple, kwargs: Dict[str, object]) -> Tuple[str, object]:
        import ray  # optional extra: ray

        if args:
            if len(args) > 1:
                raise TypeError("pass one positional batch, or the input by keyword (batch=, batch_refs=, ...)")
            kwargs["batch"] = args[0]
        given = [k for k in INPUT_KINDS if kwargs.get(k) is not None]
        if "training_data" in kwargs:
            raise ValueError("remote learner groups take batch=, batches=, batch_refs=, episodes= or episodes_refs=")
        if len(given) != 1:
            raise ValueError(f"update needs exactly one input, got {given or 'none'}")
        kind = given[0]
        if kind == "data_iterators":
            raise ValueError(
                "data_iterators cannot be sharded across Ray learners; pass batch=/batches= or batch_refs="
            )
        value = kwargs[kind]
        for k in INPUT_KINDS:
            kwargs.pop(k, None)
        if kind in ("batch_refs", "episodes_refs"):
            if not isinstance(value, (list, tuple)) or not value:
                raise ValueError(f"{kind} must be a non-empty list of Ray object refs")
            return kind, list(value)  # refs inside a list reach the actors unresolved
        return kind, ray.put(value)  # one copy in the object store; each actor gets it resolved

    @staticmethod
    def _merge(results: List[dict]) -> dict:
        logger = MetricsLogger()
        logger.aggregate(results)
        return logger.reduce()

    def foreach_learner(self, fn: Callable[[Learner], _T]) -> List[_T]:
        """Call ``fn(learner)`` on every learner; returns the results in learner order."""
        if self._learner is not None:
            return [fn(self._learner)]
        return self._get([a.apply.remote(fn) for a in self._actors])

    # ------------------------------------------------------------------ weights / state
    def get_weights(self, module_ids: Optional[Iterable[str]] = None, *, copy_tensors: bool = True) -> Dict[str, dict]:
        """module id -> state_dict (copies unless ``copy_tensors=False``)."""
        if self._learner is not None:
            return self._learner.get_weights(module_ids, copy_tensors=copy_tensors)
        ids = None if module_ids is None else list(module_ids)
        return self._get(self._actors[0].get_weights.remote(ids))

    def set_weights(self, weights: Mapping, *, weights_seq_no: Optional[int] = None) -> bool:
        """Load weights on every learner; weights older than the group's ``weights_seq_no`` are ignored."""
        if self._learner is not None:
            return self._learner.set_weights(weights, weights_seq_no=weights_seq_no)
        return all(self._get([a.set_weights.remote(weights, weights_seq_no) for a in self._actors]))

    def get_state(self) -> Dict[str, object]:
        if self._learner is not None:
            return self._learner.get_state()
        return self._get(self._actors[0].get_state.remote())

    def set_state(self, state: Mapping) -> None:
        if self._learner is not None:
            self._learner.set_state(state)
            return
        self._get([a.set_state.remote(state) for a in self._actors])

    def save_to_path(self, path: Union[str, os.PathLike]) -> str:
        """Checkpoint the (first) learner into directory ``path`` (written by rank 0's process)."""
        if self._learner is not None:
            return self._learner.save_to_path(path)
        return self._get(self._actors[0].save_to_path.remote(os.fspath(path)))

    def restore_from_path(self, path: Union[str, os.PathLike]) -> None:
        """Restore every learner from a :meth:`save_to_path` directory (safe loading).

        With Ray learners the directory must be readable from every learner's node.
        """
        if self._learner is not None:
            self._learner.restore_from_path(path)
            return
        self._get([a.restore_from_path.remote(os.fspath(path)) for a in self._actors])

    def shutdown(self) -> None:
        """Release the learners (kills the Ray actors; nothing to do in-process)."""
        if self._actors:
            import ray  # optional extra: ray

            for a in self._actors:
                ray.kill(a)
            self._actors = []
            self._in_flight = []
