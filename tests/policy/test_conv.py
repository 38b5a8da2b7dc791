import numpy as np
import pytest
import torch

from pipeline.policy.conv import AtariQNetwork, NatureCNN


def test_nature_cnn_shapes_scaling_and_errors():
    enc = NatureCNN(4, 512)
    x = torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8)
    f = enc(x)
    assert f.shape == (3, 512) and enc.output_dim == 512
    torch.testing.assert_close(enc(x.float()), f)        # uint8 and float pixel values agree
    assert sum(p.numel() for p in enc.conv.parameters()) == 32 * 4 * 64 + 32 + 64 * 32 * 16 + 64 + 64 * 64 * 9 + 64
    assert enc.fc[0].in_features == 64 * 7 * 7          # 84 -> 20 -> 9 -> 7
    with pytest.raises(ValueError, match=r'\[B, 4, H, W\]'):
        enc(torch.zeros(2, 84, 84))


@pytest.mark.parametrize('dueling', [False, True])
def test_atari_q_network_learns_to_tell_frames_apart(dueling):
    torch.manual_seed(0)
    net = AtariQNetwork(3, dueling=dueling)
    opt = torch.optim.Adam(net.parameters(), lr=2e-3)
    x = torch.zeros(2, 4, 84, 84, dtype=torch.uint8)
    x[1, :, 20:40, 20:40] = 255
    target = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    for _ in range(25):
        loss = torch.nn.functional.mse_loss(net(x), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert net(x).argmax(-1).tolist() == [0, 2] and loss.item() < 0.05


def test_dqn_policy_takes_the_atari_network():
    from pipeline.config import compile_config
    from pipeline.policy import DQNPolicy
    cfg = compile_config({'policy': {'learn': {'batch_size': 4}}}, policy='dqn')
    policy = DQNPolicy(cfg, model=AtariQNetwork(6), seed=0)
    obs = torch.randint(0, 256, (5, 4, 84, 84), dtype=torch.uint8).numpy()
    acts = policy.collect_mode.forward(obs, eps=0.0)
    assert acts.shape == (5,) and 0 <= acts.min() and acts.max() < 6
    batch = {'obs': torch.from_numpy(obs[:4]), 'action': torch.tensor([0, 1, 2, 3]),
             'reward': torch.ones(4), 'next_obs': torch.from_numpy(obs[1:]), 'terminated': torch.zeros(4, dtype=torch.bool)}
    before = [p.clone() for p in policy.model.parameters()]
    policy.learn_mode.update(batch=batch)
    assert any(not torch.equal(a, b) for a, b in zip(before, policy.model.parameters()))


def test_atari_actor_critic_plugs_into_ppo():
    import gymnasium as gym
    from pipeline.policy.conv import AtariActorCritic
    from pipeline.policy.ppo import PPOPolicy, make_ppo_config
    obs_space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    model = AtariActorCritic(6)
    policy = PPOPolicy(make_ppo_config({}), obs_space, gym.spaces.Discrete(6), model=model, seed=0)
    obs = np.random.default_rng(0).integers(0, 256, (3, 4, 84, 84), dtype=np.uint8)
    out = policy.collect_mode.forward(obs)
    assert out['action'].shape == (3,) and out['value'].shape == (3,) and (out['logp'] <= 0).all()
    pi, v = model(torch.from_numpy(obs))
    assert pi.shape == (3, 6) and v.shape == (3,)
    assert policy.eval_mode.forward(obs).shape == (3,)


def test_nature_cnn_at_half_width_and_linear_dueling_branches():
    enc = NatureCNN(4, 256, channels=(16, 32, 32))
    assert enc(torch.zeros(2, 4, 84, 84)).shape == (2, 256) and enc.fc[0].in_features == 32 * 7 * 7
    with pytest.raises(ValueError, match='three positive ints'):
        NatureCNN(4, 256, channels=(16, 32))
    net = AtariQNetwork(6, dueling=True, feature_dim=256, hidden=0, encoder_channels=(16, 32, 32))
    assert isinstance(net.adv, torch.nn.Linear) and net.adv.in_features == 256 and net.value.out_features == 1
    q = net(torch.randint(0, 256, (3, 4, 84, 84), dtype=torch.uint8))
    a = net.adv(net.encoder(torch.zeros(1, 4, 84, 84)))
    assert q.shape == (3, 6) and a.shape == (1, 6)
    full = sum(p.numel() for p in AtariQNetwork(6, dueling=True, hidden=0).parameters())
    assert sum(p.numel() for p in net.parameters()) < full / 3
    with pytest.raises(ValueError, match='hidden must be an int >= 0'):
        AtariQNetwork(6, dueling=True, hidden=-1)


def test_xavier_init_sets_every_plain_layer_and_keeps_noisy_ones():
    torch.manual_seed(0)
    net = AtariQNetwork(3, dueling=True, encoder='nature', encoder_channels=(16, 32, 32), feature_dim=256,
                        hidden=0, init='xavier')
    layers = [m for m in net.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))]
    assert len(layers) == 6                                    # 3 convs, the feature layer, value, advantage
    for m in layers:
        fan_in, fan_out = torch.nn.init._calculate_fan_in_and_fan_out(m.weight)
        bound = (6.0 / (fan_in + fan_out)) ** 0.5
        assert torch.all(m.bias == 0)
        assert m.weight.abs().max() <= bound and m.weight.abs().max() > 0.9 * bound
    default = AtariQNetwork(3, dueling=True, encoder='nature', encoder_channels=(16, 32, 32), feature_dim=256,
                            hidden=0)
    assert not torch.all(default.adv.bias == 0)                # PyTorch's default draws biases
    noisy = AtariQNetwork(3, dueling=True, encoder='der', noisy_std=0.1, init='xavier')
    assert noisy.adv[0].bias_mu.abs().sum() > 0                # noisy layers keep their own init
    with pytest.raises(ValueError, match="init must be 'torch' or 'xavier'"):
        AtariQNetwork(3, init='he')


def test_same_padding_follows_the_tensorflow_rule_and_ends_at_dopamines_11x11_grid():
    from pipeline.policy.conv import _same_padding
    assert _same_padding(84, 8, 4) == (2, 2) and _same_padding(21, 4, 2) == (1, 2) and _same_padding(11, 3, 1) == (1, 1)
    enc = NatureCNN(4, 256, channels=(16, 32, 32), padding='same')
    assert enc.fc[0].in_features == 32 * 11 * 11          # 84 -> 21 -> 11 -> 11
    assert enc(torch.zeros(2, 4, 84, 84)).shape == (2, 256)
    valid = NatureCNN(4, 256, channels=(16, 32, 32))
    assert [n for n, _ in valid.named_parameters()][:2] == ['conv.0.weight', 'conv.0.bias']   # the stored runs' names
    with pytest.raises(ValueError, match="padding must be 'valid' or 'same'"):
        NatureCNN(4, 256, padding='SAME')
    with pytest.raises(ValueError, match="encoder=.der. takes none of them"):
        AtariQNetwork(6, encoder='der', padding='same')


@pytest.mark.parametrize('padding', ['valid', 'same'])
def test_channels_last_changes_the_memory_format_not_the_q_values(padding):
    torch.manual_seed(0)
    plain = AtariQNetwork(6, dueling=True, feature_dim=256, hidden=0, encoder_channels=(16, 32, 32), padding=padding)
    torch.manual_seed(0)
    nhwc = AtariQNetwork(6, dueling=True, feature_dim=256, hidden=0, encoder_channels=(16, 32, 32), padding=padding,
                         channels_last=True)
    assert all(m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous()
               for m in nhwc.modules() if isinstance(m, torch.nn.Conv2d))
    x = torch.randint(0, 256, (4, 4, 84, 84), dtype=torch.uint8)
    torch.testing.assert_close(nhwc(x), plain(x), rtol=1e-5, atol=1e-6)
    plain(x).sum().backward()
    nhwc(x).sum().backward()
    for a, b in zip(plain.parameters(), nhwc.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5)


def test_a_bfloat16_encoder_keeps_float32_weights_and_outputs_and_stays_close_to_float32():
    torch.manual_seed(0)
    exact = AtariQNetwork(6, dueling=True, feature_dim=256, hidden=0, encoder_channels=(16, 32, 32), padding='same')
    torch.manual_seed(0)
    mixed = AtariQNetwork(6, dueling=True, feature_dim=256, hidden=0, encoder_channels=(16, 32, 32), padding='same',
                          channels_last=True, bfloat16=True)
    x = torch.randint(0, 256, (8, 4, 84, 84), dtype=torch.uint8)
    q_exact, q_mixed = exact(x), mixed(x)
    assert q_mixed.dtype == torch.float32 and all(p.dtype == torch.float32 for p in mixed.parameters())
    assert not torch.equal(q_mixed, q_exact)                         # the products were bfloat16
    torch.testing.assert_close(q_mixed, q_exact, rtol=0.05, atol=0.01)
    q_exact.square().sum().backward()
    q_mixed.square().sum().backward()
    for (name, a), b in zip(exact.named_parameters(), mixed.parameters()):
        assert b.grad is not None and b.grad.dtype == torch.float32, name
        cos = torch.nn.functional.cosine_similarity(a.grad.flatten(), b.grad.flatten(), dim=0)
        assert cos > 0.98, (name, float(cos))
    with pytest.raises(ValueError, match="encoder='der' takes none of them"):
        AtariQNetwork(6, encoder='der', bfloat16=True)
