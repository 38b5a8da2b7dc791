"""Pieces of the Atari-100k agent: the DER encoder, eps-greedy that skips the network on exploring
envs, and the double-DQN target with a target net copied after every update."""
import copy

import numpy as np
import torch
from torch import nn

from pipeline.policy.conv import AtariQNetwork, DataEfficientCNN
from pipeline.policy.dqn import DQNCollectMode, DQNLearner


def test_der_encoder_and_q_network_shapes():
    enc = DataEfficientCNN()
    assert enc.output_dim == 64 * 3 * 3
    x = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8)
    assert enc(x).shape == (5, 576)
    for dueling in (True, False):
        q = AtariQNetwork(6, dueling=dueling, encoder='der')
        assert q(x).shape == (5, 6)
    q = AtariQNetwork(6, dueling=True, encoder='der')
    assert q.adv[0].out_features == 256 and q.value[0].out_features == 256
    nature = sum(p.numel() for p in AtariQNetwork(6, dueling=True).parameters())
    assert sum(p.numel() for p in q.parameters()) < nature / 5


class Counting(nn.Module):
    def __init__(self, n_act=3):
        super().__init__()
        self.rows = []
        self.lin = nn.Linear(2, n_act)

    def forward(self, x):
        self.rows.append(x.shape[0])
        return self.lin(x)


def _old_forward(model, rng, obs, eps, n_act):
    """The eps-greedy of before: the network on every env, then the same draws."""
    with torch.no_grad():
        act = model(torch.as_tensor(obs)).argmax(-1).numpy()
    if eps > 0.0:
        n = act.shape[0]
        explore = rng.random(n) < eps
        if explore.any():
            act = np.where(explore, rng.integers(0, n_act, n), act)
    return act


def test_collect_mode_runs_the_network_only_for_greedy_envs_and_acts_as_before():
    torch.manual_seed(0)
    model = Counting()
    mode = DQNCollectMode(model, 3, seed=7)
    ref_rng = np.random.default_rng(7)
    obs_rng = np.random.default_rng(1)
    for eps in (1.0, 0.5, 0.0, 0.3, 1.0, 0.05):
        for _ in range(20):
            obs = obs_rng.standard_normal((8, 2)).astype(np.float32)
            model.rows.clear()
            got = mode.forward(obs, eps)
            ran = sum(model.rows)
            want = _old_forward(model, ref_rng, obs, eps, 3)
            np.testing.assert_array_equal(got, want)
            if eps == 1.0:
                assert ran == 0                               # every env explores: no forward pass
            elif eps == 0.0:
                assert ran == 8
            else:
                assert ran <= 8
    mode1 = DQNCollectMode(model, 3, seed=0)
    model.rows.clear()
    for _ in range(50):
        mode1.forward(np.zeros((1, 2), np.float32), 0.5)
    assert 10 < len(model.rows) < 40                            # one env: the net runs on greedy steps only


def _cfg(freq):
    return {'policy': {'discount_factor': 0.99, 'nstep': 1,
                       'learn': {'learning_rate': 1e-3, 'grad_clip': 10.0, 'optimizer': 'adam',
                                 'optimizer_kwargs': {'eps': 1.5e-4}, 'double_dqn': True, 'loss': 'huber',
                                 'target_update_type': 'hard', 'target_update_freq': freq,
                                 'truncation_as_terminal': False}}}


def test_target_copied_every_update_skips_the_second_forward_and_learns_the_same():
    torch.manual_seed(0)
    net = AtariQNetwork(4, dueling=True, encoder='der')
    fast = DQNLearner(copy.deepcopy(net), _cfg(1))
    slow = DQNLearner(copy.deepcopy(net), _cfg(1))
    slow._target_is_online = False                               # the general path: online + target forward
    assert fast._target_is_online
    g = torch.Generator().manual_seed(1)
    calls = {'n': 0}

    def count(*_):
        calls['n'] += 1
    h = fast.model.register_forward_hook(count)
    for _ in range(3):
        batch = {'obs': torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, generator=g),
                 'next_obs': torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8, generator=g),
                 'action': torch.randint(0, 4, (8,), generator=g), 'reward': torch.randn(8, generator=g),
                 'terminated': torch.rand(8, generator=g) < 0.2}
        fast.update(batch=batch)
        slow.update(batch=batch)
    h.remove()
    assert calls['n'] == 3                                       # online net: the obs forward only
    for a, b in zip(fast.model.parameters(), slow.model.parameters()):
        torch.testing.assert_close(a, b)
    for a, b in zip(fast.target_model.parameters(), fast.model.parameters()):
        assert torch.equal(a, b)
    assert not DQNLearner(copy.deepcopy(net), _cfg(2))._target_is_online
