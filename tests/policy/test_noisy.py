import math

import numpy as np
import pytest
import torch

from pipeline.policy.conv import AtariQNetwork
from pipeline.policy.noisy import NoisyLinear, has_noise, noise_off, noisy_layers


def test_noise_off_is_the_mean_linear_layer_and_noise_on_varies():
    torch.manual_seed(0)
    layer = NoisyLinear(5, 3, sigma0=0.5)
    x = torch.randn(4, 5)
    mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)
    with noise_off(layer):
        torch.testing.assert_close(layer(x), mean)
    assert layer.noisy
    a, b = layer(x), layer(x)
    assert not torch.allclose(a, b) and not torch.allclose(a, mean)


def test_factorised_noise_has_the_expected_mean_and_variance():
    # y_j = mu_j.x + b_j + f(e_out_j) (sum_i sigma_ji x_i f(e_in_i) + sigma_b_j), f(v) = sign(v) sqrt|v|:
    # E[y_j] = mu_j.x + b_j and Var[y_j] = c (c sum_i sigma_ji^2 x_i^2 + sigma_b_j^2), c = E|v| = sqrt(2/pi)
    torch.manual_seed(1)
    layer = NoisyLinear(6, 2, sigma0=0.5)
    with torch.no_grad():
        layer.weight_sigma.uniform_(0.1, 0.6)
        layer.bias_sigma.uniform_(0.1, 0.6)
    x = torch.randn(1, 6)
    with torch.no_grad():
        ys = torch.cat([layer(x) for _ in range(40_000)])
        mean = torch.nn.functional.linear(x, layer.weight_mu, layer.bias_mu)[0]
        c = math.sqrt(2 / math.pi)
        var = c * (c * (layer.weight_sigma ** 2 * x ** 2).sum(1) + layer.bias_sigma ** 2)
    torch.testing.assert_close(ys.mean(0), mean, atol=4 * (var / 40_000).sqrt().max().item(), rtol=0)
    torch.testing.assert_close(ys.var(0), var, rtol=0.05, atol=0)


def test_rows_of_a_batch_share_one_draw_and_sigma_learns():
    torch.manual_seed(2)
    layer = NoisyLinear(4, 3, sigma0=0.1)
    row = torch.randn(1, 4)
    y = layer(row.expand(8, 4))
    assert torch.allclose(y, y[:1].expand(8, 3))           # one noise sample per forward pass
    y.sum().backward()
    assert layer.weight_sigma.grad is not None and layer.weight_sigma.grad.abs().sum() > 0
    assert layer.bias_sigma.grad.abs().sum() > 0
    torch.testing.assert_close(layer.weight_sigma.detach(), torch.full((3, 4), 0.1 / 2))   # sigma0 / sqrt(in)


def test_noise_off_restores_the_layers_after_an_exception():
    net = torch.nn.Sequential(NoisyLinear(3, 3), torch.nn.ReLU(), NoisyLinear(3, 2))
    net[2].noisy = False                                     # a layer switched off by hand stays off
    with pytest.raises(RuntimeError):
        with noise_off(net):
            assert not any(m.noisy for m in noisy_layers(net))
            raise RuntimeError('boom')
    assert [m.noisy for m in noisy_layers(net)] == [True, False]


def test_bad_arguments_say_what_to_pass():
    with pytest.raises(ValueError, match='sigma0 > 0'):
        NoisyLinear(3, 2, sigma0=0.0)
    with pytest.raises(ValueError, match='in_features >= 1'):
        NoisyLinear(0, 2)
    with pytest.raises(ValueError, match='noisy_std must be > 0'):
        AtariQNetwork(4, noisy_std=-0.1)


@pytest.mark.parametrize('dueling', [False, True])
def test_atari_network_noisy_head_replaces_only_the_head_layers(dueling):
    torch.manual_seed(0)
    plain = AtariQNetwork(6, dueling=dueling, encoder='der')
    torch.manual_seed(0)
    noisy = AtariQNetwork(6, dueling=dueling, encoder='der', noisy_std=0.1)
    assert not has_noise(plain) and has_noise(noisy)
    n_linear = sum(p.numel() for m in plain.modules() if isinstance(m, torch.nn.Linear) for p in m.parameters())
    n_plain = sum(p.numel() for p in plain.parameters())
    assert sum(p.numel() for p in noisy.parameters()) == n_plain + n_linear   # a sigma per weight and bias
    assert len(noisy_layers(noisy)) == (4 if dueling else 2)
    for a, b in zip(plain.encoder.parameters(), noisy.encoder.parameters()):
        torch.testing.assert_close(a, b)                      # the encoder is built the same way


def test_dqn_policy_explores_with_noise_and_evaluates_on_the_mean_weights():
    from pipeline.config import compile_config
    from pipeline.policy import DQNPolicy

    cfg = compile_config({'policy': {'learn': {'batch_size': 4}}}, policy='dqn')
    policy = DQNPolicy(cfg, model=AtariQNetwork(6, dueling=True, encoder='der', noisy_std=2.0), seed=0)
    obs = np.random.default_rng(0).integers(0, 256, (64, 4, 84, 84), dtype=np.uint8)
    evals = [policy.eval_mode.forward(obs) for _ in range(3)]
    assert all((e == evals[0]).all() for e in evals)       # mean weights: the same greedy actions
    with torch.no_grad():
        layers = noisy_layers(policy.model)
        for m in layers:
            m.noisy = False
        mean_actions = policy.model(torch.from_numpy(obs).float()).argmax(-1).numpy()
        for m in layers:
            m.noisy = True
    assert (evals[0] == mean_actions).all()
    collects = [policy.collect_mode.forward(obs, eps=0.0) for _ in range(3)]
    assert any((c != collects[0]).any() for c in collects[1:])   # noise: actions change between calls
    assert all(m.noisy for m in layers)                    # eval mode set the noise back on
    batch = {'obs': torch.from_numpy(obs[:4]), 'action': torch.tensor([0, 1, 2, 3]), 'reward': torch.ones(4),
             'next_obs': torch.from_numpy(obs[1:5]), 'terminated': torch.zeros(4, dtype=torch.bool)}
    sigma = [m.weight_sigma.detach().clone() for m in layers]
    policy.learn_mode.update(batch=batch)
    assert any(not torch.equal(s, m.weight_sigma) for s, m in zip(sigma, layers))
