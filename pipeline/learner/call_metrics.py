"""The metrics of one ``Learner.update`` call: per-call accumulators, loss-dict extras and the
nested results dict of :class:`Stats` (names in :mod:`pipeline.learner.metrics`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Dict, Optional

import torch

from . import metrics as M
from .stats import Stats

__all__ = ["CallMetricsMixin"]

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


class CallMetricsMixin:
    """The metrics half of :class:`~pipeline.learner.Learner`: what one ``update`` call accumulates
    (``_call_*``) and how it becomes the returned results."""

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

    def _host_metrics(self) -> Dict[str, float]:
        """Bring the call's metrics that stayed on a device (last losses, pending loss-dict extras) to the
        host in one transfer: returns module id -> last loss as a float, and turns every pending extra into
        its ``(sum, count)`` (summed in the order the values came, as on the CPU)."""
        by_device: Dict[torch.device, list] = {}  # device -> [(id of the tensor kept, tensor)]
        for loss in self._call_last_loss.values():
            if loss.device.type != "cpu":
                by_device.setdefault(loss.device, []).append((id(loss), loss.detach()))
        for extras in self._call_extras.values():
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
                  for mid, loss in self._call_last_loss.items()}
        for extras in self._call_extras.values():
            for k, acc in extras.items():
                if isinstance(acc[0], _Pending):
                    it = iter(values[id(x)] if isinstance(x, _Tensor) else x for x in acc[0])
                    total = next(it)
                    for x in it:
                        total = total + x
                    extras[k] = (total, acc[1])
        return losses

    def _build_results(self, n_updates: int) -> dict:
        make = Stats._make
        results: dict = {}
        total_loss_sum = 0.0
        env_rows = self._call_env_rows
        last_losses = self._host_metrics()
        for mid, loss in self._call_last_loss.items():
            rows = self._call_rows.get(mid, 0)
            skipped = self._call_skipped.get(mid, 0)
            lifetime = self.num_module_steps_trained_lifetime[mid]
            sk_life = self.num_skipped_steps_lifetime[mid]
            loss_f = last_losses[mid]
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
