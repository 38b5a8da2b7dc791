"""`Learner`: owns torch modules and their optimizers and runs exact epoch/minibatch updates.

The learner holds two collaborators: :class:`~pipeline.learner.inputs.LearnerInputs`, the door whose one
function (``minibatches``) turns each input kind of :meth:`Learner.update` into a stream of ``module id ->
minibatch`` (the core sees nothing else), and
:class:`~pipeline.learner.call_metrics.CallMetrics`, what one call accumulates and returns. Its weights,
state and counters are its own (below); the directory format of ``save_to_path`` is in
:mod:`pipeline.learner.checkpoint`."""

from __future__ import annotations

import copy
import functools
import math
import operator
import os
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, List, Optional, Union, cast

import torch
from torch import nn

from ..device import DeviceLike, host_copy, module_device, place_module, resolve_device, to_host
from .call_metrics import CallMetrics
from .checkpoint import load_state_dir, save_state_dir
from .inputs import TS_KEY, LearnerInputs, normalize_timesteps, stack_episodes
from .metrics import MetricsLogger
from .modules import ModuleSet, move_modules
from .optim import LRSchedule, ModuleOptimizers, OptimizerFactory, default_optimizer, total_norm
from .batch import Batch, ModuleBatches
from .training_data import DataIterators, Episode, TrainingData

__all__ = ["Learner", "OptimizerFactory", "LRSchedule"]

_Tensor = torch.Tensor
#: the lifetime counters saved in ``get_state`` (numbers, and module id -> number)
_COUNTERS = ("weights_seq_no", "num_minibatch_updates_lifetime", "num_env_steps_trained_lifetime")
_MODULE_COUNTERS = ("num_module_steps_trained_lifetime", "num_skipped_steps_lifetime")


class Learner:
    """Owns torch modules (keyed by module id) and their optimizers; trains them in ``update``.

    Subclass it and implement :meth:`compute_loss_for_module` (or :meth:`compute_losses`);
    override :meth:`forward_train` when a module does not take the batch itself.
    A loss may be a scalar tensor or a dict with ``"total_loss"`` plus extras: 0-d extras
    become metrics (mean over the call's minibatches); other tensors (e.g. per-sample
    ``"priority"``) are kept detached for the last minibatch in
    ``learner.last_outputs[module_id][key]``. A loss may also be a function of no arguments that returns
    either: it is called, and its module stepped, after the other modules' optimizers stepped on the same
    minibatch (SAC's actor loss against the critic that just stepped).

    Args:
        modules: one ``nn.Module`` (id :attr:`DEFAULT_MODULE_ID`) or a mapping id -> module.
            Every module needs trainable parameters; keep networks that are not trained by
            gradient (e.g. a DQN target network) outside ``modules`` and save them through
            :meth:`get_extra_state` / :meth:`set_extra_state`.
        lr: learning rate, or a mapping module id -> learning rate.
        optimizer: ``factory(params, lr) -> Optimizer`` (default ``torch.optim.Adam``).
        grad_clip: clip each module's gradients to this global L2 norm (None: no clipping).
        lr_schedule: a callable ``timestep -> lr``, a piecewise-linear list of
            ``(timestep, lr)`` pairs, or a mapping module id -> either. Evaluated once per
            ``update`` call at ``timesteps["num_env_steps_sampled_lifetime"]`` (or, when not
            given, at the learner's lifetime count of env steps trained).
        seed: seeds the generator used for ``shuffle_batch_per_epoch`` (default: torch's global RNG).
        shared_batch: every module trains on the same batch (SAC's actor, critic and temperature): a batch
            that is not keyed by module ids is given to each module.
        device: where the modules, optimizer states and batches live (see :mod:`pipeline.device`; default:
            the first module's). Each ``update`` moves its input there once and brings the per-row outputs
            (``last_outputs``) and the metrics back to the host once.
        **config: extra settings kept in :attr:`config` for subclasses (e.g. ``discount=0.97``).
    """

    DEFAULT_MODULE_ID = "default_policy"

    def __init__(
        self,
        modules: Union[nn.Module, Mapping],
        *,
        lr: Union[float, Mapping] = 1e-3,
        optimizer: Optional[OptimizerFactory] = None,
        grad_clip: Optional[float] = None,
        lr_schedule: Union[None, LRSchedule, Mapping] = None,
        seed: Optional[int] = None,
        device: DeviceLike = None,
        shared_batch: bool = False,
        **config: object,
    ) -> None:
        #: module id -> the module it trains
        self.modules = ModuleSet(modules, self.DEFAULT_MODULE_ID)
        #: where the modules, optimizer states and batches live (see ``device`` above; :meth:`to` moves them)
        self.device: torch.device = (resolve_device(device) if device is not None
                                     else module_device(next(iter(self.modules.values()))))
        for mod in self.modules.values():
            place_module(mod, self.device)
        self.config: Dict[str, object] = dict(config)
        #: each module's optimizer, parameters and lr schedule, and the gradient clipping
        self.optim = ModuleOptimizers(self.modules, lr, optimizer or default_optimizer, lr_schedule, grad_clip)
        self.optimizers: Dict[str, torch.optim.Optimizer] = self.optim.optimizers
        self._params: Dict[str, List[nn.Parameter]] = self.optim.params

        self._generator = torch.Generator().manual_seed(seed) if seed is not None else None
        # batches move to the device (and outputs come back) only off the CPU: the CPU path is untouched
        self._batch_device: Optional[torch.device] = None if self.device.type == "cpu" else self.device

        # counters (saved in get_state)
        self.weights_seq_no = 0
        self.num_minibatch_updates_lifetime = 0
        self.num_env_steps_trained_lifetime = 0
        self.num_module_steps_trained_lifetime: Dict[str, int] = {mid: 0 for mid in self.modules}
        self.num_skipped_steps_lifetime: Dict[str, int] = {mid: 0 for mid in self.modules}

        self.metrics = MetricsLogger()
        self.last_outputs: Dict[str, Dict[str, _Tensor]] = {}
        # set by data-parallel groups: called as gradient_sync(gradients, rows) right after
        # compute_gradients, it replaces the gradients by their mean over all learners
        self.gradient_sync: Optional[Callable[[Dict[str, List[nn.Parameter]], Dict[str, int]], None]] = None
        self._stop_call = False  # set by stop_update() during an update call
        #: the door: every input kind of ``update`` -> ``module id -> batch``
        self.inputs = LearnerInputs(list(self.modules), self.episodes_to_batch, shared=shared_batch)
        #: what the running (or last) ``update`` call accumulated
        self.call_metrics = CallMetrics()

    # ================================================================== hooks to override
    def forward_train(self, module_id: str, batch: Batch) -> object:
        """Forward pass of one module on its (mini)batch. Default: ``self.modules[module_id](batch)``."""
        return self.modules[module_id](batch)

    def compute_loss_for_module(self, module_id: str, batch: Batch, fwd_out: Any) -> Union[_Tensor, dict]:
        """The loss of one module: a scalar tensor or a dict with ``"total_loss"`` and extras (or a function of
        no arguments returning either, computed after the other modules stepped). ``fwd_out`` is whatever
        :meth:`forward_train` returned (loosely typed, so that subclasses can name what theirs returns)."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement compute_loss_for_module(module_id, batch, fwd_out) "
            "(or override compute_losses)"
        )

    def compute_losses(self, batch: ModuleBatches, fwd_out: Dict[str, object]) -> Dict[str, _Tensor]:
        """Per-module total losses for one minibatch (calls :meth:`compute_loss_for_module`).

        Dict losses are split here: ``"total_loss"`` is returned, extras are recorded.
        """
        out = {}
        for mid, f in fwd_out.items():
            loss = self.compute_loss_for_module(mid, batch[mid], f)
            if type(loss) is _Tensor or callable(loss):
                out[mid] = loss
            elif isinstance(loss, Mapping):
                out[mid] = self.call_metrics.split_loss(mid, loss, self.last_outputs)
            else:
                raise TypeError(f"compute_loss_for_module({mid!r}) returned a {type(loss).__name__}; return a scalar "
                                "tensor, a dict with 'total_loss', or a function of no arguments returning either")
        return out

    def compute_gradients(self, losses: Dict[str, _Tensor]) -> Dict[str, List[nn.Parameter]]:
        """Zero the modules' gradients and backpropagate the sum of their losses.

        Returns module id -> its parameters (gradients live in ``param.grad``).
        """
        params = self._params
        optim = self.optim
        for mid in losses:
            optim.zero_grad(mid)
        if len(losses) == 1:
            (total,) = losses.values()
        else:
            total = functools.reduce(operator.add, losses.values())
        if not total.requires_grad:
            raise ValueError(
                f"the loss of module(s) {list(losses)} does not depend on any trainable parameter "
                "(requires_grad=False): was it computed under torch.no_grad() or from detached tensors?"
            )
        total.backward()
        for mid in losses:
            optim.backward_done(mid)
        return {mid: params[mid] for mid in losses}

    def postprocess_gradients(self, gradients: Dict[str, List[nn.Parameter]]) -> Dict[str, List[nn.Parameter]]:
        """Measure each module's global gradient norm and clip it to ``grad_clip``.

        The (pre-clip) norms are recorded for :meth:`apply_gradients`, which skips the
        optimizer step of a module whose norm is not finite.
        """
        norms, clip = self.call_metrics.step_norms, self.optim.clip
        for mid, params in gradients.items():
            norms[mid] = clip(params, mid)
        return gradients

    def apply_gradients(self, gradients: Dict[str, List[nn.Parameter]]) -> None:
        """Step each module's optimizer; skip (and count) modules whose gradients are not finite."""
        call = self.call_metrics
        norms = call.step_norms
        for mid, params in gradients.items():
            norm = norms.pop(mid, None)
            if norm is None:  # postprocess_gradients was overridden without super()
                grads = [p.grad for p in params if p.grad is not None]
                norm = total_norm(grads) if grads else 0.0
            if math.isfinite(norm):
                self.optimizers[mid].step()
                call.step_taken(mid, norm)
            else:
                call.step_skipped(mid)

    def before_gradient_based_update(self, timesteps: Dict[str, int]) -> None:
        """Runs once per ``update`` call before the first minibatch (after the lr schedule)."""

    def after_gradient_based_update(self, timesteps: Dict[str, int]) -> None:
        """Runs once per ``update`` call after the last minibatch (e.g. target-network sync).

        ``weights_seq_no`` and ``num_minibatch_updates_lifetime`` already include this call.
        """

    def stop_update(self) -> None:
        """End the running ``update`` call early (e.g. PPO's KL early stop), from a hook or the loss.

        Called while a minibatch's losses are computed, that minibatch takes no optimizer step and
        no further minibatch runs; ``num_minibatch_updates`` counts the steps taken, and the
        after-hook and the metrics run as usual. Not with ``gradient_sync`` (the other learners
        of a group would wait for this one's gradients).
        """
        if self.gradient_sync is not None:
            raise RuntimeError("stop_update: this learner synchronises gradients with a group; a learner "
                               "that stops alone would leave the others waiting")
        self._stop_call = True

    def get_extra_state(self) -> Dict[str, object]:
        """Extra subclass state saved with get_state (tensors, numbers, str, lists, dicts only)."""
        return {}

    def set_extra_state(self, state: Dict[str, object]) -> None:
        """Restore what :meth:`get_extra_state` returned."""

    def episodes_to_batch(self, episodes: List[Episode]) -> Batch:
        """Hook: turn a list of episodes into a batch (override for returns, advantages, ...).

        An episode is a sequence of transitions (dicts or trees) for a single-module learner,
        or a mapping module id -> sequence of transitions. All transitions of a module are
        stacked along a new batch axis, episodes one after another.
        """
        return stack_episodes(episodes, list(self.modules))

    # ================================================================== update
    def update(
        self,
        batch: Optional[Batch] = None,
        batches: Optional[List[Batch]] = None,
        batch_refs: Optional[List[object]] = None,
        episodes: Optional[List[Episode]] = None,
        episodes_refs: Optional[List[object]] = None,
        data_iterators: Optional[DataIterators] = None,
        training_data: Optional[TrainingData] = None,
        *,
        timesteps: Union[None, int, Mapping] = None,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: Optional[int] = None,
        shuffle_batch_per_epoch: bool = False,
        num_iters: Optional[int] = None,
        _no_metrics_reduce: bool = False,
        **kwargs: object,
    ) -> Optional[dict]:
        """Train on exactly one input and return the metrics of this call.

        In a pipeline the input is ``batch``, a :class:`~pipeline.data.records.TrainBatch` (what the
        fetcher writes to ``ctx.train_data``); the ``trainer`` middleware turns the result and
        :attr:`last_outputs` into a :class:`~pipeline.data.records.TrainOutput`.

        Order: lr schedules; ``before_gradient_based_update`` once; per minibatch forward -> losses ->
        gradients -> postprocess -> apply; the lifetime counters; ``after_gradient_based_update`` once; then
        the metrics. Which minibatches (``minibatch_size``, ``num_epochs``, ``num_total_minibatches``,
        ``shuffle_batch_per_epoch``, ``data_iterators`` with ``num_iters``): :mod:`pipeline.learner.minibatch_plan`.
        Which metrics: :meth:`CallMetrics.results <pipeline.learner.call_metrics.CallMetrics.results>`.

        Returns a nested dict ``{module_id: {...}, "__all_modules__": {...}}`` whose leaves are
        :class:`Stats` (use ``MetricsLogger.peek_results`` for floats), or None with
        ``_no_metrics_reduce=True`` (the metrics then accumulate in :attr:`metrics`).
        """
        if kwargs:
            raise TypeError(f"Learner.update got unexpected keyword arguments: {sorted(kwargs)}")
        plan = self.inputs.minibatches(
            batch, batches, batch_refs, episodes, episodes_refs, data_iterators, training_data,
            num_total_minibatches=num_total_minibatches,
            num_epochs=num_epochs,
            minibatch_size=minibatch_size,
            shuffle_batch_per_epoch=shuffle_batch_per_epoch,
            num_iters=num_iters,
            device=self._batch_device,
            generator=self._generator,
        )

        ts = normalize_timesteps(timesteps)
        if self.optim.schedules:
            t = ts.get(TS_KEY)
            self.optim.apply_schedules(self.num_env_steps_trained_lifetime if t is None else int(t))
        call = self.call_metrics
        call.reset()
        self._stop_call = False
        self.last_outputs = {}
        self.before_gradient_based_update(ts)

        step = self._update_minibatch
        n_updates = 0
        for mb, rows, env_rows in plan:
            if step(mb, rows, env_rows) is False:  # stop_update() was called
                break
            n_updates += 1

        # counters first, so the after-hook sees this call's updates (e.g. target-network sync)
        self.weights_seq_no += 1
        self.num_minibatch_updates_lifetime += n_updates
        self.num_env_steps_trained_lifetime += call.env_rows
        for mid, rows_trained in call.rows.items():
            self.num_module_steps_trained_lifetime[mid] += rows_trained
        for mid, skipped in call.skipped.items():
            self.num_skipped_steps_lifetime[mid] += skipped
        self.after_gradient_based_update(ts)
        if self._batch_device is not None and self.last_outputs:  # per-row outputs to the host, once
            self.last_outputs = to_host(self.last_outputs)

        results = call.results(n_updates, self)
        if _no_metrics_reduce:
            self.metrics.aggregate([results])
            return None
        if self.metrics.stats:  # something logged before: merge and reduce through the logger
            self.metrics.aggregate([results])
            return self.metrics.reduce()
        return results

    # ================================================================== weights and state
    @property
    def grad_clip(self) -> Optional[float]:
        """The global L2 norm each module's gradients are clipped to (None: no clipping)."""
        return self.optim.grad_clip

    def get_weights(self, module_ids: Optional[Iterable[str]] = None, *, copy_tensors: bool = True) -> Dict[str, dict]:
        """module id -> state_dict: copies on the host (CPU) whatever the learner's device, ready to send to
        another process or node, which loads them onto its own device; with ``copy_tensors=False`` the
        modules' own tensors (on the learner's device)."""
        return self.modules.weights(module_ids, copy_tensors)

    def set_weights(self, weights: Mapping, *, weights_seq_no: Optional[int] = None) -> bool:
        """Load module weights (module id -> state_dict; tensors on any device are copied onto the learner's).

        With ``weights_seq_no`` older than this learner's, nothing happens and False is
        returned; otherwise the weights are loaded, the learner takes that sequence number and
        True is returned.
        """
        if not isinstance(weights, Mapping):
            raise TypeError(f"weights must be a mapping module_id -> state_dict, got {type(weights).__name__}")
        self.modules.check_ids(weights, "set_weights")
        if weights_seq_no is not None and weights_seq_no < self.weights_seq_no:
            return False
        self.modules.load(weights, "set_weights")
        if weights_seq_no is not None:
            self.weights_seq_no = int(weights_seq_no)
        return True

    def get_state(self) -> Dict[str, object]:
        """A snapshot: weights, optimizer states, counters and :meth:`get_extra_state`, every tensor a copy on
        the host (CPU) whatever the learner's device (:meth:`set_state` loads it onto any device)."""
        on_cpu = self.device.type == "cpu"
        return {
            "modules": self.get_weights(),
            "optimizers": {mid: copy.deepcopy(opt.state_dict()) if on_cpu else host_copy(opt.state_dict())
                           for mid, opt in self.optimizers.items()},
            "counters": {**{key: getattr(self, key) for key in _COUNTERS},
                         **{key: dict(getattr(self, key)) for key in _MODULE_COUNTERS}},
            "extra": self.get_extra_state() if on_cpu else host_copy(self.get_extra_state()),
        }

    def set_state(self, state: Mapping) -> None:
        """Restore a :meth:`get_state` snapshot (modules missing from it are left as they are); its tensors
        may be on any device (e.g. a checkpoint written on a GPU machine, loaded with ``map_location='cpu'``):
        they are loaded onto the learner's device."""
        if not isinstance(state, Mapping) or "modules" not in state:
            raise ValueError("set_state needs a dict from Learner.get_state() (with 'modules')")
        self.modules.check_ids(state["modules"], "state['modules']")
        self.modules.check_ids(state.get("optimizers", {}), "state['optimizers']")
        self.modules.load(state["modules"], "state['modules']")
        for mid, osd in state.get("optimizers", {}).items():
            self.optimizers[mid].load_state_dict(osd)
        c = state.get("counters", {})
        for key in _COUNTERS:
            setattr(self, key, int(c.get(key, getattr(self, key))))
        for key in _MODULE_COUNTERS:
            getattr(self, key).update({mid: int(v) for mid, v in c.get(key, {}).items() if mid in self.modules})
        self.set_extra_state(state.get("extra") or {})

    def save_to_path(self, path: Union[str, os.PathLike]) -> str:
        """Write :meth:`get_state` into directory ``path`` (created); returns the path.

        The state file loads with ``torch.load(weights_only=True)``: only tensors and plain
        containers/numbers/strings are stored (subclass extra state must follow that too).
        """
        return save_state_dir(path, self.get_state(), {"class": type(self).__qualname__,
                                                        "module_ids": list(self.modules)})

    def restore_from_path(self, path: Union[str, os.PathLike]) -> None:
        """Load a checkpoint written by :meth:`save_to_path` (safe: no arbitrary unpickling)."""
        self.set_state(load_state_dir(path))

    # ================================================================== device
    def to(self, device: DeviceLike) -> "Learner":
        """Move the learner to ``device``: its modules, every other ``nn.Module`` it holds (e.g. a target
        network) and its optimizers' states (the states follow torch's own rules, as when they are loaded:
        e.g. Adam's ``step`` counters stay on the CPU). Later batches are moved there. Returns ``self``."""
        dev = resolve_device(device)
        if dev == self.device:
            return self
        saved = {mid: opt.state_dict() for mid, opt in self.optimizers.items()}
        self.optim.moved(move_modules([*self.modules.values(), *vars(self).values()], dev), saved)
        self.device = dev
        self._batch_device = None if dev.type == "cpu" else dev
        self._device_moved()
        return self

    def _device_moved(self) -> None:
        """Hook run by :meth:`to` after the move: refresh anything that holds parameter objects (e.g. lists
        of a target network's parameters)."""

    def _update_minibatch(self, mb: ModuleBatches, rows: Dict[str, int], env_rows: int) -> Optional[bool]:
        forward = self.forward_train
        fwd_out = {mid: forward(mid, b) for mid, b in mb.items()}
        losses = self.compute_losses(mb, fwd_out)
        later = {mid: loss for mid, loss in losses.items() if callable(loss)}
        now = self._checked_losses({mid: loss for mid, loss in losses.items() if mid not in later})
        if self._stop_call:  # stop_update() during the losses: this minibatch takes no step
            for mid, loss in now.items():
                self.call_metrics.last_loss.setdefault(mid, loss.detach())
            return False
        self._step(now, rows)
        if later:  # losses computed after the other modules stepped (SAC's actor after its critic)
            then = self._checked_losses({mid: fn() for mid, fn in later.items()})
            self._step(then, rows)
            now.update(then)
        self.call_metrics.minibatch_done(now, rows, env_rows)
        return None

    def _checked_losses(self, losses: Dict[str, object]) -> Dict[str, _Tensor]:
        """``losses`` with each dict loss split into its ``total_loss`` (extras recorded)."""
        call = self.call_metrics
        for mid, loss in losses.items():
            if type(loss) is not _Tensor:
                if isinstance(loss, Mapping):
                    losses[mid] = call.split_loss(mid, loss, self.last_outputs)
                elif not isinstance(loss, _Tensor):
                    raise TypeError(
                        f"the loss of module {mid!r} is a {type(loss).__name__}; return a scalar tensor, "
                        "a dict with 'total_loss', or a function of no arguments returning either"
                    )
        return cast(Dict[str, _Tensor], losses)  # every value is a tensor now

    def _step(self, losses: Dict[str, _Tensor], rows: Dict[str, int]) -> None:
        """Backpropagate ``losses`` and step their modules' optimizers."""
        grads = self.compute_gradients(losses)
        if self.gradient_sync is not None:
            self.gradient_sync(grads, rows)
        self.apply_gradients(self.postprocess_gradients(grads))
