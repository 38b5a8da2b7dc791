"""``reward_estimator``: replace the training batch's reward with a reward model's combined reward."""
from __future__ import annotations

from typing import Any, Callable, Mapping

from pipeline.roles import Role, for_roles

__all__ = ["reward_estimator"]


@for_roles(Role.LEARNER)
def reward_estimator(cfg: Mapping, reward_model: Any, train: bool = True) -> Callable[[Any], None]:
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
    if not hasattr(reward_model, "estimate"):
        raise TypeError(
            f"reward_estimator needs a reward model with estimate(train_data) (and train(data)); "
            f"got {type(reward_model).__name__}"
        )
    if train and not hasattr(reward_model, "train"):
        raise TypeError(f"{type(reward_model).__name__} has no train(data); pass train=False")

    def _estimate(ctx: Any) -> None:
        data = ctx.train_data
        if data is None:
            return
        est = reward_model.estimate(data)
        if train:
            reward_model.train(data)
        if est is not None:
            ctx.train_data = est

    return _estimate
