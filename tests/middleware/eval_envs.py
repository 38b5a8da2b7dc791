"""An env whose episodes have set lengths (reward 1 per step), for the evaluator's tests."""
import gymnasium as gym
import numpy as np

from pipeline.envs import EnvManager


class CycleEnv(gym.Env):
    """Reward 1 per step; episode k lasts ``lengths[k % len(lengths)]`` steps."""

    def __init__(self, lengths):
        self.lengths, self.k, self.t = list(lengths), -1, 0
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.k, self.t = self.k + 1, 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(2, np.float32), 1.0, self.t >= self.lengths[self.k % len(self.lengths)], False, {}


def greedy(obs):
    return np.zeros(len(obs), np.int64)


def cycle_env(*per_env_lengths):
    return EnvManager([(lambda L=L: CycleEnv(L)) for L in per_env_lengths], len(per_env_lengths))
