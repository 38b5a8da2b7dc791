"""Goal envs (bit flipping, point reaching) and the DeepSea chain."""
import numpy as np
import pytest

from pipeline.envs.deepsea import DeepSeaEnv
from pipeline.envs.goal_envs import BitFlipEnv, FlattenGoalObservation, GoalLayout, PointGoalEnv


def test_bitflip_dict_obs_and_step_semantics():
    env = BitFlipEnv(n_bits=6)
    obs, info = env.reset(seed=3)
    assert set(obs) == {"observation", "achieved_goal", "desired_goal"}
    assert obs["observation"].shape == (6,) and obs["observation"].dtype == np.float32
    assert not np.array_equal(obs["achieved_goal"], obs["desired_goal"])
    assert env.observation_space.contains(obs)
    # flip exactly the differing bits: solved on the last one, with reward 0 and termination
    diff = np.flatnonzero(obs["achieved_goal"] != obs["desired_goal"])
    for n, bit in enumerate(diff):
        before = obs["observation"].copy()
        obs, r, term, trunc, info = env.step(int(bit))
        assert np.count_nonzero(before != obs["observation"]) == 1
        last = n == len(diff) - 1
        assert r == (0.0 if last else -1.0)
        assert term == last and info["is_success"] == last and not trunc


def test_bitflip_truncates_after_n_steps_and_rejects_bad_action():
    env = BitFlipEnv(n_bits=4, max_steps=3)
    obs, _ = env.reset(seed=0)
    flags = []
    for _ in range(3):
        # flip a bit that is already correct, so never succeed
        same = np.flatnonzero(obs["achieved_goal"] == obs["desired_goal"])
        a = int(same[0]) if len(same) else 0
        obs, r, term, trunc, _ = env.step(a)
        flags.append((term, trunc))
        if term:
            break
    assert flags[-1] == (False, True)
    with pytest.raises(ValueError, match="action"):
        env.step(7)
    with pytest.raises(ValueError, match="n_bits"):
        BitFlipEnv(n_bits=0)


def test_compute_reward_is_vectorised_and_matches_step_reward():
    env = BitFlipEnv(n_bits=5)
    rng = np.random.default_rng(0)
    a = rng.integers(0, 2, size=(50, 5)).astype(np.float32)
    d = a.copy()
    d[::2, 0] = 1 - d[::2, 0]  # every other row differs
    r = env.compute_reward(a, d, None)
    assert r.shape == (50,)
    np.testing.assert_array_equal(r, np.where(np.arange(50) % 2 == 0, -1.0, 0.0))
    assert env.compute_reward(a[0], a[0], None) == 0.0
    np.testing.assert_array_equal(env.compute_terminated(a, d, None), r == 0.0)
    with pytest.raises(ValueError, match="last dimension 5"):
        env.compute_reward(a[:, :3], d[:, :3], None)


def test_point_env_moves_clips_and_succeeds():
    env = PointGoalEnv(max_steps=200, distance_threshold=0.1, max_step=0.1)
    obs, _ = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    for _ in range(200):
        delta = obs["desired_goal"] - obs["achieved_goal"]
        obs, r, term, trunc, info = env.step(np.clip(delta / 0.1, -1, 1))
        if term or trunc:
            break
    assert term and info["is_success"] and r == 0.0
    assert np.linalg.norm(obs["achieved_goal"] - obs["desired_goal"]) < 0.1
    # clipped to the square
    env.reset(seed=2)
    for _ in range(40):
        obs, *_ = env.step(np.array([5.0, -5.0]))
    assert obs["observation"].max() <= 1.0 and obs["observation"].min() >= -1.0
    g = np.zeros((3, 2), np.float32)
    a = np.array([[0.0, 0.05], [0.2, 0.0], [0.0, 0.0]], np.float32)
    np.testing.assert_array_equal(env.compute_reward(a, g, None), [0.0, -1.0, 0.0])
    with pytest.raises(ValueError, match="2 finite floats"):
        env.step([np.nan, 0.0])


def test_flatten_wrapper_layout():
    env = FlattenGoalObservation(BitFlipEnv(n_bits=3))
    obs, _ = env.reset(seed=0)
    lay = env.goal_layout
    assert lay == GoalLayout(3, 3) and obs.shape == (9,) and env.observation_space.shape == (9,)
    inner = env.unwrapped._obs()
    np.testing.assert_array_equal(obs[lay.achieved], inner["achieved_goal"])
    np.testing.assert_array_equal(obs[lay.desired], inner["desired_goal"])
    assert env.compute_reward(obs[lay.desired], obs[lay.desired], None) == 0.0
    with pytest.raises(ValueError, match="Dict observation"):
        FlattenGoalObservation(DeepSeaEnv(size=4))


def test_deepsea_only_all_right_path_pays():
    env = DeepSeaEnv(size=6, seed=4)
    obs, _ = env.reset()
    assert obs.shape == (36,) and obs[0] == 1.0 and obs.sum() == 1.0
    total, found = 0.0, False
    for row in range(6):
        col = int(np.argmax(obs)) % 6
        obs, r, term, trunc, info = env.step(env.right_action(row, col))
        total += r
        found |= info["found_treasure"]
        assert term == (row == 5) and not trunc
    assert found and total == pytest.approx(env.optimal_return)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)
    # exhaustive over a small chain: exactly one action sequence out of 2**size pays
    env = DeepSeaEnv(size=5, seed=1)
    paying = 0
    for seq in range(2**5):
        env.reset()
        ret = 0.0
        for i in range(5):
            _, r, *_ = env.step((seq >> i) & 1)
            ret += r
        paying += ret > 0.5
    assert paying == 1


def test_deepsea_mapping_depends_on_seed():
    a, b = DeepSeaEnv(size=20, seed=0), DeepSeaEnv(size=20, seed=1)
    assert not np.array_equal(a._right_action, b._right_action)
    assert DeepSeaEnv(size=20, seed=0, randomize_actions=False).right_action(3, 2) == 1
