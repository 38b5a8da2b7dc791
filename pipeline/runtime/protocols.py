"""The contracts of what middleware are handed, as small ``typing.Protocol``s (checked by capability).

- ``TrainablePolicy``: what the trainer and the learner middleware train (``policy.learn_mode``, any
  ``pipeline.learner.Learner``): ``update(batch=..., timesteps=...)``.
- ``ActingPolicy``: what collectors and evaluators act with (``policy.collect_mode`` / ``eval_mode``):
  ``forward(obs, **kwargs) -> actions``.
- ``RewardModel``: ``estimate(batch) -> batch`` puts a reward into a training batch (RND);
  ``TrainableRewardModel`` also learns from batches with ``train(batch)``.
- ``EpisodeRelabeler``: ``relabel(episodes) -> transitions`` rewrites whole episodes (HER). It is not a
  ``RewardModel``: it takes episodes, not a batch.

``isinstance(obj, Protocol)`` checks that the methods exist (``runtime_checkable``), not their signatures.
The replay buffer's contracts are in ``pipeline.data.protocols`` (``ReplayBuffer``, ``BatchSampling``,
``PriorityFeedback``, ``SampleArguments``); a storage's in ``pipeline.data.storage``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Protocol, Sequence, runtime_checkable

__all__ = ["TrainablePolicy", "ActingPolicy", "RewardModel", "TrainableRewardModel", "EpisodeRelabeler"]


@runtime_checkable
class TrainablePolicy(Protocol):
    def update(self, *, batch: Any, timesteps: Optional[Mapping[str, int]] = None, **kwargs: Any) -> Any:
        """One training update on ``batch``; returns its metrics."""


@runtime_checkable
class ActingPolicy(Protocol):
    def forward(self, obs: Any, **kwargs: Any) -> Any:
        """Actions for a batch of observations (``kwargs`` e.g. ``eps``)."""


@runtime_checkable
class RewardModel(Protocol):
    def estimate(self, batch: Any) -> Any:
        """A new batch with this model's reward (the given batch is not modified)."""


@runtime_checkable
class TrainableRewardModel(RewardModel, Protocol):
    def train(self, batch: Any) -> Any:
        """One training step of the reward model on ``batch``."""


@runtime_checkable
class EpisodeRelabeler(Protocol):
    def relabel(self, episodes: Sequence[Sequence[Mapping[str, Any]]]) -> List[Dict[str, Any]]:
        """New transitions from ``episodes`` with relabelled goals and rewards."""
