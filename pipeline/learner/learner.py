"""`Learner`: owns torch modules and their optimizers and runs exact epoch/minibatch updates."""

from __future__ import annotations

import bisect
import copy
import json
import math
import os
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import torch
from torch import nn

from . import metrics as M
from .batch import RowStream, cat_rows, is_tree, num_rows, stack_transitions
from .metrics import MetricsLogger
from .stats import Stats
from .training_data import INPUT_KINDS, TrainingData

__all__ = ["Learner", "OptimizerFactory", "LRSchedule"]

OptimizerFactory = Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]
LRSchedule = Union[Sequence[Sequence[float]], Callable[[int], float]]

_STATE_FILE = "learner_state.pt"
_META_FILE = "learner_meta.json"
_FORMAT_VERSION = 1
_TS_KEY = "num_env_steps_sampled_lifetime"
_Tensor = torch.Tensor


def _default_optimizer(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    # foreach: one fused kernel per op over all parameters; on CPU with small nets (DQN-sized) this halves
    # the cost of the optimizer step against torch's per-tensor default.
    return torch.optim.Adam(params, lr=lr, foreach=True)


def _make_schedule(spec: LRSchedule, where: str) -> Callable[[int], float]:
    """A callable timestep -> lr from a callable or a piecewise-linear list of (timestep, lr)."""
    if callable(spec):
        return spec
    try:
        points = [(float(t), float(v)) for t, v in spec]
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{where}: an lr schedule is a callable(timestep) -> lr or a list of (timestep, lr) pairs, got {spec!r}"
        ) from exc
    if not points:
        raise ValueError(f"{where}: the lr schedule list is empty")
    ts = [t for t, _ in points]
    if any(b < a for a, b in zip(ts, ts[1:])):
        raise ValueError(f"{where}: lr schedule timesteps must be ascending, got {ts}")
    vals = [v for _, v in points]

    def schedule(t: int) -> float:
        if t <= ts[0]:
            return vals[0]
        if t >= ts[-1]:
            return vals[-1]
        i = bisect.bisect_right(ts, t)
        t0, t1, v0, v1 = ts[i - 1], ts[i], vals[i - 1], vals[i]
        return v0 + (v1 - v0) * (t - t0) / (t1 - t0)

    return schedule


def _total_norm(grads: List[_Tensor]) -> float:
    """Global L2 norm of a list of gradient tensors, as a float (one sync)."""
    if len(grads) == 1:
        return float(torch.linalg.vector_norm(grads[0]))
    try:
        norms = torch._foreach_norm(grads)
    except (AttributeError, RuntimeError):
        norms = [torch.linalg.vector_norm(g) for g in grads]
    return float(torch.linalg.vector_norm(torch.stack(norms)))


class Learner:
    """Owns torch modules (keyed by module id) and their optimizers; trains them in ``update``.

    Subclass it and implement :meth:`compute_loss_for_module` (or :meth:`compute_losses`);
    override :meth:`forward_train` when a module does not take the batch itself.
    A loss may be a scalar tensor or a dict with ``"total_loss"`` plus extras: 0-d extras
    become metrics (mean over the call's minibatches); other tensors (e.g. per-sample
    ``"priority"``) are kept detached for the last minibatch in
    ``learner.last_outputs[module_id][key]``.

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
        **config: Any,
    ) -> None:
        if isinstance(modules, nn.Module):
            modules = {self.DEFAULT_MODULE_ID: modules}
        if not isinstance(modules, Mapping) or not modules:
            raise ValueError("modules must be an nn.Module or a non-empty mapping module_id -> nn.Module")
        self.modules: Dict[str, nn.Module] = {}
        for mid, mod in modules.items():
            if not isinstance(mid, str):
                raise TypeError(f"module ids are strings, got {mid!r}")
            if not isinstance(mod, nn.Module):
                raise TypeError(f"module {mid!r} is a {type(mod).__name__}, not an nn.Module")
            self.modules[mid] = mod
        if grad_clip is not None and not (grad_clip > 0):
            raise ValueError(f"grad_clip must be a positive number or None, got {grad_clip!r}")
        self.grad_clip = grad_clip
        self.config: Dict[str, Any] = dict(config)
        factory = optimizer or _default_optimizer

        self.optimizers: Dict[str, torch.optim.Optimizer] = {}
        self._params: Dict[str, List[nn.Parameter]] = {}
        for mid, mod in self.modules.items():
            params = [p for p in mod.parameters() if p.requires_grad]
            if not params:
                raise ValueError(
                    f"module {mid!r} has no trainable parameters; keep networks that are not trained "
                    "(e.g. target networks) outside `modules`"
                )
            mod_lr = lr[mid] if isinstance(lr, Mapping) else lr
            opt = factory(params, float(mod_lr))
            if not isinstance(opt, torch.optim.Optimizer):
                raise TypeError(f"optimizer factory returned {type(opt).__name__}, not a torch Optimizer")
            self.optimizers[mid] = opt
            self._params[mid] = [p for g in opt.param_groups for p in g["params"]]

        self._schedules: Dict[str, Callable[[int], float]] = {}
        if lr_schedule is not None:
            per_module = isinstance(lr_schedule, Mapping)
            for mid in self.modules:
                spec = lr_schedule.get(mid) if per_module else lr_schedule
                if spec is not None:
                    self._schedules[mid] = _make_schedule(spec, f"lr_schedule for {mid!r}")
            if per_module:
                unknown = [k for k in lr_schedule if k not in self.modules]
                if unknown:
                    raise ValueError(f"lr_schedule names unknown module ids {unknown}; known: {list(self.modules)}")
            self._apply_lr_schedules(0)

        self._generator = torch.Generator().manual_seed(seed) if seed is not None else None
        self._single_id: Optional[str] = next(iter(self.modules)) if len(self.modules) == 1 else None

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
        self._reset_call_scratch()

    # ================================================================== hooks to override
    def forward_train(self, module_id: str, batch: Any) -> Any:
        """Forward pass of one module on its (mini)batch. Default: ``self.modules[module_id](batch)``."""
        return self.modules[module_id](batch)

    def compute_loss_for_module(self, module_id: str, batch: Any, fwd_out: Any) -> Union[_Tensor, dict]:
        """The loss of one module: a scalar tensor or a dict with ``"total_loss"`` and extras."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement compute_loss_for_module(module_id, batch, fwd_out) "
            "(or override compute_losses)"
        )

    def compute_losses(self, batch: Dict[str, Any], fwd_out: Dict[str, Any]) -> Dict[str, _Tensor]:
        """Per-module total losses for one minibatch (calls :meth:`compute_loss_for_module`).

        Dict losses are split here: ``"total_loss"`` is returned, extras are recorded.
        """
        out = {}
        for mid, f in fwd_out.items():
            loss = self.compute_loss_for_module(mid, batch[mid], f)
            out[mid] = loss if type(loss) is _Tensor else self._split_loss(mid, loss)
        return out

    def compute_gradients(self, losses: Dict[str, _Tensor]) -> Dict[str, List[nn.Parameter]]:
        """Zero the modules' gradients and backpropagate the sum of their losses.

        Returns module id -> its parameters (gradients live in ``param.grad``).
        """
        params = self._params
        optimizers = self.optimizers
        for mid in losses:
            optimizers[mid].zero_grad(set_to_none=True)
        if len(losses) == 1:
            (total,) = losses.values()
        else:
            total = sum(losses.values())
        if not total.requires_grad:
            raise ValueError(
                f"the loss of module(s) {list(losses)} does not depend on any trainable parameter "
                "(requires_grad=False): was it computed under torch.no_grad() or from detached tensors?"
            )
        total.backward()
        return {mid: params[mid] for mid in losses}

    def postprocess_gradients(self, gradients: Dict[str, List[nn.Parameter]]) -> Dict[str, List[nn.Parameter]]:
        """Measure each module's global gradient norm and clip it to ``grad_clip``.

        The (pre-clip) norms are recorded for :meth:`apply_gradients`, which skips the
        optimizer step of a module whose norm is not finite.
        """
        clip = self.grad_clip
        norms = self._step_grad_norms
        for mid, params in gradients.items():
            grads = [p.grad for p in params if p.grad is not None]
            if not grads:
                norms[mid] = 0.0
                continue
            norm = _total_norm(grads)
            norms[mid] = norm
            if clip is not None and norm > clip and math.isfinite(norm):
                coef = clip / (norm + 1e-6)
                try:
                    torch._foreach_mul_(grads, coef)
                except (AttributeError, RuntimeError):
                    for g in grads:
                        g.mul_(coef)
        return gradients

    def apply_gradients(self, gradients: Dict[str, List[nn.Parameter]]) -> None:
        """Step each module's optimizer; skip (and count) modules whose gradients are not finite."""
        norms = self._step_grad_norms
        for mid, params in gradients.items():
            norm = norms.pop(mid, None)
            if norm is None:  # postprocess_gradients was overridden without super()
                grads = [p.grad for p in params if p.grad is not None]
                norm = _total_norm(grads) if grads else 0.0
            if math.isfinite(norm):
                self.optimizers[mid].step()
                self._call_norm_sum[mid] = self._call_norm_sum.get(mid, 0.0) + norm
                self._call_norm_cnt[mid] = self._call_norm_cnt.get(mid, 0) + 1
            else:
                self._call_skipped[mid] = self._call_skipped.get(mid, 0) + 1

    def before_gradient_based_update(self, timesteps: Dict[str, Any]) -> None:
        """Runs once per ``update`` call before the first minibatch (after the lr schedule)."""

    def after_gradient_based_update(self, timesteps: Dict[str, Any]) -> None:
        """Runs once per ``update`` call after the last minibatch (e.g. target-network sync).

        ``weights_seq_no`` and ``num_minibatch_updates_lifetime`` already include this call.
        """

    def episodes_to_batch(self, episodes: List[Any]) -> Any:
        """Turn a list of episodes into a batch (override for returns, advantages, ...).

        An episode is a sequence of transitions (dicts or trees) for a single-module learner,
        or a mapping module id -> sequence of transitions. All transitions of a module are
        stacked along a new batch axis, episodes one after another.
        """
        per_module: Dict[str, list] = {}
        for i, ep in enumerate(episodes):
            if isinstance(ep, Mapping) and not (self._single_id is not None and self._single_id not in ep):
                for mid, transitions in ep.items():
                    per_module.setdefault(mid, []).extend(transitions)
            elif isinstance(ep, (list, tuple)):
                if self._single_id is None:
                    raise ValueError(
                        f"episodes[{i}] is a list of transitions, but this learner has several modules "
                        f"{list(self.modules)}; pass each episode as a mapping module_id -> transitions"
                    )
                per_module.setdefault(self._single_id, []).extend(ep)
            else:
                raise TypeError(
                    f"episodes[{i}] must be a list of transitions or a mapping module_id -> transitions, "
                    f"got {type(ep).__name__}"
                )
        return {mid: stack_transitions(tr, where=f"episodes for module {mid!r}") for mid, tr in per_module.items()}

    def get_extra_state(self) -> Dict[str, Any]:
        """Extra subclass state saved with get_state (tensors, numbers, str, lists, dicts only)."""
        return {}

    def set_extra_state(self, state: Dict[str, Any]) -> None:
        """Restore what :meth:`get_extra_state` returned."""

    # ================================================================== update
    def update(
        self,
        batch: Any = None,
        batches: Optional[List[Any]] = None,
        batch_refs: Optional[List[Any]] = None,
        episodes: Optional[List[Any]] = None,
        episodes_refs: Optional[List[Any]] = None,
        data_iterators: Any = None,
        training_data: Optional[TrainingData] = None,
        *,
        timesteps: Union[None, int, Mapping] = None,
        num_total_minibatches: int = 0,
        num_epochs: int = 1,
        minibatch_size: Optional[int] = None,
        shuffle_batch_per_epoch: bool = False,
        num_iters: Optional[int] = None,
        _no_metrics_reduce: bool = False,
        **kwargs: Any,
    ) -> Optional[dict]:
        """Train on exactly one input and return the metrics of this call.

        Order: lr schedules; ``before_gradient_based_update`` once; per minibatch
        forward -> losses -> gradients -> postprocess -> apply; ``after_gradient_based_update``
        once; then the metrics. Minibatches:

        * ``minibatch_size=None``: each epoch is one update on the whole batch.
        * ``minibatch_size=m``: every module's minibatch has exactly ``m`` rows, taken in order
          and wrapping around to the batch's start; the loop stops once the largest module's
          batch has been covered ``num_epochs`` times: ``ceil(num_epochs * rows / m)`` updates.
        * ``num_total_minibatches=k > 0``: exactly ``k`` updates, overriding ``num_epochs``.
        * ``shuffle_batch_per_epoch=True`` (with ``m`` and more than one epoch or ``k > 0``):
          rows are permuted along the batch axis at each wrap-around; the first pass is in order.
        * ``data_iterators`` (with ``num_iters``): ``num_iters`` updates, each on the next batch
          of every iterator; stops early when an iterator is exhausted.

        Metrics per module: ``total_loss`` (last minibatch), ``num_module_steps_trained`` (sum
        of minibatch rows) and ``..._lifetime``, ``learning_rate``, ``gradients_norm`` (mean
        pre-clip global norm of the applied steps), ``num_skipped_steps`` (non-finite gradients,
        step skipped) and ``..._lifetime``, plus scalar loss-dict extras (mean over minibatches).
        ``__all_modules__``: ``total_loss`` (sum over modules), ``num_env_steps_trained`` (per
        minibatch the largest module's rows) and ``..._lifetime``, ``num_minibatch_updates``,
        ``weights_seq_no`` (+1 per call). Lifetime counters are committed before
        ``after_gradient_based_update`` runs.

        Returns a nested dict ``{module_id: {...}, "__all_modules__": {...}}`` whose leaves are
        :class:`Stats` (use ``MetricsLogger.peek_results`` for floats), or None with
        ``_no_metrics_reduce=True`` (the metrics then accumulate in :attr:`metrics`).
        """
        if kwargs:
            raise TypeError(f"Learner.update got unexpected keyword arguments: {sorted(kwargs)}")
        # ---------------------------------------------------------- which input
        if training_data is not None:
            if (
                batch is not None
                or batches is not None
                or batch_refs is not None
                or episodes is not None
                or episodes_refs is not None
                or data_iterators is not None
            ):
                others = [n for n, v in zip(INPUT_KINDS, (batch, batches, batch_refs, episodes, episodes_refs, data_iterators)) if v is not None]
                raise ValueError(f"update needs exactly one input, got training_data and {', '.join(others)}")
            data = training_data
            kind = data.kind
        elif (
            batch is not None
            and batches is None
            and batch_refs is None
            and episodes is None
            and episodes_refs is None
            and data_iterators is None
        ):
            data = None
            kind = "batch"
        else:
            data = TrainingData(batch, batches, batch_refs, episodes, episodes_refs, data_iterators)
            kind = data.kind  # raises ValueError unless exactly one was given

        # ---------------------------------------------------------- loop arguments
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
            iterators = data.iterators()
            module_batches = rows = None
        else:
            if num_iters is not None:
                raise ValueError("num_iters only applies to data_iterators")
            if kind == "batch":
                raw = batch if data is None else data.batch
                module_batches = self._as_module_batches(raw)
            else:
                module_batches = self._resolve(data.solve_refs())
            rows = self._rows(module_batches)

        # ---------------------------------------------------------- hooks + loop
        ts = self._normalize_timesteps(timesteps)
        if self._schedules:
            t = ts.get(_TS_KEY)
            self._apply_lr_schedules(self.num_env_steps_trained_lifetime if t is None else int(t))
        self._reset_call_scratch()
        self.last_outputs = {}
        self.before_gradient_based_update(ts)

        step = self._update_minibatch
        n_updates = 0
        if kind == "data_iterators":
            for _ in range(num_iters):
                pulled = []
                try:
                    for it in iterators:
                        pulled.append(next(it))
                except StopIteration:
                    break
                mbs = self._combine([self._as_module_batches(b) for b in pulled])
                r = self._rows(mbs)
                step(mbs, r, max(r.values()))
                n_updates += 1
        elif minibatch_size is None:
            n_updates = num_total_minibatches or num_epochs
            env_rows = max(rows.values())
            for _ in range(n_updates):
                step(module_batches, rows, env_rows)
        else:
            m = minibatch_size
            n_max = max(rows.values())
            n_updates = num_total_minibatches or -(-(num_epochs * n_max) // m)
            shuffle = shuffle_batch_per_epoch and (num_total_minibatches > 0 or num_epochs > 1)
            gen = self._generator
            streams = {mid: RowStream(b, rows[mid], shuffle, gen) for mid, b in module_batches.items()}
            mb_rows = {mid: m for mid in module_batches}
            for _ in range(n_updates):
                step({mid: s.take(m) for mid, s in streams.items()}, mb_rows, m)

        # counters first, so the after-hook sees this call's updates (e.g. target-network sync)
        self.weights_seq_no += 1
        self.num_minibatch_updates_lifetime += n_updates
        self.num_env_steps_trained_lifetime += self._call_env_rows
        for mid, rows_trained in self._call_rows.items():
            self.num_module_steps_trained_lifetime[mid] += rows_trained
        for mid, skipped in self._call_skipped.items():
            self.num_skipped_steps_lifetime[mid] += skipped
        self.after_gradient_based_update(ts)

        results = self._build_results(n_updates)
        if _no_metrics_reduce:
            self.metrics.aggregate([results])
            return None
        if self.metrics.stats:  # something logged before: merge and reduce through the logger
            self.metrics.aggregate([results])
            return self.metrics.reduce()
        return results

    # ================================================================== internals
    def _update_minibatch(self, mb: Dict[str, Any], rows: Dict[str, int], env_rows: int) -> None:
        forward = self.forward_train
        fwd_out = {mid: forward(mid, b) for mid, b in mb.items()}
        losses = self.compute_losses(mb, fwd_out)
        for mid, loss in losses.items():
            if type(loss) is not _Tensor:
                if isinstance(loss, Mapping):
                    losses[mid] = self._split_loss(mid, loss)
                elif not isinstance(loss, _Tensor):
                    raise TypeError(
                        f"the loss of module {mid!r} is a {type(loss).__name__}; return a scalar tensor "
                        "or a dict with 'total_loss'"
                    )
        grads = self.compute_gradients(losses)
        if self.gradient_sync is not None:
            self.gradient_sync(grads, rows)
        grads = self.postprocess_gradients(grads)
        self.apply_gradients(grads)
        last = self._call_last_loss
        cr = self._call_rows
        for mid, loss in losses.items():
            last[mid] = loss
            cr[mid] = cr.get(mid, 0) + rows[mid]
        self._call_env_rows += env_rows

    def _split_loss(self, mid: str, loss: Mapping) -> _Tensor:
        try:
            total = loss["total_loss"]
        except KeyError:
            raise ValueError(
                f"the loss dict of module {mid!r} has no 'total_loss' entry (keys: {sorted(loss)})"
            ) from None
        extras = self._call_extras.get(mid)
        if extras is None:
            extras = self._call_extras[mid] = {}
        kept = None
        for k, v in loss.items():
            if k == "total_loss":
                continue
            if isinstance(v, _Tensor):
                if v.dim() == 0:
                    acc = extras.get(k)
                    fv = float(v)
                    extras[k] = (fv, 1) if acc is None else (acc[0] + fv, acc[1] + 1)
                else:
                    if kept is None:
                        kept = {}
                    kept[k] = v.detach()
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                acc = extras.get(k)
                extras[k] = (float(v), 1) if acc is None else (acc[0] + v, acc[1] + 1)
            else:
                raise TypeError(
                    f"loss entry {k!r} of module {mid!r} is a {type(v).__name__}; use tensors or numbers"
                )
        if kept is not None:
            self.last_outputs[mid] = kept
        return total

    def _reset_call_scratch(self) -> None:
        self._step_grad_norms: Dict[str, float] = {}
        self._call_norm_sum: Dict[str, float] = {}
        self._call_norm_cnt: Dict[str, int] = {}
        self._call_skipped: Dict[str, int] = {}
        self._call_last_loss: Dict[str, _Tensor] = {}
        self._call_rows: Dict[str, int] = {}
        self._call_extras: Dict[str, Dict[str, tuple]] = {}
        self._call_env_rows = 0

    def _build_results(self, n_updates: int) -> dict:
        make = Stats._make
        results: dict = {}
        total_loss_sum = 0.0
        env_rows = self._call_env_rows
        for mid, loss in self._call_last_loss.items():
            rows = self._call_rows.get(mid, 0)
            skipped = self._call_skipped.get(mid, 0)
            lifetime = self.num_module_steps_trained_lifetime[mid]
            sk_life = self.num_skipped_steps_lifetime[mid]
            loss_f = loss.item()
            total_loss_sum += loss_f
            cnt = self._call_norm_cnt.get(mid, 0)
            gnorm = self._call_norm_sum[mid] / cnt if cnt else math.nan
            lr = self.optimizers[mid].param_groups[0]["lr"]
            r = {
                M.TOTAL_LOSS: make(loss_f, "mean", 1),
                M.NUM_MODULE_STEPS_TRAINED: make(float(rows), "sum", None, True),
                M.NUM_MODULE_STEPS_TRAINED_LIFETIME: make(float(lifetime), "sum", None),
                M.LEARNING_RATE: make(float(lr), "mean", 1),
                M.GRADIENTS_NORM: make(gnorm, "mean", 1),
                M.NUM_SKIPPED_STEPS: make(float(skipped), "sum", None, True),
                M.NUM_SKIPPED_STEPS_LIFETIME: make(float(sk_life), "sum", None),
            }
            extras = self._call_extras.get(mid)
            if extras:
                for k, (s, c) in extras.items():
                    if k not in r:
                        r[k] = make(s / c, "mean", 1)
            results[mid] = r
        results[M.ALL_MODULES] = {
            M.TOTAL_LOSS: make(total_loss_sum, "mean", 1),
            M.NUM_ENV_STEPS_TRAINED: make(float(env_rows), "sum", None, True),
            M.NUM_ENV_STEPS_TRAINED_LIFETIME: make(float(self.num_env_steps_trained_lifetime), "sum", None),
            M.NUM_MINIBATCH_UPDATES: make(float(n_updates), "max", 1),
            M.WEIGHTS_SEQ_NO: make(float(self.weights_seq_no), "max", 1),
        }
        return results

    def _as_module_batches(self, batch: Any) -> Dict[str, Any]:
        """Normalize a batch to a dict module_id -> per-module batch."""
        modules = self.modules
        if type(batch) is dict and self._single_id is not None and self._single_id not in batch:
            return {self._single_id: batch}  # hot path: a plain single-module batch
        if isinstance(batch, Mapping) or is_tree(batch):
            keys = list(batch.keys())
            if not keys and self._single_id is None:
                return {}  # reported by _rows as "no module batches"
            if any(k in modules and _is_batch_like(batch[k]) for k in keys):
                unknown = [k for k in keys if k not in modules]
                if unknown:
                    raise ValueError(
                        f"batch names unknown module ids {unknown}; this learner has {list(modules)}"
                    )
                return {k: batch[k] for k in keys}
        if self._single_id is not None:
            return {self._single_id: batch}
        if isinstance(batch, Mapping) or is_tree(batch):
            raise ValueError(
                f"batch keys {list(batch.keys())} are not module ids; this learner has modules "
                f"{list(modules)}: pass a mapping module_id -> batch"
            )
        raise TypeError(
            f"batch is a {type(batch).__name__}; pass a mapping module_id -> batch (dict of tensors or a tree)"
        )

    def _rows(self, module_batches: Dict[str, Any]) -> Dict[str, int]:
        if not module_batches:
            raise ValueError("the batch has no module batches; pass data for at least one module")
        rows = {}
        for mid, b in module_batches.items():
            n = num_rows(b, where=f"module {mid!r} batch")
            if n == 0:
                raise ValueError(f"module {mid!r} batch has zero rows; there is nothing to train on")
            rows[mid] = n
        return rows

    def _combine(self, module_batches_list: List[Dict[str, Any]]) -> Dict[str, Any]:
        if len(module_batches_list) == 1:
            return module_batches_list[0]
        grouped: Dict[str, list] = {}
        for mb in module_batches_list:
            for mid, b in mb.items():
                grouped.setdefault(mid, []).append(b)
        return {mid: cat_rows(parts) for mid, parts in grouped.items()}

    def _resolve(self, data: TrainingData) -> Dict[str, Any]:
        kind = data.kind
        if kind == "batch":
            return self._as_module_batches(data.batch)
        if kind == "batches":
            if not isinstance(data.batches, (list, tuple)) or not data.batches:
                raise ValueError("batches must be a non-empty list of batches")
            return self._combine([self._as_module_batches(b) for b in data.batches])
        if kind == "episodes":
            if not isinstance(data.episodes, (list, tuple)) or not data.episodes:
                raise ValueError("episodes must be a non-empty list of episodes")
            return self._as_module_batches(self.episodes_to_batch(list(data.episodes)))
        raise ValueError(f"cannot turn {kind} into a batch")  # pragma: no cover (refs solved before)

    @staticmethod
    def _normalize_timesteps(timesteps: Any) -> Dict[str, Any]:
        if timesteps is None:
            return {}
        if isinstance(timesteps, Mapping):
            return dict(timesteps)
        if isinstance(timesteps, int) and not isinstance(timesteps, bool):
            return {_TS_KEY: timesteps}
        raise TypeError(
            f"timesteps must be a dict like {{'{_TS_KEY}': n}} or an int, got {type(timesteps).__name__}"
        )

    def _apply_lr_schedules(self, t: int) -> None:
        for mid, sched in self._schedules.items():
            lr = float(sched(t))
            for g in self.optimizers[mid].param_groups:
                g["lr"] = lr

    # ================================================================== weights / state
    def _check_ids(self, ids: Iterable[str], what: str) -> None:
        unknown = [m for m in ids if m not in self.modules]
        if unknown:
            raise ValueError(f"{what} names unknown module ids {unknown}; this learner has {list(self.modules)}")

    def get_weights(self, module_ids: Optional[Iterable[str]] = None, *, copy_tensors: bool = True) -> Dict[str, dict]:
        """module id -> state_dict (cloned unless ``copy_tensors=False``)."""
        ids = list(self.modules) if module_ids is None else list(module_ids)
        self._check_ids(ids, "get_weights")
        out = {}
        for mid in ids:
            sd = self.modules[mid].state_dict()
            out[mid] = {k: v.detach().clone() for k, v in sd.items()} if copy_tensors else dict(sd)
        return out

    def set_weights(self, weights: Mapping, *, weights_seq_no: Optional[int] = None) -> bool:
        """Load module weights (module id -> state_dict).

        With ``weights_seq_no`` older than this learner's, nothing happens and False is
        returned; otherwise the weights are loaded, the learner takes that sequence number and
        True is returned.
        """
        if not isinstance(weights, Mapping):
            raise TypeError(f"weights must be a mapping module_id -> state_dict, got {type(weights).__name__}")
        self._check_ids(weights, "set_weights")
        if weights_seq_no is not None and weights_seq_no < self.weights_seq_no:
            return False
        for mid, sd in weights.items():
            self.modules[mid].load_state_dict(sd)
        if weights_seq_no is not None:
            self.weights_seq_no = int(weights_seq_no)
        return True

    def get_state(self) -> Dict[str, Any]:
        """A snapshot: weights, optimizer states, counters and :meth:`get_extra_state`."""
        return {
            "modules": self.get_weights(),
            "optimizers": {mid: copy.deepcopy(opt.state_dict()) for mid, opt in self.optimizers.items()},
            "counters": {
                "weights_seq_no": self.weights_seq_no,
                "num_minibatch_updates_lifetime": self.num_minibatch_updates_lifetime,
                "num_env_steps_trained_lifetime": self.num_env_steps_trained_lifetime,
                "num_module_steps_trained_lifetime": dict(self.num_module_steps_trained_lifetime),
                "num_skipped_steps_lifetime": dict(self.num_skipped_steps_lifetime),
            },
            "extra": self.get_extra_state(),
        }

    def set_state(self, state: Mapping) -> None:
        """Restore a :meth:`get_state` snapshot (modules missing from it are left as they are)."""
        if not isinstance(state, Mapping) or "modules" not in state:
            raise ValueError("set_state needs a dict from Learner.get_state() (with 'modules')")
        self._check_ids(state["modules"], "state['modules']")
        self._check_ids(state.get("optimizers", {}), "state['optimizers']")
        for mid, sd in state["modules"].items():
            self.modules[mid].load_state_dict(sd)
        for mid, osd in state.get("optimizers", {}).items():
            self.optimizers[mid].load_state_dict(osd)
        c = state.get("counters", {})
        self.weights_seq_no = int(c.get("weights_seq_no", self.weights_seq_no))
        self.num_minibatch_updates_lifetime = int(c.get("num_minibatch_updates_lifetime", self.num_minibatch_updates_lifetime))
        self.num_env_steps_trained_lifetime = int(c.get("num_env_steps_trained_lifetime", self.num_env_steps_trained_lifetime))
        for mid, v in c.get("num_module_steps_trained_lifetime", {}).items():
            if mid in self.modules:
                self.num_module_steps_trained_lifetime[mid] = int(v)
        for mid, v in c.get("num_skipped_steps_lifetime", {}).items():
            if mid in self.modules:
                self.num_skipped_steps_lifetime[mid] = int(v)
        self.set_extra_state(state.get("extra") or {})

    def save_to_path(self, path: Union[str, os.PathLike]) -> str:
        """Write :meth:`get_state` into directory ``path`` (created); returns the path.

        The state file loads with ``torch.load(weights_only=True)``: only tensors and plain
        containers/numbers/strings are stored (subclass extra state must follow that too).
        """
        path = os.fspath(path)
        state = self.get_state()
        _check_safe(state, "state")
        os.makedirs(path, exist_ok=True)
        target = os.path.join(path, _STATE_FILE)
        tmp = target + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, target)
        meta = {"format_version": _FORMAT_VERSION, "class": type(self).__qualname__, "module_ids": list(self.modules)}
        with open(os.path.join(path, _META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        return path

    def restore_from_path(self, path: Union[str, os.PathLike]) -> None:
        """Load a checkpoint written by :meth:`save_to_path` (safe: no arbitrary unpickling)."""
        target = os.path.join(os.fspath(path), _STATE_FILE)
        if not os.path.isfile(target):
            raise FileNotFoundError(f"no learner checkpoint at {target!r} (expected a save_to_path directory)")
        try:
            state = torch.load(target, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises UnpicklingError for disallowed globals
            raise ValueError(
                f"{target!r} is not a safe learner checkpoint (only tensors and plain data are loaded): {exc}"
            ) from exc
        self.set_state(state)


_SAFE_SCALARS = (str, int, float, bool, bytes, type(None), torch.dtype, torch.device, torch.Size)


def _check_safe(obj: Any, where: str) -> None:
    """Raise TypeError unless ``obj`` only holds what torch.load(weights_only=True) accepts."""
    if isinstance(obj, (_Tensor,) + _SAFE_SCALARS):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, _SAFE_SCALARS):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; checkpoints hold plain keys only")
            _check_safe(v, f"{where}[{k!r}]")
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            _check_safe(v, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(obj).__name__}: checkpoints hold only tensors, numbers, strings and "
        "lists/tuples/dicts of them (so they load with torch.load(weights_only=True)); "
        "convert it in get_extra_state"
    )


def _is_batch_like(x: Any) -> bool:
    return isinstance(x, Mapping) or is_tree(x)
