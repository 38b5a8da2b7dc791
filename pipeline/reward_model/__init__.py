"""Reward models: hindsight relabelling (HER) and intrinsic rewards (RND).

Every reward model offers ``estimate(train_data)`` (returns new data with the reward it produces;
never modifies its input) and ``train(data)`` (a no-op for models with nothing to learn).
"""
from .her import HER_STRATEGIES, HerRewardModel
from .rnd import RndRewardModel, RunningMeanStd

__all__ = ["HerRewardModel", "HER_STRATEGIES", "RndRewardModel", "RunningMeanStd"]
