"""HerRewardModel: goals come from the same episode and the right window; rewards = compute_reward."""
import numpy as np
import pytest
import torch

from pipeline.envs.goal_envs import BitFlipEnv, FlattenGoalObservation, PointGoalEnv
from pipeline.reward_model import HerRewardModel


def rollout(env, seed, steps, flat=False, as_torch=False):
    """One episode of random actions as a list of transition dicts."""
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    ep = []
    for _ in range(steps):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        tr = {"obs": obs, "action": a, "reward": r, "next_obs": nxt, "done": term}
        if as_torch:
            conv = (lambda o: torch.as_tensor(o)) if flat else (lambda o: {k: torch.as_tensor(v) for k, v in o.items()})
            tr = {"obs": conv(obs), "action": torch.as_tensor(a), "reward": torch.tensor(r),
                  "next_obs": conv(nxt), "done": torch.tensor(term)}
        ep.append(tr)
        obs = nxt
        if term or trunc:
            break
    return ep


def point_env():
    # a tiny threshold so accidental success (and early termination) is practically impossible
    return PointGoalEnv(max_steps=30, distance_threshold=1e-4)


def goal_source(goal, ag_next):
    """Index j with ag_next[j] == goal (continuous goals are unique)."""
    hits = np.flatnonzero(np.all(np.isclose(ag_next, goal[None]), axis=1))
    assert len(hits) == 1, "relabelled goal is not an achieved goal of this episode"
    return int(hits[0])


@pytest.mark.parametrize("strategy", ["future", "final", "episode"])
def test_goal_window_and_rewards_dict_obs(strategy):
    env = point_env()
    ep = rollout(env, 0, 30)
    T = len(ep)
    assert T == 30
    snapshot = [{k: (dict(v) if isinstance(v, dict) else v) for k, v in tr.items()} for tr in ep]
    her = HerRewardModel.from_env(env, strategy=strategy, k=3, seed=0)
    out = her.relabel([ep])
    assert len(out) == her.output_size(T) == T * (1 + (1 if strategy == "final" else 3))
    ag_next = np.stack([tr["next_obs"]["achieved_goal"] for tr in ep])
    originals, relabelled = out[:T], out[T:]
    for o, tr in zip(originals, ep):
        assert o["reward"] == tr["reward"] and o["obs"] is tr["obs"]
    seen_j = []
    for n, tr in enumerate(relabelled):
        t = n // her.relabels_per_transition
        src = ep[t]
        goal = tr["obs"]["desired_goal"]
        np.testing.assert_array_equal(goal, tr["next_obs"]["desired_goal"])
        np.testing.assert_array_equal(tr["obs"]["observation"], src["obs"]["observation"])
        np.testing.assert_array_equal(tr["next_obs"]["achieved_goal"], src["next_obs"]["achieved_goal"])
        assert tr["action"] is src["action"]
        j = goal_source(goal, ag_next)
        seen_j.append(j - t)
        if strategy == "future":
            assert t <= j < T
        elif strategy == "final":
            assert j == T - 1
        expected = env.compute_reward(src["next_obs"]["achieved_goal"], goal, None)
        assert tr["reward"] == pytest.approx(float(expected))
        assert tr["done"] == bool(env.compute_terminated(src["next_obs"]["achieved_goal"], goal, None))
        # j == t means the transition itself reaches the goal: reward 0 and terminal
        assert (tr["reward"] == 0.0) == (j == t)
    if strategy == "episode":  # goals from before the transition occur too
        assert min(seen_j) < 0
    # the input episode is untouched
    for tr, snap in zip(ep, snapshot):
        for key in ("reward", "done"):
            assert tr[key] == snap[key]
        np.testing.assert_array_equal(tr["obs"]["desired_goal"], snap["obs"]["desired_goal"])


def test_future_covers_the_whole_window():
    her = HerRewardModel(lambda a, d, i: np.zeros(len(a)), strategy="future", k=200, seed=1)
    t, j = her.goal_indices(5)
    assert t.shape == j.shape == (1000,)
    for tt in range(5):
        assert set(j[t == tt].tolist()) == set(range(tt, 5))


def test_flat_torch_obs_bitflip_rewards_match_compute_reward():
    env = FlattenGoalObservation(BitFlipEnv(n_bits=8, max_steps=8))
    lay = env.goal_layout
    eps = [rollout(env, s, 8, flat=True, as_torch=True) for s in range(4)]
    her = HerRewardModel.from_env(env, strategy="future", k=4, seed=0, keep_original=False)
    out = her.relabel(eps)
    assert len(out) == sum(len(e) for e in eps) * 4
    pos = 0
    for ep in eps:
        ag_next = torch.stack([tr["next_obs"][lay.achieved] for tr in ep]).numpy()
        for t, src in enumerate(ep):
            for _ in range(4):
                tr = out[pos]
                pos += 1
                assert isinstance(tr["obs"], torch.Tensor) and isinstance(tr["reward"], torch.Tensor)
                goal = tr["obs"][lay.desired].numpy()
                assert torch.equal(tr["next_obs"][lay.desired], tr["obs"][lay.desired])
                assert torch.equal(tr["obs"][: lay.desired.start], src["obs"][: lay.desired.start])
                # the goal is one of the goals achieved at or after t in this episode
                assert any(np.array_equal(goal, ag_next[j]) for j in range(t, len(ep)))
                exp = env.compute_reward(src["next_obs"][lay.achieved].numpy(), goal, None)
                assert tr["reward"].item() == float(exp)
                assert tr["done"].item() == (float(exp) == 0.0)
                # the source transition keeps its own goal
                assert not torch.equal(src["obs"], tr["obs"]) or np.array_equal(goal, src["obs"][lay.desired].numpy())
    assert pos == len(out)


def test_relabelling_produces_successes_where_originals_have_none():
    env = point_env()
    ep = rollout(env, 5, 30)
    assert all(tr["reward"] == -1.0 for tr in ep)
    out = HerRewardModel.from_env(env, strategy="final", seed=0).relabel(ep)  # a single episode works too
    assert out[len(ep) * 2 - 1]["reward"] == 0.0  # the last transition reaches the final goal
    assert sum(tr["reward"] == 0.0 for tr in out) >= 1


def test_bad_arguments_are_explained():
    f = lambda a, d, i: np.zeros(len(a))
    with pytest.raises(ValueError, match="unknown HER strategy"):
        HerRewardModel(f, strategy="past")
    with pytest.raises(ValueError, match="positive integer"):
        HerRewardModel(f, k=0)
    with pytest.raises(TypeError, match="callable"):
        HerRewardModel(None)
    with pytest.raises(ValueError, match="goal-env observations"):
        HerRewardModel(f).relabel([[{"obs": np.zeros(3), "next_obs": np.zeros(3), "reward": 0.0}]])
    with pytest.raises(KeyError, match="next_obs"):
        HerRewardModel(f).relabel([[{"obs": np.zeros(3), "reward": 0.0}]])
    with pytest.raises(ValueError, match="vectorised"):
        env = point_env()
        HerRewardModel(lambda a, d, i: 0.0, k=2).relabel(rollout(env, 0, 5))
    assert HerRewardModel(f).relabel([]) == []


def test_sample_per_episode_builds_a_uniform_subset():
    env = point_env()
    ep = rollout(env, 2, 30)
    ag_next = np.stack([tr["next_obs"]["achieved_goal"] for tr in ep])
    her = HerRewardModel.from_env(env, strategy="future", k=4, sample_per_episode=8, seed=3)
    assert her.output_size(30) == 8
    n_orig = 0
    for _ in range(20):
        out = her.relabel([ep, ep])
        assert len(out) == 16
        for tr in out:
            goal = tr["obs"]["desired_goal"]
            t = next(i for i, src in enumerate(ep) if np.array_equal(src["obs"]["observation"], tr["obs"]["observation"]))
            if np.array_equal(goal, ep[t]["obs"]["desired_goal"]):
                n_orig += 1
                assert tr["reward"] == ep[t]["reward"]
                continue
            assert t <= goal_source(goal, ag_next) < 30
            assert tr["reward"] == float(env.compute_reward(ep[t]["next_obs"]["achieved_goal"], goal, None))
    # originals are 1/5 of the output positions: about 64 of 320 drawn rows
    assert 30 < n_orig < 110
    with pytest.raises(ValueError, match="sample_per_episode"):
        HerRewardModel.from_env(env, sample_per_episode=0)
    with pytest.raises(TypeError, match="list of transition dicts"):
        her.relabel([[np.zeros(3)]])
