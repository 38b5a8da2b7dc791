"""Reward models: hindsight relabelling (HER) and intrinsic rewards (RND).

Two contracts (``pipeline.runtime.protocols``): a reward model (RND) offers ``estimate(train_data)`` (returns new
data with the reward it produces; never modifies its input) and ``train(data)``; HER is an episode
relabeler, ``relabel(episodes)`` (new transitions from whole episodes), with ``train(data)`` a no-op.
"""
from .her import HER_STRATEGIES, HerRewardModel, NoRelabel
from .rnd import RndRewardModel, RunningMeanStd

__all__ = ["HerRewardModel", "NoRelabel", "HER_STRATEGIES", "RndRewardModel", "RunningMeanStd"]
