"""What every policy shares: learn/collect/eval modes built on first use, checkpoints of plain
tensors, the ``policy`` config section, and named optimizers.

A policy subclasses :class:`Policy` and implements ``networks()`` (the modules its state holds)
and the three ``_build_*`` methods; its config schema lives next to it (``CONFIG_SCHEMA`` and
``check_config`` in the policy's module, found by ``pipeline.config.compile_config``).
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, ClassVar, Dict, Generic, Iterable, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union

import numpy as np
import torch
from torch import nn

from ..device import DeviceLike, place_module, policy_device, resolve_device
from ..learner import Learner
from ..learner.optim import kernel_kwargs
from .config_defaults import policy_config

__all__ = ['Policy', 'ActingMode', 'policy_section', 'OPTIMIZERS', 'optimizer_factory', 'optimizer_problems']

OPTIMIZERS: Dict[str, Callable[..., torch.optim.Optimizer]] = {
    'adam': torch.optim.Adam, 'adamw': torch.optim.AdamW, 'sgd': torch.optim.SGD, 'rmsprop': torch.optim.RMSprop,
}


def policy_section(cfg: Mapping) -> Mapping:
    """Accept a full config (with a ``policy`` section) or the policy section itself."""
    return cfg['policy'] if 'policy' in cfg else cfg


def optimizer_factory(name: str, kwargs: Optional[Mapping] = None) -> Callable[[Iterable[nn.Parameter], float], torch.optim.Optimizer]:
    """``factory(params, lr)`` for an optimizer named in :data:`OPTIMIZERS`. Unless ``kwargs`` names
    ``fused`` or ``foreach``, it takes torch's fastest kernels for the parameters
    (:func:`~pipeline.learner.optim.kernel_kwargs`: fused where the optimizer has them, else
    multi-tensor)."""
    key = str(name).lower()
    if key not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}; use one of {', '.join(OPTIMIZERS)}")
    cls = OPTIMIZERS[key]
    opt_kwargs = dict(kwargs or {})
    if 'fused' in opt_kwargs or 'foreach' in opt_kwargs:
        return lambda params, lr: cls(params, lr=lr, **opt_kwargs)
    has_fused = 'fused' in inspect.signature(cls).parameters

    def factory(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
        params = list(params)
        kernels = kernel_kwargs(params) if has_fused else {'foreach': True}
        return cls(params, lr=lr, **kernels, **opt_kwargs)

    return factory


def optimizer_problems(name: Any, lr: Any, kwargs: Any, where: str) -> List[str]:
    """Messages for an optimizer that could not be built from ``name``/``lr``/``kwargs`` (tried on a
    dummy parameter, so that a wrong keyword is reported with the other config errors)."""
    try:
        optimizer_factory(name, kwargs)([nn.Parameter(torch.zeros(1))], lr)
    except (TypeError, ValueError) as exc:
        return [f'{where}.optimizer_kwargs: {name!r} does not accept {dict(kwargs or {})!r}: {exc}']
    return []


class ActingMode:
    """Base of collect/eval modes: ``mode(obs, ...)`` is ``mode.forward(obs, ...)``; no per-env state."""

    def forward(self, obs: object, *args: Any, **kwargs: Any) -> object:
        raise NotImplementedError

    def __call__(self, obs: object, *args: Any, **kwargs: Any) -> object:
        return self.forward(obs, *args, **kwargs)

    def reset(self, env_ids: object = None) -> None:
        """No per-env state (kept for API symmetry with recurrent policies)."""


LearnT = TypeVar('LearnT', bound=Learner)
CollectT = TypeVar('CollectT', bound=ActingMode)
EvalT = TypeVar('EvalT', bound=ActingMode)
PolicyT = TypeVar('PolicyT', bound='Policy[Any, Any, Any]')


class Policy(Generic[LearnT, CollectT, EvalT]):
    """A policy's three modes sharing its networks, each built on first access.

    The type parameters are the modes' types, so ``DQNPolicy(...).collect_mode`` is a ``DQNCollectMode`` to
    a type checker: a subclass names them (``class DQNPolicy(Policy[DQNLearner, DQNCollectMode,
    DQNEvalMode])``) and its ``_build_*`` methods return them.

    ``learn_mode`` (a ``pipeline.learner.Learner``) is built only when used, so collector and
    evaluator nodes never build a learner or an optimizer. ``state_dict()`` holds each network's
    tensors and, once built, the learner's state (all loadable with ``weights_only=True``); a
    learner state loaded before the learner exists waits until it is built. A state saved on another
    device loads too (its tensors are copied onto this policy's device).

    :attr:`device` is where the networks live (:func:`pipeline.device.policy_device`): the ``device``
    argument, else ``policy.device`` (``'auto'``: the GPU when there is one), or, on a node of a
    multi-node run that does not learn, ``policy.acting_device`` (default the CPU). The learner trains
    there; the collect and eval modes act there (the env's observations become one tensor on that
    device per step). :meth:`to` moves everything later.

    :attr:`cfg` is the config's ``policy`` section; a subclass with a :attr:`config_schema` gets that schema's
    default for every key the section lacks (:func:`pipeline.policy.config_defaults.policy_config`), so it
    reads ``self.cfg[key]`` whether or not its config went through ``compile_config``.
    """

    #: the policy's full config schema (e.g. ``DQN_CONFIG``): where a config that lacks a key gets its value
    config_schema: ClassVar[Optional[Mapping]] = None

    def __init__(self, cfg: Mapping, device: DeviceLike = None) -> None:
        self.cfg = policy_section(cfg) if self.config_schema is None else policy_config(cfg, self.config_schema)
        #: where the networks (and, once built, the learner with its optimizers and batches) live
        self.device: torch.device = policy_device(self.cfg, device)
        self._learn: Optional[LearnT] = None
        self._collect: Optional[CollectT] = None
        self._eval: Optional[EvalT] = None
        self._pending_learn_state: Optional[Mapping[str, object]] = None
        #: for a policy rebuilt from a checkpoint (:func:`pipeline.policy.loading.policy_from_saved`): the full
        #: config it was trained with (env id, ...) and its ``(observation_space, action_space)``; empty and None
        #: for a policy built here
        self.saved_config: Mapping[str, Any] = {}
        self.saved_spaces: Optional[Tuple[Any, Any]] = None

    def _flat_sizes(self, obs_shape: Union[int, Sequence[int], None],
                    action_shape: Union[int, Sequence[int], None]) -> Tuple[int, int]:
        """``(obs_dim, action_dim)``: the given shapes, else ``policy.model``'s, flattened; a one-line
        ``ValueError`` naming the policy when neither gives both."""
        mc = self.cfg["model"]
        obs_shape = obs_shape if obs_shape is not None else mc["obs_shape"]
        action_shape = action_shape if action_shape is not None else mc["action_shape"]
        if obs_shape is None or action_shape is None:
            raise ValueError(f"{type(self).__name__} needs policy.model.obs_shape and action_shape "
                             "(or obs_shape=/action_shape=)")
        return int(np.prod(obs_shape)), int(np.prod(action_shape))

    def _place_networks(self) -> None:
        """Put every network of :meth:`networks` on :attr:`device` (subclasses call it once they are built)."""
        for m in self.networks().values():
            place_module(m, self.device)

    def to(self: PolicyT, device: DeviceLike) -> PolicyT:
        """Move the networks, and the learner once built (its optimizers' states and target networks too), to
        ``device``; the collect and eval modes then act there. Returns ``self``."""
        dev = resolve_device(device)
        if self._learn is not None and hasattr(self._learn, 'to'):
            self._learn.to(dev)
        self.device = dev
        self._place_networks()
        return self

    # -- to implement -----------------------------------------------------------------
    def networks(self) -> Dict[str, nn.Module]:
        """name -> module: what ``state_dict`` saves (e.g. ``{'model': q_net}``)."""
        raise NotImplementedError

    def _build_learner(self) -> LearnT:
        raise NotImplementedError

    def _build_collect_mode(self) -> CollectT:
        raise NotImplementedError

    def _build_eval_mode(self) -> EvalT:
        raise NotImplementedError

    # -- modes ------------------------------------------------------------------------
    @property
    def learn_mode(self) -> LearnT:
        """The learner (built on first access)."""
        if self._learn is None:
            self._learn = self._build_learner()
            if self._pending_learn_state is not None:
                self._learn.set_state(self._pending_learn_state)
                self._pending_learn_state = None
        return self._learn

    @property
    def collect_mode(self) -> CollectT:
        if self._collect is None:
            self._collect = self._build_collect_mode()
        return self._collect

    @property
    def eval_mode(self) -> EvalT:
        if self._eval is None:
            self._eval = self._build_eval_mode()
        return self._eval

    # -- state ------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, object]:
        """``{network name: state_dict, ..., 'learn': learner state}`` (``learn`` only once known)."""
        sd: Dict[str, object] = {name: m.state_dict() for name, m in self.networks().items()}
        if self._learn is not None:
            sd['learn'] = self._learn.get_state()
        elif self._pending_learn_state is not None:
            sd['learn'] = self._pending_learn_state
        return sd

    def load_state_dict(self, sd: Mapping[str, Any]) -> None:
        """Load a ``state_dict()``; the learner part waits until the learner is built."""
        nets = self.networks()
        missing = [name for name in nets if name not in sd]
        if missing:
            raise KeyError(f'not a {type(self).__name__} state dict: no {", ".join(map(repr, missing))} '
                           f'(keys: {list(sd)})')
        for name, m in nets.items():
            m.load_state_dict(sd[name])
        learn = sd.get('learn')
        if learn is not None:
            if self._learn is not None:
                self._learn.set_state(learn)
            else:
                self._pending_learn_state = learn
