import copy
import io

import numpy as np
import pytest
import torch
from torch import nn

from pipeline.config import compile_config
from pipeline.data.collate import to_treetensor as to_tree
from pipeline.policy import DQNModel, DQNPolicy, dqn_targets


class ConstQ(nn.Module):
    """Q(s, a) = bias[a] for every s (a trainable bias, zero weights)."""

    def __init__(self, values=(1.0, 2.0)):
        super().__init__()
        self.lin = nn.Linear(4, len(values))
        with torch.no_grad():
            self.lin.weight.zero_()
            self.lin.bias.copy_(torch.tensor(values))
        self.action_shape = len(values)

    def forward(self, x):
        return self.lin(x)


def batch(n=4, **over):
    d = {'obs': torch.randn(n, 4), 'action': torch.zeros(n, dtype=torch.int64), 'reward': torch.ones(n),
         'next_obs': torch.randn(n, 4), 'terminated': torch.zeros(n, dtype=torch.bool),
         'truncated': torch.zeros(n, dtype=torch.bool)}
    d.update(over)
    return d


def test_model_shapes_dueling_and_plain():
    m = DQNModel(4, 3, [32, 16])
    assert m(torch.zeros(5, 4)).shape == (5, 3)
    assert [l.out_features for l in m.encoder if isinstance(l, nn.Linear)] == [32, 16]
    assert hasattr(m, 'adv') and hasattr(m, 'value')
    p = DQNModel((2, 2), 2, [8], dueling=False, head_hidden_size=5)
    assert p(torch.zeros(3, 2, 2)).shape == (3, 2) and not hasattr(p, 'adv')
    with pytest.raises(ValueError):
        DQNModel(4, 0)
    # dueling: advantages are centred, so Q - V has zero mean over actions
    x = torch.randn(6, 4)
    h = m.encoder(x)
    assert torch.allclose((m(x) - m.value(h)).mean(-1), torch.zeros(6), atol=1e-6)


def test_layer_norm_option_normalises_every_hidden_layer_and_comes_from_the_config():
    m = DQNModel(4, 2, [32, 16], layer_norm=True)
    lns = [l for l in m.modules() if isinstance(l, nn.LayerNorm)]
    assert [l.normalized_shape for l in lns] == [(32,), (16,), (16,), (16,)]  # encoder, adv and value branches
    assert not any(isinstance(l, nn.LayerNorm) for l in DQNModel(4, 2, [32, 16]).modules())
    h = nn.Sequential(*list(m.encoder)[:2])(torch.randn(8, 4) * 100)  # Linear -> LayerNorm: per-row mean 0, var 1
    assert torch.allclose(h.mean(-1), torch.zeros(8), atol=1e-5)
    assert torch.allclose(h.var(-1, unbiased=False), torch.ones(8), atol=1e-3)
    cfg = compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2, 'layer_norm': True,
                                               'dueling': False}}})
    pol = DQNPolicy(cfg, seed=0)
    assert sum(isinstance(l, nn.LayerNorm) for l in pol.model.modules()) == 4  # 128, 128, 64 and the head's 64
    assert pol.learn_mode.target_model.state_dict().keys() == pol.model.state_dict().keys()
    with pytest.raises(ValueError, match='layer_norm'):
        compile_config({'policy': {'model': {'layer_norm': 'yes'}}})


def test_dqn_targets_double_vs_plain():
    r = torch.tensor([1.0, 1.0])
    done = torch.tensor([0.0, 1.0])
    q_t = torch.tensor([[10.0, 0.0], [5.0, 5.0]])
    q_o = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    assert torch.allclose(dqn_targets(r, done, q_t, q_o, 0.5), torch.tensor([1.0, 1.0]))   # a*=1 -> 0
    assert torch.allclose(dqn_targets(r, done, q_t, None, 0.5), torch.tensor([6.0, 1.0]))  # a*=0 -> 10


def loss_of(policy, b):
    out = policy.learn_mode.update(batch=b)
    return out['default_policy']['total_loss'].peek()


def test_loss_uses_nstep_discount_truncation_and_weights(small_dqn_cfg):
    cfg = small_dqn_cfg(truncation_as_terminal=False, double_dqn=False)
    pol = DQNPolicy(cfg, model=ConstQ((1.0, 2.0)))
    # Q(s,0)=1, max Q(s')=2: target = 1 + 0.97**k * 2 * (1 - done)
    b = batch(2, nstep=torch.tensor([1, 3]), terminated=torch.tensor([False, False]))
    exp = np.mean([(1 - (1 + 0.97 * 2)) ** 2, (1 - (1 + 0.97 ** 3 * 2)) ** 2])
    assert loss_of(pol, b) == pytest.approx(exp, rel=1e-5)

    pol = DQNPolicy(cfg, model=ConstQ((1.0, 2.0)))
    b = batch(2, terminated=torch.tensor([True, False]), truncated=torch.tensor([False, True]))
    exp = np.mean([0.0, (1 - (1 + 0.97 * 2)) ** 2])  # truncation bootstraps
    assert loss_of(pol, b) == pytest.approx(exp, rel=1e-5)

    cfg2 = small_dqn_cfg(truncation_as_terminal=True, double_dqn=False)
    pol = DQNPolicy(cfg2, model=ConstQ((1.0, 2.0)))
    assert loss_of(pol, b) == pytest.approx(0.0, abs=1e-7)  # both ends terminal: target = r = 1 = Q

    pol = DQNPolicy(cfg, model=ConstQ((1.0, 2.0)))
    b = batch(2, weight=torch.tensor([0.0, 2.0]), reward=torch.tensor([0.0, 0.0]),
              terminated=torch.tensor([True, True]))
    assert loss_of(pol, b) == pytest.approx((0 + 2 * 1.0) / 2, rel=1e-5)
    pr = pol.learn_mode.last_outputs['default_policy']['priority']
    assert torch.allclose(pr, torch.tensor([1.0, 1.0]))


def test_nstep_config_without_nstep_column_is_an_error():
    cfg = compile_config({'policy': {'nstep': 3, 'model': {'obs_shape': 4, 'action_shape': 2}}})
    with pytest.raises(ValueError, match='nstep_reward_enhancer'):
        DQNPolicy(cfg).learn_mode.update(batch=batch())


def test_huber_loss():
    cfg = compile_config({'policy': {'learn': {'loss': 'huber', 'double_dqn': False}}})
    pol = DQNPolicy(cfg, model=ConstQ((1.0, 2.0)), action_shape=2)
    b = batch(1, reward=torch.tensor([4.0]), terminated=torch.tensor([True]))
    assert loss_of(pol, b) == pytest.approx(2.5)  # |td| = 3 -> 3 - 0.5


def test_learning_reduces_loss_on_fixed_batch_and_accepts_trees(small_dqn_cfg):
    torch.manual_seed(0)
    pol = DQNPolicy(small_dqn_cfg(), seed=0)
    b = batch(64, terminated=torch.ones(64, dtype=torch.bool), reward=torch.randn(64),
              action=torch.randint(0, 2, (64,)))
    first = loss_of(pol, to_tree(b))
    for _ in range(80):
        last = loss_of(pol, to_tree(b))
    assert last < 0.5 * first
    assert pol.learn_mode.train_iter == 81


def test_hard_and_soft_target_updates(small_dqn_cfg):
    pol = DQNPolicy(small_dqn_cfg(target_update_freq=3), seed=0)
    L = pol.learn_mode
    t0 = copy.deepcopy(L.target_model.state_dict())
    for i in range(2):
        L.update(batch=batch())
    assert all(torch.equal(t0[k], v) for k, v in L.target_model.state_dict().items())
    L.update(batch=batch())
    online = L.model.state_dict()
    assert all(torch.equal(online[k], v) for k, v in L.target_model.state_dict().items())

    pol = DQNPolicy(small_dqn_cfg(target_update_type='soft', target_theta=0.25), seed=0)
    L = pol.learn_mode
    before = [p.clone() for p in L.target_model.parameters()]
    L.update(batch=batch())
    for b_, t, o in zip(before, L.target_model.parameters(), L.model.parameters()):
        assert torch.allclose(t, 0.75 * b_ + 0.25 * o, atol=1e-6)


def test_grad_clip_is_applied(small_dqn_cfg):
    pol = DQNPolicy(small_dqn_cfg(grad_clip=1e-3, learning_rate=1.0), model=ConstQ((0.0, 0.0)), action_shape=2,
                    )
    L = pol.learn_mode
    assert L.grad_clip == 1e-3
    b = batch(8, reward=torch.full((8,), 100.0), terminated=torch.ones(8, dtype=torch.bool))
    L.optimizers['default_policy'] = torch.optim.SGD(L.model.parameters(), lr=1.0)
    L.update(batch=b)
    total = sum(p.detach().abs().sum() for p in L.model.parameters())
    assert float(total) <= 1e-3 * 2 + 1e-6  # one SGD step of a clipped gradient moves little


def test_collect_and_eval_modes(small_dqn_cfg):
    pol = DQNPolicy(small_dqn_cfg(), model=ConstQ((1.0, 2.0)), seed=0)
    obs = np.zeros((50, 4), np.float32)
    assert (pol.eval_mode.forward(obs) == 1).all()
    assert (pol.collect_mode.forward(obs, eps=0.0) == 1).all()
    acts = pol.collect_mode.forward(obs, eps=1.0)
    assert acts.shape == (50,) and set(acts.tolist()) == {0, 1}
    assert pol.collect_mode.forward(torch.zeros(3, 4, dtype=torch.float64)).dtype == np.int64


def test_state_dict_roundtrip_is_weights_only_loadable(small_dqn_cfg):
    pol = DQNPolicy(small_dqn_cfg(target_update_freq=2), seed=0)
    for _ in range(3):
        pol.learn_mode.update(batch=batch())
    buf = io.BytesIO()
    torch.save(pol.state_dict(), buf)
    buf.seek(0)
    sd = torch.load(buf, weights_only=True)
    other = DQNPolicy(small_dqn_cfg(target_update_freq=2), seed=1)
    x = torch.randn(5, 4)
    assert not torch.allclose(other.model(x), pol.model(x))
    other.load_state_dict(sd)  # the learner part waits until learn_mode is built
    assert torch.allclose(other.model(x), pol.model(x))
    L2 = other.learn_mode
    assert L2.train_iter == 3
    assert torch.allclose(L2.target_model(x), pol.learn_mode.target_model(x))
    assert L2.optimizer.state_dict()['state'].keys() == pol.learn_mode.optimizer.state_dict()['state'].keys()
    with pytest.raises(KeyError):
        other.load_state_dict({'weights': 1})


def test_missing_shapes_error():
    with pytest.raises(ValueError, match='obs_shape'):
        DQNPolicy(compile_config({}))
