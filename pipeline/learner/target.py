"""A target network that follows an online one by Polyak averaging (:class:`SoftTarget`), as SAC's and IQL's
critics have."""

from __future__ import annotations

import copy
from typing import Dict, List

import torch
from torch import nn

__all__ = ["SoftTarget"]


class SoftTarget:
    """A frozen copy of ``online`` (:attr:`module`, no gradients) that :meth:`update` moves a fraction ``theta``
    of the way towards ``online`` (``target <- target + theta * (online - target)``, all parameters in one
    fused call). A learner keeps :attr:`module` as an attribute (so ``Learner.to`` moves it) and calls
    :meth:`refresh` after a move (its ``_device_moved`` hook): the parameter lists are cached."""

    def __init__(self, online: nn.Module, theta: float) -> None:
        if not 0.0 < theta <= 1.0:
            raise ValueError(f"policy.learn.target_theta must be in (0, 1], got {theta}")
        self.online = online
        self.module = copy.deepcopy(online).requires_grad_(False)
        self.theta = float(theta)
        self.refresh()

    def refresh(self) -> None:
        """Re-read both networks' parameters (after they moved to another device)."""
        self._target: List[torch.Tensor] = list(self.module.parameters())
        self._online: List[torch.Tensor] = list(self.online.parameters())

    def update(self) -> None:
        """One Polyak step towards the online network."""
        with torch.no_grad():
            torch._foreach_lerp_(self._target, self._online, self.theta)

    def state_dict(self) -> Dict[str, object]:
        return self.module.state_dict()

    def load_state_dict(self, state: Dict[str, object]) -> None:
        self.module.load_state_dict(state)
