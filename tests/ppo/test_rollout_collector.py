"""RolloutCollector: shapes, counters, and bootstrap values of truncated episodes' true final observations."""
import gymnasium as gym
import numpy as np
import pytest

from contexts import OnlineRLContext
from middleware import RolloutCollector, gae_estimator
from pipeline.envs import EnvManager


class CountEnv(gym.Env):
    """obs = [t, 0]; reward 1; ends after `length` steps, by termination or truncation."""

    def __init__(self, length, truncate):
        self.length, self.truncate = length, truncate
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.t = 0
        return np.array([0.0, 0.0], np.float32), {}

    def step(self, action):
        self.t += 1
        end = self.t >= self.length
        return np.array([self.t, 0.0], np.float32), 1.0, end and not self.truncate, end and self.truncate, {}


class ValueIsTime:
    """A collect mode whose value of an observation is 10 * t + 1 (so bootstraps are recognisable)."""

    def forward(self, obs):
        n = len(obs)
        return {'env_action': np.zeros(n, np.int64), 'action': np.zeros(n, np.int64),
                'logp': np.full(n, -0.5, np.float32), 'value': self.value(obs)}

    def value(self, obs):
        return (10.0 * np.asarray(obs)[:, 0] + 1.0).astype(np.float32)


def cfg(n_steps):
    return {'policy': {'collect': {'n_steps': n_steps}, 'discount_factor': 0.5, 'gae_lambda': 1.0,
                       'learn': {'normalize_reward': False}}}


def test_rollout_shapes_counters_and_final_values():
    env = EnvManager([lambda: CountEnv(3, truncate=True), lambda: CountEnv(2, truncate=False)], 2)
    ctx = OnlineRLContext()
    col = RolloutCollector(cfg(5), ValueIsTime(), env)
    col(ctx)
    r = ctx.rollout
    assert r['obs'].shape == (5, 2, 2) and r['action'].shape == r['reward'].shape == (5, 2)
    assert ctx.env_step == 10 and ctx.env_episode == 1 + 2
    # env 0 truncates after step index 2 (t=3): final value = value of obs [3, 0] = 31; env 1 terminates
    np.testing.assert_array_equal(r['truncated'][:, 0], [False, False, True, False, False])
    np.testing.assert_array_equal(r['terminated'][:, 1], [False, True, False, True, False])
    assert r['final_value'][2, 0] == pytest.approx(31.0)
    assert not r['final_value'][:, 1].any()
    # after the rollout env 0 is at t=2, env 1 at t=1
    np.testing.assert_allclose(r['last_value'], [21.0, 11.0])
    # the running discounted return restarts with each episode
    np.testing.assert_allclose(r['disc_return'][:, 1], [1.0, 1.5, 1.0, 1.5, 1.0])
    # episodes continue across rollouts
    col(ctx)
    assert ctx.rollout['obs'][0, 0, 0] == 2.0 and ctx.env_step == 20
    assert ctx.info_for_logging['collect_episode_length'][:3] == [2, 3, 2]


def test_gae_estimator_uses_the_truncation_bootstrap():
    env = EnvManager([lambda: CountEnv(2, truncate=True)], 1)
    ctx = OnlineRLContext()
    RolloutCollector(cfg(2), ValueIsTime(), env)(ctx)
    gae_estimator(cfg(2))(ctx)
    r = ctx.rollout
    # t=1 is truncated with final obs t=2 -> value 21: adv = 1 + 0.5 * 21 - 11
    assert r['advantage'][1, 0] == pytest.approx(1 + 0.5 * 21 - 11)
    assert r['advantage'][0, 0] == pytest.approx((1 + 0.5 * 11 - 1) + 0.5 * r['advantage'][1, 0])
    np.testing.assert_allclose(r['return'], r['advantage'] + r['value'])


def test_collector_refuses_a_mode_without_value():
    class NoValue:
        def forward(self, obs):
            return {}
    with pytest.raises(TypeError, match='value'):
        RolloutCollector(cfg(2), NoValue(), EnvManager([lambda: CountEnv(2, True)], 1))
