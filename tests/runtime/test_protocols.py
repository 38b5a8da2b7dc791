"""The small Protocols of what middleware are handed (issue 13)."""
from pipeline.runtime.protocols import (ActingPolicy, EpisodeRelabeler, RewardModel, TrainablePolicy,
                                        TrainableRewardModel)
from pipeline.reward_model import HerRewardModel, RndRewardModel


def test_reward_models_and_relabelers_are_distinct_contracts():
    her = HerRewardModel(lambda achieved, desired, info: 0.0)
    rnd = RndRewardModel(obs_dim=4, seed=0)
    assert isinstance(her, EpisodeRelabeler) and not isinstance(her, RewardModel)
    assert isinstance(rnd, TrainableRewardModel) and not isinstance(rnd, EpisodeRelabeler)


def test_policies():
    class Learner:
        def update(self, *, batch, timesteps=None, **kw):
            return {}

    assert isinstance(Learner(), TrainablePolicy) and not isinstance(Learner(), ActingPolicy)
