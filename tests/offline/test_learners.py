"""BC, discrete CQL and IQL: losses on a tiny fixed batch (shapes, values, decreasing), configs, eval modes."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from middleware.functional.trainer import flatten_update_result
from pipeline.config import ConfigError, compile_config

from offline_helpers import make_columns


def _batch(discrete=True, n=64, act_dim=2):
    cols = make_columns((n // 2, n - n // 2), discrete=discrete, act_dim=act_dim)
    cols['obs'][:, 0] /= n  # keep the row number feature small
    return {k: torch.as_tensor(np.asarray(v)) for k, v in cols.items()}


def _losses(learner, batch, n):
    return [flatten_update_result(learner.update(batch=batch), learner) for _ in range(n)]


@pytest.mark.parametrize('discrete', [True, False])
def test_bc_loss_decreases_and_eval_shapes(discrete):
    from pipeline.offline.bc import BCPolicy

    cfg = compile_config({'policy': {'model': {'action_type': 'discrete' if discrete else 'continuous',
                                               'hidden_size_list': [64, 64]},
                                     'learn': {'learning_rate': 5e-3}}}, 'bc')
    pol = BCPolicy(cfg, obs_shape=4, action_shape=2, seed=0)
    b = _batch(discrete)
    out = _losses(pol.learn_mode, b, 150)
    assert out[-1]['total_loss'] < 0.5 * out[0]['total_loss']
    if discrete:
        assert out[0]['total_loss'] == pytest.approx(np.log(2), abs=0.15)  # ~uniform logits at init
        assert out[-1]['accuracy'] > 0.8
    act = pol.eval_mode(np.zeros((3, 4), np.float32))
    assert act.shape == ((3,) if discrete else (3, 2))
    if not discrete:
        assert np.all(np.abs(act) <= 1)


def test_cql_penalty_values():
    from pipeline.offline.cql import cql_penalty

    q = torch.tensor([[0.0, 0.0], [5.0, -5.0]])
    pen = cql_penalty(q, torch.tensor([0, 1]))
    assert pen.shape == (2,)
    assert pen[0].item() == pytest.approx(np.log(2), abs=1e-6)
    assert pen[1].item() == pytest.approx(10.0, abs=1e-3)
    assert cql_penalty(q, torch.tensor([0, 0]))[1].item() == pytest.approx(0.0, abs=1e-3)


def test_cql_total_is_td_plus_alpha_penalty_and_decreases():
    from pipeline.offline.cql import DiscreteCQLPolicy

    # discount 0: the TD target is the reward (fixed), so the total loss must go down
    cfg = compile_config({'policy': {'discount_factor': 0.0, 'learn': {'cql_alpha': 2.0, 'learning_rate': 5e-3},
                                     'model': {'encoder_hidden_size_list': [64, 64]}}}, 'cql')
    pol = DiscreteCQLPolicy(cfg, obs_shape=4, action_shape=2, seed=0)
    b = _batch()
    out = _losses(pol.learn_mode, b, 150)
    first = out[0]
    assert first['total_loss'] == pytest.approx(first['td_loss'] + 2.0 * first['cql_loss'], rel=1e-5)
    assert first['cql_loss'] > 0 and out[-1]['cql_loss'] < first['cql_loss']
    assert out[-1]['total_loss'] < first['total_loss']
    assert pol.learn_mode.last_outputs['default_policy']['priority'].shape == (64,)
    # the penalty moves Q towards the dataset's actions: the greedy action agrees with them more often
    q = pol.model(b['obs'])
    assert (q.argmax(-1) == b['action']).float().mean() > 0.7


def test_cql_alpha_zero_is_dqn_loss():
    from pipeline.offline.cql import DiscreteCQLPolicy
    from pipeline.policy import DQNPolicy

    b = _batch()
    outs = []
    for cls, algo in ((DiscreteCQLPolicy, 'cql'), (DQNPolicy, 'dqn')):
        learn = {'truncation_as_terminal': False, **({'cql_alpha': 0.0} if algo == 'cql' else {})}
        cfg = compile_config({'policy': {'learn': learn,
                                         'model': {'encoder_hidden_size_list': [16]}}}, algo)
        pol = cls(cfg, obs_shape=4, action_shape=2, seed=3)
        outs.append(flatten_update_result(pol.learn_mode.update(batch=b))['total_loss'])
    assert outs[0] == pytest.approx(outs[1], rel=1e-6)


def test_iql_losses_shapes_and_decrease():
    from pipeline.offline.iql import IQLPolicy, expectile_loss

    d = torch.tensor([-1.0, 2.0])
    assert expectile_loss(d, 0.7).tolist() == pytest.approx([0.3, 0.7 * 4])
    # discount 0: the critic's target is the reward, a fixed target its loss must approach
    cfg = compile_config({'policy': {'discount_factor': 0.0, 'model': {'actor_hidden_size_list': [32, 32],
                                               'critic_hidden_size_list': [32, 32]},
                                     'learn': {'learning_rate_actor': 1e-3, 'learning_rate_critic': 1e-3,
                                               'learning_rate_value': 1e-3}}}, 'iql')
    pol = IQLPolicy(cfg, obs_shape=4, action_shape=3, seed=0)
    b = _batch(discrete=False, act_dim=3)
    with torch.no_grad():
        ll0 = pol.actor.log_prob(b['obs'], b['action']).mean().item()
    out = _losses(pol.learn_mode, b, 100)
    with torch.no_grad():
        ll1 = pol.actor.log_prob(b['obs'], b['action']).mean().item()
    assert ll1 > ll0 + 0.1  # advantage-weighted regression raises the dataset actions' likelihood
    for mod in ('actor', 'critic', 'value'):
        assert set(out[0][mod]) >= {'total_loss', 'gradients_norm'}
    assert out[-1]['critic']['total_loss'] < 0.5 * out[0]['critic']['total_loss']
    assert np.isfinite(out[-1]['value']['total_loss']) and out[-1]['actor']['adv_weight'] <= 100.0
    act = pol.eval_mode(np.zeros((5, 4), np.float32))
    assert act.shape == (5, 3) and np.all(np.abs(act) <= 1)
    # the target critic follows the critic
    t = dict(pol.learn_mode.target_critic.named_parameters())
    c = dict(pol.critic.named_parameters())
    assert not torch.equal(t['q1.1.weight'], c['q1.1.weight'])


def test_offline_configs_refuse_bad_values():
    with pytest.raises(ConfigError, match='expectile'):
        compile_config({'policy': {'learn': {'expectile': 1.5}}}, 'iql')
    with pytest.raises(ConfigError, match='cql_alpha'):
        compile_config({'policy': {'learn': {'cql_alpha': -1}}}, 'cql')
    with pytest.raises(ConfigError, match='action_type'):
        compile_config({'policy': {'model': {'action_type': 'box'}}}, 'bc')


def test_continuous_cql_adds_the_conservative_term():
    from pipeline.offline.cql_continuous import ContinuousCQLPolicy

    cfg = compile_config({'policy': {'discount_factor': 0.0, 'learn': {'cql_alpha': 3.0, 'cql_n_actions': 4},
                                     'model': {'actor_hidden_size_list': [32, 32],
                                               'critic_hidden_size_list': [32, 32]}}}, 'cql_continuous')
    pol = ContinuousCQLPolicy(cfg, obs_shape=4, action_shape=2, seed=0)
    b = _batch(discrete=False)
    out = _losses(pol.learn_mode, b, 100)
    c0, c1 = out[0]['critic'], out[-1]['critic']
    assert c0['total_loss'] == pytest.approx(c0['sac_loss'] + 3.0 * c0['cql_loss'], rel=1e-5)
    assert c1['cql_loss'] < c0['cql_loss']
    # conservative: Q of the dataset's actions ends above Q of random actions at the same states
    with torch.no_grad():
        q_data = torch.min(*pol.critic(b['obs'], b['action'])).mean()
        q_rand = torch.min(*pol.critic(b['obs'], torch.rand_like(b['action']) * 2 - 1)).mean()
    assert q_data > q_rand
