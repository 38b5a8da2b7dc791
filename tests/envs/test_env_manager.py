import gymnasium as gym
import numpy as np
import pytest

from pipeline.envs import EnvManager, UnknownEnvError


class FixedLengthEnv(gym.Env):
    """Reward 1 per step; terminates after `length` steps (or never when length is None)."""

    def __init__(self, length=3):
        self.length = length
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0, self.np_random.random()], np.float32), {}

    def step(self, action):
        self.t += 1
        obs = np.array([self.t, action], np.float32)
        return obs, 1.0, self.length is not None and self.t >= self.length, False, {'t': self.t}


def test_reset_shapes_and_seed_reproducibility():
    a = EnvManager('CartPole-v1', 3, seed=7)
    b = EnvManager('CartPole-v1', 3, seed=7)
    oa, ob = a.reset(), b.reset()
    assert oa.shape == (3, 4) and oa.dtype == np.float32
    np.testing.assert_array_equal(oa, ob)
    assert not np.array_equal(oa[0], oa[1])  # env i gets seed + i
    for _ in range(30):
        sa, sb = a.step(np.ones(3, np.int64)), b.step(np.ones(3, np.int64))
        np.testing.assert_array_equal(sa.next_obs, sb.next_obs)
    c = EnvManager('CartPole-v1', 3, seed=8)
    assert not np.array_equal(c.reset(), oa)


def test_auto_reset_keeps_final_obs_and_counts_episodes():
    m = EnvManager(lambda: FixedLengthEnv(3), 2, seed=0)
    m.reset()
    for t in range(1, 3):
        s = m.step(np.zeros(2, np.int64))
        assert not s.done.any() and s.finished == []
    s = m.step(np.array([1, 0]))
    assert s.terminated.all() and not s.truncated.any()
    np.testing.assert_array_equal(s.next_obs[:, 0], [3, 3])   # final observation, not the reset one
    np.testing.assert_array_equal(s.next_obs[:, 1], [1, 0])
    assert (m.obs[:, 0] == 0).all()                          # envs were reset
    assert [(e.env_id, e.episode_return, e.length, e.terminated) for e in s.finished] == \
        [(0, 3.0, 3, True), (1, 3.0, 3, True)]


def test_truncation_kept_apart_from_termination():
    m = EnvManager('CartPole-v1', 2, seed=0, max_episode_steps=4)
    m.reset()
    for _ in range(3):
        s = m.step(np.array([0, 1]))
        assert not s.done.any()
    s = m.step(np.array([1, 0]))
    assert s.truncated.all() and not s.terminated.any()
    assert all(e.truncated and not e.terminated and e.length == 4 for e in s.finished)


def test_cartpole_termination_is_terminated_not_truncated():
    m = EnvManager('CartPole-v1', 1, seed=0)
    m.reset()
    for _ in range(200):
        s = m.step(np.array([1]))  # always push right: falls within a few dozen steps
        if s.done[0]:
            break
    assert s.terminated[0] and not s.truncated[0]


def test_step_subset_of_envs():
    m = EnvManager(lambda: FixedLengthEnv(None), 3, seed=0)
    obs0 = m.reset().copy()
    s = m.step(np.array([1]), env_ids=[2])
    assert s.env_ids.tolist() == [2] and s.next_obs.shape == (1, 2)
    np.testing.assert_array_equal(m.obs[:2], obs0[:2])  # untouched
    assert m.obs[2, 0] == 1


def test_unknown_env_id_is_clear():
    with pytest.raises(UnknownEnvError) as e:
        EnvManager('CartPol-v1', 1)
    assert 'CartPol-v1' in str(e.value) and 'CartPole-v1' in str(e.value)
    assert isinstance(e.value, ValueError)


def test_bad_input_errors():
    m = EnvManager(lambda: FixedLengthEnv(3), 2)
    with pytest.raises(RuntimeError, match='reset'):
        m.obs
    m.reset()
    with pytest.raises(ValueError, match='one action per stepped env'):
        m.step(np.zeros(3, np.int64))
    with pytest.raises(ValueError):
        EnvManager('CartPole-v1', 0)
    with pytest.raises(ValueError, match='one per env'):
        EnvManager([lambda: FixedLengthEnv()], 2)
    m.close()
    m.close()
    with pytest.raises(RuntimeError, match='closed'):
        m.step(np.zeros(2, np.int64))


def test_infos_and_torch_actions():
    import torch
    m = EnvManager(lambda: FixedLengthEnv(5), 2, keep_infos=True)
    m.reset()
    s = m.step(torch.tensor([0, 1]))
    assert [i['t'] for i in s.infos] == [1, 1]
    np.testing.assert_array_equal(s.action, [0, 1])
