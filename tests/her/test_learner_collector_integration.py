"""OffPolicyLearner trains its reward model; collectors keep continuous actions as arrays."""
import numpy as np
import pytest
import torch
from torch import nn

from contexts import OnlineRLContext
from middleware import EpisodeCollector, OffPolicyLearner, StepCollector, data_pusher
from middleware.her import HERLearner, her_data_enhancer
from pipeline import task
from pipeline.config import compile_config
from pipeline.data import DequeBuffer
from pipeline.envs import EnvManager
from pipeline.envs.goal_envs import FlattenGoalObservation, PointGoalEnv
from pipeline.policy.common import collate_transitions
from pipeline.reward_model import HerRewardModel, RndRewardModel


class FakeLearner:
    def __init__(self):
        self.batches = []

    def update(self, batch, timesteps=None):
        self.batches.append(batch)
        return {"default_policy": {"total_loss": 0.0}}


def filled(n, dim=4):
    b = DequeBuffer(100, seed=0)
    for i in range(n):
        b.push({"obs": np.full(dim, i, np.float32), "action": i % 2, "reward": 0.0,
                "next_obs": np.eye(dim, dtype=np.float32)[i % dim], "terminated": False, "truncated": False,
                "env_id": 0})
    return b


def small_cfg(update_per_collect=4):
    return compile_config({"policy": {"learn": {"update_per_collect": update_per_collect, "batch_size": 8,
                                                 "learning_starts": 8}}})


def test_offpolicy_learner_trains_rnd_and_leaves_buffer_alone():
    buf = filled(20)
    rnd = RndRewardModel(obs_dim=4, hidden=(16,), embed_dim=8, seed=0)
    params0 = [p.detach().clone() for p in rnd.predictor.parameters()]
    learner = FakeLearner()
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        OffPolicyLearner(small_cfg(4), learner, buf, reward_model=rnd)(ctx)
    assert rnd.train_iter == 4, "the reward model must take one training step per round"
    assert any(not torch.equal(a, b) for a, b in zip(params0, rnd.predictor.parameters()))
    assert len(learner.batches) == 4
    # the learner saw the combined reward (positive intrinsic bonus), the buffer kept reward 0.0
    assert all(float(b["reward"].min()) > 0.0 for b in learner.batches)
    assert all(item.data["reward"] == 0.0 for item in buf.sample(20))


def test_offpolicy_learner_estimates_before_training_and_can_skip_training():
    calls = []

    class RM:
        def estimate(self, data):
            calls.append("estimate")
            return None

        def train(self, data):
            calls.append("train")

    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        OffPolicyLearner(small_cfg(2), FakeLearner(), filled(20), reward_model=RM())(ctx)
        assert calls == ["estimate", "train"] * 2
        calls.clear()
        OffPolicyLearner(small_cfg(2), FakeLearner(), filled(20), reward_model=RM(), train_reward_model=False)(ctx)
        assert calls == ["estimate", "estimate"]


def test_offpolicy_learner_does_not_mistake_module_train_for_a_training_step():
    class ModuleRM(nn.Module):  # estimate only; nn.Module.train is the mode switch
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(1, 1)

        def estimate(self, data):
            return None

    rm = ModuleRM()
    with task.start(ctx=OnlineRLContext()):
        OffPolicyLearner(small_cfg(2), FakeLearner(), filled(20), reward_model=rm)(task.ctx)
    assert rm.training is True  # train(batch) would have set the mode from the batch


def test_her_learner_trains_its_extra_reward_model():
    env = FlattenGoalObservation(PointGoalEnv())
    buf = DequeBuffer(50)
    rng = np.random.default_rng(0)
    for s in range(4):
        obs, _ = env.reset(seed=s)
        ep = []
        for _ in range(5):
            a = rng.uniform(-1, 1, 2).astype(np.float32)
            nxt, r, te, tr, _ = env.step(a)
            ep.append({"obs": obs, "action": a, "reward": r, "next_obs": nxt, "terminated": te, "truncated": tr,
                       "env_id": 0})
            obs = nxt
        buf.push(ep)
    her = HerRewardModel.from_env(env, episode_size=2, sample_per_episode=4, seed=0)
    rnd = RndRewardModel(obs_dim=env.observation_space.shape[0], hidden=(16,), embed_dim=8, seed=0)
    learner = FakeLearner()
    with task.start(ctx=OnlineRLContext()):
        HERLearner(small_cfg(3), learner, buf, her, reward_model=rnd)(task.ctx)
    assert rnd.train_iter == 3 and len(learner.batches) == 3
    assert learner.batches[0]["action"].shape == (8, 2)


@pytest.mark.parametrize("collector", ["step", "episode"])
def test_collectors_store_continuous_actions_as_arrays_that_collate(collector):
    cfg = compile_config({"policy": {"collect": {"n_sample": 6, "n_episode": 2}}})
    env = EnvManager(lambda: FlattenGoalObservation(PointGoalEnv(max_steps=3)), 2, seed=0)

    def policy(obs, **kw):
        return torch.full((obs.shape[0], 2), 0.25)

    try:
        with task.start(ctx=OnlineRLContext()):
            ctx = task.ctx
            if collector == "step":
                StepCollector(cfg, policy, env)(ctx)
                rows = ctx.transitions
            else:
                EpisodeCollector(cfg, policy, env)(ctx)
                rows = [t for ep in ctx.episodes for t in ep]
    finally:
        env.close()
    assert rows and all(isinstance(t["action"], np.ndarray) and t["action"].shape == (2,) for t in rows)
    batch = collate_transitions(rows)
    assert "action" in batch, "continuous actions must survive collation"
    assert batch["action"].shape == (len(rows), 2) and batch["action"].dtype == torch.float32
    assert torch.allclose(batch["action"], torch.full((len(rows), 2), 0.25))


def test_discrete_actions_stay_python_ints():
    from pipeline.envs.goal_envs import BitFlipEnv

    cfg = compile_config({"policy": {"collect": {"n_sample": 4}}})
    env = EnvManager(lambda: FlattenGoalObservation(BitFlipEnv(n_bits=4)), 2, seed=0)
    try:
        with task.start(ctx=OnlineRLContext()):
            StepCollector(cfg, lambda obs, **kw: torch.ones(obs.shape[0], dtype=torch.long), env)(task.ctx)
            rows = task.ctx.transitions
    finally:
        env.close()
    assert all(type(t["action"]) is int and t["action"] == 1 for t in rows)


def test_episode_pipeline_with_continuous_actions_collates_via_enhancer():
    cfg = compile_config({"policy": {"collect": {"n_episode": 2}, "learn": {"batch_size": 16}}})
    env = EnvManager(lambda: FlattenGoalObservation(PointGoalEnv(max_steps=4)), 2, seed=0)
    buf = DequeBuffer(20)
    her = HerRewardModel.from_env(FlattenGoalObservation(PointGoalEnv()), episode_size=2, sample_per_episode=3)
    try:
        with task.start(ctx=OnlineRLContext()):
            ctx = task.ctx
            EpisodeCollector(cfg, lambda obs, **kw: np.full((obs.shape[0], 2), -0.5, np.float32), env)(ctx)
            data_pusher(cfg, buf)(ctx)
            her_data_enhancer(cfg, buf, her, seed=0)(ctx)
    finally:
        env.close()
    assert ctx.train_data["action"].shape == (6, 2)
    assert torch.allclose(ctx.train_data["action"], torch.full((6, 2), -0.5))
