"""The metrics of one ``Learner.update`` call (:class:`CallMetrics`): per-call accumulators, loss-dict extras
and the nested results dict of :class:`Stats` (names in :mod:`pipeline.learner.metrics`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Dict, Optional, Protocol

import torch

from . import metrics as M
from .stats import Stats

__all__ = ["CallMetrics", "LearnerCounters"]


class LearnerCounters(Protocol):
    """What :meth:`CallMetrics.results` reads from the learner it reports on (a ``Learner`` has all of it)."""

    optimizers: Dict[str, torch.optim.Optimizer]
    num_module_steps_trained_lifetime: Dict[str, int]
    num_skipped_steps_lifetime: Dict[str, int]
    num_env_steps_trained_lifetime: int
    weights_seq_no: int

_Tensor = torch.Tensor


class _Pending(list):
    """The values of one loss-dict extra over a call while they stay on a device (0-d tensors, or numbers)."""


def _pend(acc: Optional[tuple], value: object) -> tuple:
    """``(values, count)`` of an extra with ``value`` added (``acc``: None, pending values, or a float sum)."""
    if acc is None:
        return _Pending([value]), 1
    if isinstance(acc[0], _Pending):
        acc[0].append(value)
        return acc[0], acc[1] + 1
    return _Pending([acc[0], value]), acc[1] + 1


class CallMetrics:
    """What one ``update`` call of a learner accumulates, and how it becomes the returned results.

    The learner calls :meth:`reset` at the start of a call; :meth:`split_loss` for each loss dict (extras
    become metrics, per-row tensors go to ``last_outputs``); :meth:`step_taken` / :meth:`step_skipped` per
    optimizer step; :meth:`minibatch_done` per minibatch; :meth:`results` at the end. ``step_norms`` carries
    each module's pre-clip gradient norm from ``postprocess_gradients`` to ``apply_gradients``.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.step_norms: Dict[str, float] = {}
        self.norm_sum: Dict[str, float] = {}
        self.norm_cnt: Dict[str, int] = {}
        self.skipped: Dict[str, int] = {}
        self.last_loss: Dict[str, _Tensor] = {}
        self.rows: Dict[str, int] = {}
        self.extras: Dict[str, Dict[str, tuple]] = {}
        self.env_rows = 0

    def split_loss(self, mid: str, loss: Mapping, last_outputs: Dict[str, Dict[str, _Tensor]]) -> _Tensor:
        """The ``total_loss`` of module ``mid``'s loss dict; its 0-d extras are accumulated as metrics, its
        other tensors kept (detached) in ``last_outputs[mid]``."""
        try:
            total = loss["total_loss"]
        except KeyError:
            raise ValueError(
                f"the loss dict of module {mid!r} has no 'total_loss' entry (keys: {sorted(loss)})"
            ) from None
        extras = self.extras.get(mid)
        if extras is None:
            extras = self.extras[mid] = {}
        kept = None
        for k, v in loss.items():
            if k == "total_loss":
                continue
            if isinstance(v, _Tensor):
                if v.dim() == 0:
                    acc = extras.get(k)
                    if v.device.type == "cpu" and (acc is None or not isinstance(acc[0], _Pending)):
                        fv = float(v)
                        extras[k] = (fv, 1) if acc is None else (acc[0] + fv, acc[1] + 1)
                    else:  # off the CPU: kept on the device, read with the call's other metrics at once
                        extras[k] = _pend(acc, v.detach().clone() if v.device.type != "cpu" else float(v))
                else:
                    if kept is None:
                        kept = {}
                    kept[k] = v.detach()
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                acc = extras.get(k)
                if acc is not None and isinstance(acc[0], _Pending):
                    extras[k] = _pend(acc, float(v))
                else:
                    extras[k] = (float(v), 1) if acc is None else (acc[0] + v, acc[1] + 1)
            else:
                raise TypeError(
                    f"loss entry {k!r} of module {mid!r} is a {type(v).__name__}; use tensors or numbers"
                )
        if kept is not None:
            last_outputs[mid] = kept
        return total

    def step_taken(self, mid: str, norm: float) -> None:
        """Module ``mid``'s optimizer stepped with this pre-clip gradient norm."""
        self.norm_sum[mid] = self.norm_sum.get(mid, 0.0) + norm
        self.norm_cnt[mid] = self.norm_cnt.get(mid, 0) + 1

    def step_skipped(self, mid: str) -> None:
        """Module ``mid``'s step was skipped (gradients not finite)."""
        self.skipped[mid] = self.skipped.get(mid, 0) + 1

    def minibatch_done(self, losses: Dict[str, _Tensor], rows: Dict[str, int], env_rows: int) -> None:
        """A minibatch took its step: its losses are the last ones, its rows count."""
        last, cr = self.last_loss, self.rows
        for mid, loss in losses.items():
            last[mid] = loss
            cr[mid] = cr.get(mid, 0) + rows[mid]
        self.env_rows += env_rows

    def host_losses(self) -> Dict[str, float]:
        """Bring the call's metrics that stayed on a device (last losses, pending loss-dict extras) to the
        host in one transfer: returns module id -> last loss as a float, and turns every pending extra into
        its ``(sum, count)`` (summed in the order the values came, as on the CPU)."""
        by_device: Dict[torch.device, list] = {}  # device -> [(id of the tensor kept, tensor)]
        for loss in self.last_loss.values():
            if loss.device.type != "cpu":
                by_device.setdefault(loss.device, []).append((id(loss), loss.detach()))
        for extras in self.extras.values():
            for acc in extras.values():
                if isinstance(acc[0], _Pending):
                    for x in acc[0]:
                        if isinstance(x, _Tensor):
                            by_device.setdefault(x.device, []).append((id(x), x))
        values: Dict[int, float] = {}
        for group in by_device.values():  # one device-to-host copy per device
            host = torch.stack([t.reshape(()).to(torch.float64) for _, t in group]).tolist()
            values.update(zip((key for key, _ in group), host))
        losses = {mid: values[id(loss)] if id(loss) in values else loss.item()
                  for mid, loss in self.last_loss.items()}
        for extras in self.extras.values():
            for k, acc in extras.items():
                if isinstance(acc[0], _Pending):
                    it = iter(values[id(x)] if isinstance(x, _Tensor) else x for x in acc[0])
                    total = next(it)
                    for x in it:
                        total = total + x
                    extras[k] = (total, acc[1])
        return losses

    def results(self, n_updates: int, learner: LearnerCounters) -> dict:
        """The call's results (``{module_id: {...}, "__all_modules__": {...}}`` of :class:`Stats`), with the
        learning rates and lifetime counters read from ``learner`` (committed before this is called).

        Per module: ``total_loss`` (last minibatch), ``num_module_steps_trained`` (sum of minibatch rows) and
        ``..._lifetime``, ``learning_rate``, ``gradients_norm`` (mean pre-clip global norm of the applied
        steps), ``num_skipped_steps`` (non-finite gradients, step skipped) and ``..._lifetime``, plus scalar
        loss-dict extras (mean over minibatches). ``__all_modules__``: ``total_loss`` (sum over modules),
        ``num_env_steps_trained`` (per minibatch the largest module's rows) and ``..._lifetime``,
        ``num_minibatch_updates``, ``weights_seq_no`` (+1 per call)."""
        make = Stats._make
        results: dict = {}
        total_loss_sum = 0.0
        last_losses = self.host_losses()
        for mid in self.last_loss:
            rows = self.rows.get(mid, 0)
            skipped = self.skipped.get(mid, 0)
            loss_f = last_losses[mid]
            total_loss_sum += loss_f
            cnt = self.norm_cnt.get(mid, 0)
            gnorm = self.norm_sum[mid] / cnt if cnt else math.nan
            lr = learner.optimizers[mid].param_groups[0]["lr"]
            r = {
                M.TOTAL_LOSS: make(loss_f, "mean", 1),
                M.NUM_MODULE_STEPS_TRAINED: make(float(rows), "sum", None, True),
                M.NUM_MODULE_STEPS_TRAINED_LIFETIME: make(float(learner.num_module_steps_trained_lifetime[mid]),
                                                          "sum", None),
                M.LEARNING_RATE: make(float(lr), "mean", 1),
                M.GRADIENTS_NORM: make(gnorm, "mean", 1),
                M.NUM_SKIPPED_STEPS: make(float(skipped), "sum", None, True),
                M.NUM_SKIPPED_STEPS_LIFETIME: make(float(learner.num_skipped_steps_lifetime[mid]), "sum", None),
            }
            extras = self.extras.get(mid)
            if extras:
                for k, (s, c) in extras.items():
                    if k not in r:
                        r[k] = make(s / c, "mean", 1)
            results[mid] = r
        results[M.ALL_MODULES] = {
            M.TOTAL_LOSS: make(total_loss_sum, "mean", 1),
            M.NUM_ENV_STEPS_TRAINED: make(float(self.env_rows), "sum", None, True),
            M.NUM_ENV_STEPS_TRAINED_LIFETIME: make(float(learner.num_env_steps_trained_lifetime), "sum", None),
            M.NUM_MINIBATCH_UPDATES: make(float(n_updates), "max", 1),
            M.WEIGHTS_SEQ_NO: make(float(learner.weights_seq_no), "max", 1),
        }
        return results
