"""Optimizers, learning-rate schedules and gradient norms used by `Learner`, and :class:`ModuleOptimizers`, the
learner's per-module optimizers."""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping
from typing import Callable, Dict, Iterable, List, Optional, Sequence, TypedDict, Union

import torch
from torch import nn

__all__ = ["OptimizerFactory", "LRSchedule", "default_optimizer", "KernelKwargs", "kernel_kwargs", "make_schedule", "total_norm",
           "FlatGrads", "ModuleOptimizers"]

OptimizerFactory = Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]
LRSchedule = Union[Sequence[Sequence[float]], Callable[[int], float]]


class KernelKwargs(TypedDict, total=False):
    """The keyword :func:`kernel_kwargs` gives an optimizer: one of the two."""
    fused: bool
    foreach: bool


def kernel_kwargs(params: Sequence[torch.Tensor]) -> KernelKwargs:
    """The fastest of torch's optimizer kernels for ``params``: ``{"fused": True}`` (a parameter's whole
    update in one kernel) when every parameter is floating point on a device torch has fused kernels
    for (CUDA; the CPU from torch 2.4 on), else ``{"foreach": True}`` (multi-tensor kernels).

    Fused and multi-tensor Adam compute the same update; they round differently in the last bits.
    """
    try:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices  # private to torch: guarded below
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
    norms: Sequence[torch.Tensor]
    try:
        norms = torch._foreach_norm(grads)
    except (AttributeError, RuntimeError):
        norms = [torch.linalg.vector_norm(g) for g in grads]
    return float(torch.linalg.vector_norm(torch.stack(norms)))


def _dense(t: torch.Tensor) -> bool:
    """True when ``t``'s elements fill ``t.numel()`` consecutive slots with no gaps or overlaps, in some order of its
    dimensions (contiguous, channels-last, transposed): a tensor of its strides fits a slice of a flat buffer."""
    size, stride = t.size(), t.stride()
    expected = 1
    for d in sorted(range(t.dim()), key=lambda d: stride[d]):
        if size[d] == 1:
            continue
        if stride[d] != expected:
            return False
        expected *= size[d]
    return True


class FlatGrads:
    """One module's gradients in one flat tensor: each parameter's ``.grad`` is a view of it, so that the
    global norm and the clipping are one operation each, not one per parameter.

    :meth:`zero` before a backward pass: the views go back where ``.grad`` was replaced or set to None (e.g. by
    a user's ``optimizer.zero_grad()``), then the buffer is zeroed (the backward pass adds into it, which
    gives the same values as fresh gradients). :meth:`finish` after it: a parameter the pass did not reach
    gets ``.grad = None``, as ``zero_grad(set_to_none=True)`` leaves it, so that its optimizer skips it (a
    post-accumulate-grad hook per parameter records which were reached). :meth:`norm` and :meth:`scale`
    work on the buffer while every gradient is still its view (:meth:`intact`); otherwise the caller takes
    the per-tensor route. Only for dense parameters of one dtype on one device (:meth:`supports`).
    """

    def __init__(self, params: List[nn.Parameter]) -> None:
        self.params = params
        p0 = params[0]
        self.flat = torch.zeros(sum(p.numel() for p in params), dtype=p0.dtype, device=p0.device)
        self.views: List[torch.Tensor] = []
        at = 0
        for p in params:
            if _dense(p):
                # the view keeps the parameter's strides (e.g. a channels-last conv weight), so the backward pass
                # adds the gradient, which comes in the parameter's layout, into it as is
                self.views.append(self.flat.as_strided(p.size(), p.stride(), at))
            else:
                self.views.append(self.flat[at:at + p.numel()].view_as(p))
            at += p.numel()
        self._reached: set = set()
        self._hooks: Optional[list] = None  # registered on the first zero(): until then .grad stays None

    @staticmethod
    def supports(params: List[nn.Parameter]) -> bool:
        """True when ``params`` can share one buffer: dense, floating point, one dtype, one device."""
        if not params:
            return False
        p0 = params[0]
        return all(p.layout == torch.strided and p.dtype == p0.dtype and p.device == p0.device
                   and p.is_floating_point() for p in params)

    def zero(self) -> None:
        """Point every ``.grad`` at its view and zero the buffer."""
        if self._hooks is None:
            reached = self._reached
            self._hooks = [p.register_post_accumulate_grad_hook(lambda _p, i=i: reached.add(i))
                           for i, p in enumerate(self.params)]
        for p, v in zip(self.params, self.views):
            if p.grad is not v:
                p.grad = v
        self.flat.zero_()
        self._reached.clear()

    def finish(self) -> None:
        """After the backward pass: parameters it did not reach get ``.grad = None``."""
        reached = self._reached
        if len(reached) != len(self.params):
            for i, (p, v) in enumerate(zip(self.params, self.views)):
                if i not in reached and p.grad is v:
                    p.grad = None

    def intact(self) -> bool:
        """True while every gradient is its view or None (nothing replaced a ``.grad`` since :meth:`zero`)."""
        return all(p.grad is v or p.grad is None for p, v in zip(self.params, self.views))

    def norm(self) -> float:
        """The global L2 norm of the gradients (parameters without a gradient count as zero)."""
        return float(torch.linalg.vector_norm(self.flat))

    def scale(self, coef: float) -> None:
        """Multiply every gradient by ``coef``."""
        self.flat.mul_(coef)

    def remove(self) -> None:
        """Drop the hooks (the parameters moved or the module left)."""
        for h in self._hooks or ():
            h.remove()
        self._hooks = None


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
        #: module id -> its gradients in one buffer (None: the per-tensor route, see :class:`FlatGrads`)
        self.flat_grads: Dict[str, Optional[FlatGrads]] = {mid: self._flat(ps) for mid, ps in self.params.items()}
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

    @staticmethod
    def _flat(params: List[nn.Parameter]) -> Optional[FlatGrads]:
        return FlatGrads(params) if FlatGrads.supports(params) else None

    def zero_grad(self, mid: str) -> None:
        """Clear module ``mid``'s gradients before a backward pass."""
        fg = self.flat_grads[mid]
        if fg is None:
            self.optimizers[mid].zero_grad(set_to_none=True)
        else:
            fg.zero()

    def backward_done(self, mid: str) -> None:
        """After a backward pass: module ``mid``'s parameters it did not reach have no gradient."""
        fg = self.flat_grads[mid]
        if fg is not None:
            fg.finish()

    def clip(self, params: List[nn.Parameter], mid: Optional[str] = None) -> float:
        """The global norm of ``params``' gradients (before clipping), clipped to ``grad_clip`` when finite
        (``mid``: the module they are, for one operation on its gradient buffer)."""
        fg = self.flat_grads.get(mid) if mid is not None else None
        if fg is not None and params is fg.params and fg.intact():
            norm = fg.norm()
            if self.grad_clip is not None and norm > self.grad_clip and math.isfinite(norm):
                fg.scale(self.grad_clip / (norm + 1e-6))
            return norm
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
            old = self.flat_grads.get(mid)
            if old is not None:
                old.remove()
            self.flat_grads[mid] = self._flat(self.params[mid])
