"""``reward_estimator``: replace the training batch's reward with a reward model's combined reward."""
from __future__ import annotations

from typing import Callable, Mapping, Optional

from contexts import RLContext
from pipeline.runtime.roles import Role, for_roles

__all__ = ["reward_estimator"]


@for_roles(Role.LEARNER, reads=["train_data"], writes=["train_data"])
def reward_estimator(cfg: Mapping, reward_model: object, train: bool = True) -> Callable[[RLContext], None]:
    """Put ``reward_model``'s reward into ``ctx.train_data`` (after the fetcher, before the trainer).

    Reads ``ctx.train_data`` (does nothing when it is None). Writes ``ctx.train_data``: the new batch
    ``reward_model.estimate(ctx.train_data)`` returns (e.g. extrinsic + normalised intrinsic reward
    for :class:`pipeline.reward_model.RndRewardModel`). The old batch, and so any buffer data it
    shares tensors with, is not modified: reward models build a new batch. When ``train`` is True
    the reward model then takes a training step on the (original) batch with
    ``reward_model.train(batch)``, so the reward of this batch is estimated before the model has
    seen it. Role: LEARNER.

    Use it inside a chain (``fetcher -> reward_estimator -> trainer``) or pass the model to
    ``OffPolicyLearner(..., reward_model=...)``, which calls ``estimate`` then ``train`` the same way
    each round.
    """
    return reward_step(reward_model, train=train, require_train=train)


def _training_step(reward_model: object) -> Optional[Callable[[object], object]]:
    """``reward_model.train`` if it is a training step (an ``nn.Module``'s own ``train()`` is the mode switch)."""
    fn = getattr(reward_model, "train", None)
    if fn is None:
        return None
    import torch.nn as nn  # lazy: `import middleware` loads no torch (a reward model has loaded it)

    if isinstance(reward_model, nn.Module) and getattr(type(reward_model), "train", None) is nn.Module.train:
        return None
    return fn


def reward_step(reward_model: object, train: bool = True, require_train: bool = False) -> Callable[[RLContext], None]:
    """The step shared by ``reward_estimator``, ``OffPolicyLearner`` and ``HERLearner``.

    Reads ``ctx.train_data`` (nothing happens when it is None); writes the batch returned by
    ``reward_model.estimate`` (when not None) to ``ctx.train_data``; then, when ``train`` and the model
    has a training step, ``reward_model.train`` on the original batch.
    """
    if not hasattr(reward_model, "estimate"):
        raise TypeError(
            f"a reward model needs estimate(train_data) (and train(data)); got {type(reward_model).__name__}"
        )
    train_fn = _training_step(reward_model) if train else None
    if require_train and train_fn is None:
        raise TypeError(f"{type(reward_model).__name__} has no train(data); pass train=False")
    estimate = reward_model.estimate

    def _estimate(ctx: RLContext) -> None:
        data = ctx.train_data
        if data is None:
            return
        est = estimate(data)
        if train_fn is not None:
            train_fn(data)
        if est is not None:
            ctx.train_data = est

    return _estimate
