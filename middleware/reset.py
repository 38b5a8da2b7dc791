"""``PeriodicReset``: re-initialise part of a network every so many updates (resets against the primacy bias)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Sequence

from contexts import RLContext
from pipeline.runtime.roles import Role, for_roles

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ['PeriodicReset']


@for_roles(Role.LEARNER, reads=["train_iter"])
class PeriodicReset:
    """Re-initialise ``modules`` once ``ctx.train_iter`` passes each multiple of ``every`` updates.

    A reset calls ``reset_parameters()`` on every layer of ``modules`` that holds parameters (PyTorch's default
    initialisation of that layer, drawn from torch's global generator) and drops ``optimizer``'s state for those
    parameters, so their Adam moments and step count start over; the rest of the network and of the optimizer
    is untouched. This is the reset of Nikishin et al. 2022 ("The Primacy Bias in Deep Reinforcement Learning"),
    who re-initialise an agent's last layers every fixed number of updates. A target network copied from the
    online one picks the new weights up at its next copy.

    Place it after the learner. Reads ``ctx.train_iter``; writes nothing to the context. Several multiples passed
    in one step give one reset. ``resets`` counts the resets done; save :meth:`state_dict` with a checkpoint and
    load it on resume, or the first step after the resume resets again. Role: LEARNER.

    Args:
        modules: the layers to re-initialise (e.g. a Q-network's head), each holding parameters.
        optimizer: the optimizer that updates them (its state for their parameters is dropped).
        every: updates between resets, >= 1.
    """

    def __init__(self, modules: Sequence[nn.Module], optimizer: torch.optim.Optimizer, every: int) -> None:
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f'every must be an int >= 1 (updates between resets), got {every!r}')
        self.layers: List[nn.Module] = []
        self._initialisers: List[Callable[[], None]] = []   # each layer's reset_parameters
        for module in modules:
            owners = [m for m in module.modules() if any(True for _ in m.parameters(recurse=False))]
            if not owners:
                raise ValueError(f'{type(module).__name__} has no parameters to reset')
            for m in owners:
                init = getattr(m, 'reset_parameters', None)
                if not callable(init):
                    raise ValueError(f'{type(m).__name__} holds parameters but has no reset_parameters(); '
                                     'pass layers PyTorch can re-initialise (Linear, Conv2d, NoisyLinear, ...)')
                self._initialisers.append(init)
            self.layers.extend(owners)
        self.params = [p for m in self.layers for p in m.parameters(recurse=False)]
        owned = {id(p) for group in optimizer.param_groups for p in group['params']}
        if not all(id(p) in owned for p in self.params):
            raise ValueError('the optimizer does not update every parameter of the modules to reset; '
                             "pass the learner's optimizer (e.g. policy.learn_mode.optimizer)")
        self.optimizer = optimizer
        self.every = every
        self.resets = 0

    def __call__(self, ctx: RLContext) -> None:
        due = int(ctx.train_iter) // self.every
        if due > self.resets:
            self.reset()
            self.resets = due

    def reset(self) -> None:
        """Re-initialise the layers now and drop the optimizer's state for their parameters."""
        import torch

        with torch.no_grad():
            for init in self._initialisers:
                init()
        for p in self.params:
            self.optimizer.state.pop(p, None)

    def state_dict(self) -> Dict[str, int]:
        """``{'resets': n}``: what :meth:`load_state_dict` restores."""
        return {'resets': self.resets}

    def load_state_dict(self, state: Dict[str, int]) -> None:
        resets = state.get('resets')
        if isinstance(resets, bool) or not isinstance(resets, int) or resets < 0:
            raise ValueError(f"a PeriodicReset state needs 'resets', an int >= 0, got {resets!r}")
        self.resets = resets
