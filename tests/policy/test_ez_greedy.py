"""Temporally-extended eps-greedy (``policy.other.eps.repeat_exponent``): random actions held for zeta-drawn runs."""
import itertools

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.config import compile_config
from pipeline.policy import DQNPolicy
from pipeline.policy.dqn import DQNCollectMode


class CountingQ(nn.Module):
    """Q-values that always prefer action 2; counts the rows it was asked for."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))
        self.rows = 0

    def forward(self, x):
        self.rows += x.shape[0]
        return torch.tensor([0.0, 0.0, 1.0]).repeat(x.shape[0], 1) + self.w


def runs(column):
    return [len(list(g)) for _, g in itertools.groupby(column)]


def test_held_actions_run_for_zeta_lengths_and_skip_the_network():
    q = CountingQ()
    mode = DQNCollectMode(q, 3, seed=0, repeat_exponent=2.0, repeat_max=50)
    obs = np.zeros((8, 4), np.float32)
    acts = np.stack([mode.forward(obs, eps=1.0) for _ in range(400)])
    assert q.rows == 0  # eps 1: every free env explores, a held one runs no network
    lengths = [n for e in range(8) for n in runs(acts[:, e])]
    assert max(lengths) > 10 and np.mean(lengths) > 2.0  # plain eps-greedy over 3 actions: mean 1.5
    left, held = mode.hold
    assert left.shape == (8,) and (left >= 0).all() and (left < 50).all()
    np.testing.assert_array_equal(held, acts[-1])


def test_cap_one_is_plain_random_and_eps_zero_is_greedy():
    q = CountingQ()
    mode = DQNCollectMode(q, 3, seed=0, repeat_exponent=2.0, repeat_max=1)
    obs = np.zeros((4, 4), np.float32)
    acts = np.stack([mode.forward(obs, eps=1.0) for _ in range(300)])
    assert np.mean([n for e in range(4) for n in runs(acts[:, e])]) < 2.0
    assert (mode.hold[0] == 0).all()
    np.testing.assert_array_equal(mode.forward(obs, eps=0.0), [2, 2, 2, 2])
    assert q.rows == 4


def test_a_held_env_keeps_its_action_while_the_others_act_greedily():
    q = CountingQ()
    mode = DQNCollectMode(q, 3, seed=1, repeat_exponent=2.0, repeat_max=100)
    obs = np.zeros((2, 4), np.float32)
    mode.hold = (np.array([5, 0]), np.array([0, 0]))
    for step in range(5):
        a = mode.forward(obs, eps=0.0)
        assert a[0] == 0 and a[1] == 2
    assert mode.forward(obs, eps=0.0)[0] == 2  # the hold ran out: greedy again
    assert q.rows == 5 + 2


def test_the_config_reaches_the_collect_mode_and_is_checked():
    base = {'policy': {'model': {'obs_shape': 4, 'action_shape': 3}}}
    assert DQNPolicy(compile_config(base, policy='dqn'), seed=0).collect_mode.repeat_exponent is None
    cfg = compile_config({'policy': {**base['policy'], 'other': {'eps': {'repeat_exponent': 2.0, 'repeat_max': 7}}}},
                         policy='dqn')
    mode = DQNPolicy(cfg, seed=0).collect_mode
    assert (mode.repeat_exponent, mode.repeat_max) == (2.0, 7)
    with pytest.raises(ValueError, match='repeat_exponent'):
        compile_config({'policy': {**base['policy'], 'other': {'eps': {'repeat_exponent': 1.0}}}}, policy='dqn')
    with pytest.raises(ValueError, match='repeat_exponent must be > 1'):
        DQNCollectMode(CountingQ(), 3, repeat_exponent=0.5)


def test_holds_start_only_while_eps_is_above_repeat_min_eps():
    q = CountingQ()
    mode = DQNCollectMode(q, 3, seed=0, repeat_exponent=2.0, repeat_max=100, repeat_min_eps=0.02)
    obs = np.zeros((8, 4), np.float32)
    held_early = 0
    for _ in range(50):                              # eps still decaying: exploratory actions are held
        mode.forward(obs, eps=0.9)
        held_early += int((mode.hold[0] > 0).sum())
    assert held_early > 0
    mode.hold = (np.zeros(8, np.int64), np.zeros(8, np.int64))
    end = 1.0 + (0.01 - 1.0) * 1.0                   # a linear schedule's last eps: 0.010000000000000009
    for _ in range(2000):                            # at the schedule's end: eps-greedy, every random action one step
        mode.forward(obs, eps=end)
        assert (mode.hold[0] == 0).all()
    explored = 0
    for _ in range(200):                             # eps 0.02 itself starts no hold (above it only)
        a = mode.forward(obs, eps=0.02)
        explored += int((a != 2).sum())
        assert (mode.hold[0] == 0).all()
    assert explored > 0                               # it still explores
    with pytest.raises(ValueError, match='repeat_min_eps must be in'):
        DQNCollectMode(CountingQ(), 3, repeat_exponent=2.0, repeat_min_eps=1.5)
    cfg = compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 3},
                                     'other': {'eps': {'repeat_exponent': 2.0, 'repeat_min_eps': 0.02}}}}, policy='dqn')
    assert DQNPolicy(cfg, seed=0).collect_mode.repeat_min_eps == 0.02
