"""Shared learners for the learner tests: they record what each step saw."""
from __future__ import annotations

import torch
from torch import nn

from pipeline.learner import Learner


def index_batch(n: int, *, t: int = 0, seed: int = 0) -> dict:
    """A batch whose 'idx' column tells which original row each minibatch row is."""
    g = torch.Generator().manual_seed(seed)
    b = {"idx": torch.arange(n), "x": torch.randn(n, 3, generator=g), "y": torch.randn(n, generator=g)}
    if t:
        b["seq"] = torch.arange(n).unsqueeze(1).repeat(1, t) * 100 + torch.arange(t)  # [B, T]
    return b


class RecordingLearner(Learner):
    """Linear regression per module; records rows seen and the order of hook calls."""

    def __init__(self, modules=None, **kw):
        super().__init__(modules if modules is not None else nn.Linear(3, 1), **kw)
        self.seen: dict = {}
        self.events: list = []

    def forward_train(self, module_id, batch):
        self.events.append(("forward", module_id))
        self.seen.setdefault(module_id, []).append(batch["idx"].tolist())
        if "seq" in batch:
            self.seen.setdefault(module_id + "/seq", []).append(batch["seq"].clone())
        return self.modules[module_id](batch["x"]).squeeze(-1)

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        self.events.append(("loss", module_id))
        return ((fwd_out - batch["y"]) ** 2).mean()

    def compute_gradients(self, losses):
        self.events.append(("gradients", tuple(losses)))
        return super().compute_gradients(losses)

    def postprocess_gradients(self, gradients):
        self.events.append(("postprocess", tuple(gradients)))
        return super().postprocess_gradients(gradients)

    def apply_gradients(self, gradients):
        self.events.append(("apply", tuple(gradients)))
        return super().apply_gradients(gradients)

    def before_gradient_based_update(self, timesteps):
        self.events.append(("before", dict(timesteps)))

    def after_gradient_based_update(self, timesteps):
        self.events.append(("after", dict(timesteps)))


def two_modules() -> dict:
    torch.manual_seed(0)
    return {"p": nn.Linear(3, 1), "q": nn.Linear(3, 1)}
