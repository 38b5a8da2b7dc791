import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny nets on a shared 2-core machine: one intra-op thread avoids oversubscription stalls."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


import gymnasium as gym
import numpy as np


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
def cfg():
    from pipeline.config import compile_config

    return compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2}}})
