"""The metrics of one ``Learner.update`` call: per-call accumulators, loss-dict extras and the
nested results dict of :class:`Stats` (names in :mod:`pipeline.learner.metrics`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Dict

import torch

from . import metrics as M
from .stats import Stats

__all__ = ["CallMetricsMixin"]

_Tensor = torch.Tensor


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
