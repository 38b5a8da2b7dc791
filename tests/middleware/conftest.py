import gymnasium as gym
import numpy as np
import pytest


class FixedLengthEnv(gym.Env):
    """obs = [t, env-specific constant]; reward 1 per step; terminates after `length` steps."""

    def __init__(self, length=3, truncate=False):
        self.length = length
        self.truncate = truncate
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        obs = np.array([self.t, action, 0, 0], np.float32)
        return obs, 1.0, end and not self.truncate, end and self.truncate, {}


@pytest.fixture
def fixed_env():
    from pipeline.envs import EnvManager

    def make(n=2, length=3, truncate=False, lengths=None):
        if lengths is not None:
            return EnvManager([(lambda L=L: FixedLengthEnv(L, truncate)) for L in lengths], len(lengths))
        return EnvManager(lambda: FixedLengthEnv(length, truncate), n)

    return make


class ZeroPolicy:
    """Always action 0; records the kwargs it was called with."""

    def __init__(self):
        self.calls = []

    def forward(self, obs, **kwargs):
        self.calls.append(kwargs)
        return np.zeros(len(obs), np.int64)


@pytest.fixture
def zero_policy():
    return ZeroPolicy()


@pytest.fixture
def cfg(small_dqn_cfg):
    return small_dqn_cfg()
