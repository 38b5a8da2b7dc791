"""her_data_enhancer, HERLearner, reward_estimator and goal_success_evaluator, with small fakes."""
import copy

import numpy as np
import pytest
import torch

from contexts import OnlineRLContext
from middleware.her import HERLearner, goal_success_evaluator, her_data_enhancer
from middleware.reward import reward_estimator
from pipeline import Role, task
from pipeline.data import DequeBuffer
from pipeline.envs.goal_envs import BitFlipEnv, FlattenGoalObservation
from pipeline.reward_model import HerRewardModel, RndRewardModel

N_BITS = 6


def cfg(update_per_collect=3, batch_size=32):
    return {"policy": {"learn": {"update_per_collect": update_per_collect, "batch_size": batch_size}}}


def episode(env, seed):
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    ep = []
    while True:
        a = int(env.action_space.sample())
        nxt, r, te, tr, _ = env.step(a)
        ep.append({"obs": obs, "action": a, "reward": float(r), "next_obs": nxt, "terminated": te,
                   "truncated": tr, "env_id": 0})
        obs = nxt
        if te or tr:
            return ep


@pytest.fixture
def env():
    return FlattenGoalObservation(BitFlipEnv(n_bits=N_BITS))


def filled_buffer(env, n):
    buf = DequeBuffer(100)
    for s in range(n):
        buf.push(episode(env, s))
    return buf


class FakeLearner:
    def __init__(self):
        self.batches = []

    def update(self, batch, timesteps=None):
        self.batches.append(batch)
        return {"default_policy": {"total_loss": float(len(self.batches))}}


def test_enhancer_returns_none_with_too_few_episodes(env):
    her = HerRewardModel.from_env(env, episode_size=4)
    buf = filled_buffer(env, 3)
    ctx = OnlineRLContext()
    ctx.train_data = "stale"
    her_data_enhancer(cfg(), buf, her)(ctx)
    assert ctx.train_data is None
    buf.push(episode(env, 99))
    her_data_enhancer(cfg(), buf, her)(ctx)
    assert ctx.train_data is not None


def test_enhancer_batch_is_consistent_and_leaves_buffer_alone(env):
    lay = env.goal_layout
    buf = filled_buffer(env, 10)
    before = copy.deepcopy([buf.get(i).data for i in range(buf.count())])
    her = HerRewardModel.from_env(env, k=4, episode_size=5, sample_per_episode=6, seed=0)
    ctx = OnlineRLContext()
    her_data_enhancer(cfg(), buf, her)(ctx)
    b = ctx.train_data
    assert type(b) is dict  # the TrainBatch form every fetcher writes, not a tree
    assert b["obs"].shape == (30, 3 * N_BITS) and b["next_obs"].shape == (30, 3 * N_BITS)
    assert b["action"].shape == (30,) and b["reward"].shape == (30,) and b["terminated"].dtype == torch.bool
    # every row (original or relabelled) is self-consistent: reward from its own goal
    exp = env.compute_reward(b["next_obs"][:, lay.achieved].numpy(), b["obs"][:, lay.desired].numpy(), None)
    np.testing.assert_array_equal(b["reward"].numpy(), exp)
    np.testing.assert_array_equal(b["terminated"].numpy(), exp == 0.0)
    assert torch.equal(b["obs"][:, lay.desired], b["next_obs"][:, lay.desired])
    assert (b["reward"] == 0).any(), "hindsight goals should produce some successes"
    after = [buf.get(i).data for i in range(buf.count())]
    for e0, e1 in zip(before, after):
        for t0, t1 in zip(e0, e1):
            assert t0["reward"] == t1["reward"] and t0["terminated"] == t1["terminated"]
            np.testing.assert_array_equal(t0["obs"], t1["obs"])
            np.testing.assert_array_equal(t0["next_obs"], t1["next_obs"])


def test_enhancer_subsamples_to_batch_size_and_rejects_non_episodes(env):
    buf = filled_buffer(env, 4)
    her = HerRewardModel.from_env(env, k=4, episode_size=4)
    ctx = OnlineRLContext()
    her_data_enhancer(cfg(batch_size=16), buf, her)(ctx)
    assert ctx.train_data["reward"].shape == (16,)
    bad = DequeBuffer(10)
    for i in range(4):
        bad.push({"obs": np.zeros(3)})
    with pytest.raises(TypeError, match="whole episodes"):
        her_data_enhancer(cfg(), bad, her)(ctx)
    with pytest.raises(TypeError, match="estimate"):
        her_data_enhancer(cfg(), buf, object())


def test_her_learner_rounds_and_early_stop(env):
    her = HerRewardModel.from_env(env, k=2, episode_size=2, sample_per_episode=4)
    learner = FakeLearner()
    ctx = OnlineRLContext()
    empty = DequeBuffer(10)
    hl = HERLearner(cfg(update_per_collect=3), learner, empty, her)
    hl(ctx)
    assert ctx.train_output == [] and ctx.train_iter == 0 and learner.batches == []
    buf = filled_buffer(env, 3)
    hl = HERLearner(cfg(update_per_collect=3), learner, buf, her)
    hl(ctx)
    assert ctx.train_iter == 3 and len(learner.batches) == 3 and len(ctx.train_output) == 3
    assert [o["total_loss"] for o in ctx.train_output] == [1.0, 2.0, 3.0]
    assert all(b["reward"].shape == (8,) for b in learner.batches)
    assert ctx.train_data is learner.batches[-1]
    assert HERLearner.__roles__ == frozenset({Role.LEARNER})


@pytest.mark.parametrize("roles,trains", [([Role.COLLECTOR], False), ([Role.EVALUATOR], False),
                                          ([Role.LEARNER], True), (None, True)])
def test_learner_side_middleware_are_gated(env, roles, trains):
    her = HerRewardModel.from_env(env, episode_size=2, sample_per_episode=4)
    buf = filled_buffer(env, 3)
    learner = FakeLearner()
    rnd = RndRewardModel(obs_dim=3 * N_BITS, seed=0)
    seen = []
    with task.start(ctx=OnlineRLContext(), roles=roles):
        task.use(HERLearner(cfg(update_per_collect=2), learner, buf, her))
        task.use(her_data_enhancer(cfg(), buf, her))
        task.use(reward_estimator(cfg(), rnd))
        task.use(lambda ctx: seen.append((ctx.train_iter, ctx.train_data is not None)))
        task.run(2)
    assert (len(learner.batches) == 4) == trains
    assert seen[-1] == ((4, True) if trains else (0, False))
    assert rnd.train_iter == (2 if trains else 0)
    for fn in (her_data_enhancer(cfg(), buf, her), reward_estimator(cfg(), rnd)):
        assert fn.__roles__ == frozenset({Role.LEARNER})


def test_reward_estimator_changes_train_data_not_the_buffer():
    from middleware import offpolicy_data_fetcher

    buf = DequeBuffer(100)
    rng = np.random.default_rng(0)
    for i in range(40):
        buf.push({"obs": rng.normal(size=4).astype(np.float32), "action": i % 2, "reward": float(i % 3),
                  "next_obs": rng.normal(size=4).astype(np.float32), "terminated": False})
    snapshot = [buf.get(i).data["reward"] for i in range(40)]
    c = {"policy": {"learn": {"batch_size": 16, "learning_starts": 16}}}
    rnd = RndRewardModel(obs_dim=4, seed=0, intrinsic_weight=1.0)
    fetch = task.wrap(offpolicy_data_fetcher(c, buf))
    est = reward_estimator(c, rnd)
    ctx = OnlineRLContext()
    for _ in range(3):
        back = fetch(ctx)
        original = ctx.train_data
        orig_reward = original["reward"].clone()
        est(ctx)
        assert ctx.train_data is not original
        assert torch.equal(original["reward"], orig_reward)  # the fetched batch is untouched
        assert (ctx.train_data["reward"] > orig_reward).all()  # intrinsic bonus is positive
        assert torch.equal(ctx.train_data["obs"], original["obs"])
        back()
    assert [buf.get(i).data["reward"] for i in range(40)] == snapshot
    assert rnd.train_iter == 3
    # None passes through; a model without estimate is refused
    ctx.train_data = None
    est(ctx)
    assert ctx.train_data is None
    with pytest.raises(TypeError, match="estimate"):
        reward_estimator(c, object())
    with pytest.raises(TypeError, match="train=False"):
        reward_estimator(c, type("OnlyEstimate", (), {"estimate": lambda self, d: d})())


def test_goal_success_evaluator_counts_successes(env):
    from pipeline.envs import EnvManager

    class Oracle:
        """Flips the first wrong bit: always succeeds."""

        def forward(self, obs):
            lay = env.goal_layout
            diff = obs[:, lay.achieved] != obs[:, lay.desired]
            return diff.argmax(axis=1)

    class Stuck:
        def forward(self, obs):
            return np.zeros(len(obs), dtype=np.int64)  # flips bit 0 back and forth

    mgr = EnvManager(lambda: FlattenGoalObservation(BitFlipEnv(n_bits=N_BITS)), 2, seed=0)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        goal_success_evaluator(Oracle(), mgr, n_episode=6)(ctx)
        assert ctx.eval_value == 1.0 and ctx.eval_output["success_rate"] == 1.0
        ctx.last_eval_iter = -1
        goal_success_evaluator(Stuck(), mgr, n_episode=6)(ctx)
        # a goal one flip of bit 0 away is the only way to succeed: rare
        assert ctx.eval_value < 0.5 and ctx.eval_output["episode_length"].shape == (6,)
        ctx.train_iter, ctx.last_eval_iter = 5, -1
        goal_success_evaluator(Oracle(), mgr, n_episode=4, stop_success=0.9)(ctx)
        assert task.finish
    mgr.close()
