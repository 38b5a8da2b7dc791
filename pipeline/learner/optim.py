"""Optimizers, learning-rate schedules and gradient norms used by `Learner`, and :class:`ModuleOptimizers`, the
learner's per-module optimizers."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Union

import torch
from torch import nn

__all__ = ["OptimizerFactory", "LRSchedule", "default_optimizer", "kernel_kwargs", "make_schedule", "total_norm",
           "ModuleOptimizers"]

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
    kernels = kernel_kwargs(params)
    return torch.optim.Adam(params, lr=lr, foreach=kernels.get("foreach"), fused=kernels.get("fused"))


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
    norms: Sequence[torch.Tensor]
    try:
        norms = torch._foreach_norm(grads)
    except (AttributeError, RuntimeError):
        norms = [torch.linalg.vector_norm(g) for g in grads]
    return float(torch.linalg.vector_norm(torch.stack(norms)))


class ModuleOptimizers:
    """Each trained module's optimizer, its parameters and its learning-rate schedule (one of a
    :class:`~pipeline.learner.Learner`'s collaborators): built from a factory and per-module learning rates,
    it clips and steps one module's gradients (:meth:`clip`, :meth:`step`), sets the learning rates of a
    timestep (:meth:`apply_schedules`) and re-points the optimizers at moved parameters (:meth:`moved`)."""

    def __init__(self, modules: Dict[str, nn.Module], lr: Union[float, Mapping[str, float]],
                 factory: OptimizerFactory, lr_schedule: Union[None, LRSchedule, Mapping[str, LRSchedule]],
                 grad_clip: Optional[float]) -> None:
        if grad_clip is not None and not (grad_clip > 0):
            raise ValueError(f"grad_clip must be a positive number or None, got {grad_clip!r}")
        self.grad_clip = grad_clip
        self.optimizers: Dict[str, torch.optim.Optimizer] = {}
        self.params: Dict[str, List[nn.Parameter]] = {}
        for mid, mod in modules.items():
            params = [p for p in mod.parameters() if p.requires_grad]
            if not params:
                raise ValueError(
                    f"module {mid!r} has no trainable parameters; keep networks that are not trained "
                    "(e.g. target networks) outside `modules`"
                )
            opt = factory(params, float(lr[mid] if isinstance(lr, Mapping) else lr))
            if not isinstance(opt, torch.optim.Optimizer):
                raise TypeError(f"optimizer factory returned {type(opt).__name__}, not a torch Optimizer")
            self.optimizers[mid] = opt
            self.params[mid] = [p for g in opt.param_groups for p in g["params"]]
        self.schedules: Dict[str, Callable[[int], float]] = {}
        if lr_schedule is not None:
            per_module = isinstance(lr_schedule, Mapping)
            for mid in modules:
                spec = lr_schedule.get(mid) if isinstance(lr_schedule, Mapping) else lr_schedule
                if spec is not None:
                    self.schedules[mid] = make_schedule(spec, f"lr_schedule for {mid!r}")
            if per_module:
                unknown = [k for k in lr_schedule if k not in modules]  # type: ignore[union-attr]
                if unknown:
                    raise ValueError(f"lr_schedule names unknown module ids {unknown}; known: {list(modules)}")
            self.apply_schedules(0)

    def apply_schedules(self, t: int) -> None:
        """Set each scheduled module's learning rate to its schedule's value at timestep ``t``."""
        for mid, sched in self.schedules.items():
            lr = float(sched(t))
            for g in self.optimizers[mid].param_groups:
                g["lr"] = lr

    def clip(self, params: List[nn.Parameter]) -> float:
        """The global norm of ``params``' gradients (before clipping), clipped to ``grad_clip`` when finite."""
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return 0.0
        norm = total_norm(grads)
        clip = self.grad_clip
        if clip is not None and norm > clip and math.isfinite(norm):
            coef = clip / (norm + 1e-6)
            try:
                torch._foreach_mul_(grads, coef)
            except (AttributeError, RuntimeError):
                for g in grads:
                    g.mul_(coef)
        return norm

    def moved(self, renamed: Dict[int, nn.Parameter], saved: Dict[str, Dict[str, object]]) -> None:
        """After the modules moved: point each optimizer at the moved parameters (``renamed``: id of the old
        parameter -> the new one) and load its ``saved`` state onto their device."""
        for mid, opt in self.optimizers.items():
            for group in opt.param_groups:
                group["params"] = [renamed.get(id(p), p) for p in group["params"]]
            opt.state.clear()
            opt.load_state_dict(saved[mid])  # casts the state onto the parameters' new device
            self.params[mid] = [p for g in opt.param_groups for p in g["params"]]
