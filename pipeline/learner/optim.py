"""Optimizers, learning-rate schedules and gradient norms used by `Learner`."""

from __future__ import annotations

import bisect
from typing import Callable, Dict, Iterable, List, Sequence, Union

import torch
from torch import nn

__all__ = ["OptimizerFactory", "LRSchedule", "default_optimizer", "kernel_kwargs", "make_schedule", "total_norm"]

OptimizerFactory = Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]
LRSchedule = Union[Sequence[Sequence[float]], Callable[[int], float]]


def kernel_kwargs(params: Sequence[torch.Tensor]) -> Dict[str, bool]:
    """The fastest of torch's optimizer kernels for ``params``: ``{"fused": True}`` (a parameter's whole
    update in one kernel) when every parameter is floating point on a device torch has fused kernels
    for (CUDA; the CPU from torch 2.4 on), else ``{"foreach": True}`` (multi-tensor kernels).

    Fused and multi-tensor Adam compute the same update; they round differently in the last bits.
    """
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
        fused_devices = set(_get_fused_kernels_supported_devices())
    except (ImportError, AttributeError):  # an older torch (its list names the CPU from 2.4 on)
        fused_devices = {"cuda"}
    if params and all(p.is_floating_point() and p.device.type in fused_devices for p in params):
        return {"fused": True}
    return {"foreach": True}


def default_optimizer(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    """``torch.optim.Adam(params, lr)`` with the fastest kernels for ``params`` (:func:`kernel_kwargs`:
    fused on the CPU and CUDA)."""
    params = list(params)
    return torch.optim.Adam(params, lr=lr, **kernel_kwargs(params))


def make_schedule(spec: LRSchedule, where: str) -> Callable[[int], float]:
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


def total_norm(grads: List[torch.Tensor]) -> float:
    """Global L2 norm of a list of gradient tensors, as a float (one sync)."""
    if len(grads) == 1:
        return float(torch.linalg.vector_norm(grads[0]))
    try:
        norms = torch._foreach_norm(grads)
    except (AttributeError, RuntimeError):
        norms = [torch.linalg.vector_norm(g) for g in grads]
    return float(torch.linalg.vector_norm(torch.stack(norms)))
