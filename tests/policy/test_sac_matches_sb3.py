"""SACLearner's update against Stable-Baselines3's ``SAC.train``: the same weights, batch and Gaussian noise give
the same actor, critics, target critics and temperature after several updates (the benchmark compares the two
frameworks' SAC on MuJoCo; this pins that their updates are one algorithm, term by term)."""
import importlib.util
import math

import numpy as np
import pytest

torch = pytest.importorskip('torch')
pytestmark = pytest.mark.skipif(importlib.util.find_spec('stable_baselines3') is None,
                                reason="needs stable-baselines3 (pip install -e '.[bench]')")

OBS, ACT, HIDDEN, BATCH = 5, 2, [16, 16], 8


def _fixed_noise(shape):
    """The one 'standard normal' draw both frameworks get: fixed, varied values of the asked shape."""
    n = int(np.prod(shape))
    return torch.linspace(-1.7, 1.3, n).reshape(tuple(shape)) * torch.tensor([1.0, -0.6] * (n // 2)).reshape(tuple(shape))


def _sb3_model():
    import gymnasium as gym
    from stable_baselines3 import SAC
    from stable_baselines3.common.logger import configure

    env = gym.make('Pendulum-v1')
    env = gym.wrappers.TransformObservation(env, lambda o: np.concatenate([o, o[:2]]).astype(np.float32),
                                            gym.spaces.Box(-10, 10, (OBS,), np.float32))
    env = gym.wrappers.TransformAction(env, lambda a: a[:1], gym.spaces.Box(-1, 1, (ACT,), np.float32))
    model = SAC('MlpPolicy', env, learning_rate=3e-4, batch_size=BATCH, tau=0.005, gamma=0.99, ent_coef='auto_1.0',
                learning_starts=0, policy_kwargs={'net_arch': HIDDEN}, seed=0, device='cpu')
    model.set_logger(configure(None, []))
    return model


def _copy_weights(model, learner):
    """SB3's initial weights into the rlpipe networks (the same architecture, laid out differently)."""
    a, c = model.actor, model.critic
    sb3_actor = [m for m in a.latent_pi if isinstance(m, torch.nn.Linear)] + [a.mu, a.log_std]
    ours_actor = [m for m in learner.actor.body if isinstance(m, torch.nn.Linear)] + [learner.actor.mu, learner.actor.log_std]
    pairs = list(zip(ours_actor, sb3_actor))
    for ours, theirs in ((learner.critic, c), (learner.target_critic, model.critic_target)):
        for q_ours, q_theirs in ((ours.q1, theirs.qf0), (ours.q2, theirs.qf1)):
            pairs += zip([m for m in q_ours.modules() if isinstance(m, torch.nn.Linear)],
                         [m for m in q_theirs if isinstance(m, torch.nn.Linear)])
    with torch.no_grad():
        for ours, theirs in pairs:
            assert ours.weight.shape == theirs.weight.shape
            ours.weight.copy_(theirs.weight)
            ours.bias.copy_(theirs.bias)
    return pairs


def test_one_batch_gives_sb3s_weights_after_each_of_five_updates(monkeypatch):
    from stable_baselines3.common.type_aliases import ReplayBufferSamples

    from pipeline.config import compile_config
    from pipeline.policy.sac import SACPolicy

    model = _sb3_model()
    cfg = compile_config({'policy': {
        'discount_factor': 0.99, 'model': {'actor_hidden_size_list': HIDDEN, 'critic_hidden_size_list': HIDDEN},
        'learn': {'batch_size': BATCH, 'learning_rate_actor': 3e-4, 'learning_rate_critic': 3e-4,
                  'learning_rate_alpha': 3e-4, 'target_theta': 0.005, 'init_alpha': 1.0}}}, policy='sac')
    policy = SACPolicy(cfg, obs_shape=OBS, action_shape=ACT, seed=0, device='cpu')
    learner = policy.learn_mode
    pairs = _copy_weights(model, learner)

    g = torch.Generator().manual_seed(1)
    obs, next_obs = torch.randn(BATCH, OBS, generator=g), torch.randn(BATCH, OBS, generator=g)
    action = torch.rand(BATCH, ACT, generator=g) * 2 - 1
    reward = torch.randn(BATCH, generator=g)
    terminated = torch.tensor([False, True] + [False] * (BATCH - 2))
    samples = ReplayBufferSamples(obs, action, next_obs, terminated.float()[:, None], reward[:, None])
    monkeypatch.setattr(model.replay_buffer, 'sample', lambda *a, **k: samples)
    # both frameworks draw their reparameterisation noise here: SB3 through torch.distributions.Normal.rsample,
    # rlpipe through torch.randn_like
    monkeypatch.setattr(torch.distributions.normal, '_standard_normal', lambda shape, dtype, device: _fixed_noise(shape))
    monkeypatch.setattr(torch, 'randn_like', lambda x: _fixed_noise(x.shape))

    batch = {'obs': obs, 'action': action, 'next_obs': next_obs, 'reward': reward, 'terminated': terminated}
    for step in range(5):
        model.train(gradient_steps=1, batch_size=BATCH)
        out, theirs = learner.update(batch=batch), model.logger.name_to_value
        # the losses: rlpipe's critic loss sums the two critics' MSEs, SB3's halves that sum
        assert math.isclose(float(out['critic']['total_loss']), 2 * theirs['train/critic_loss'], rel_tol=1e-5)
        assert math.isclose(float(out['actor']['total_loss']), theirs['train/actor_loss'], rel_tol=1e-5)
        assert math.isclose(float(out['alpha']['total_loss']), theirs['train/ent_coef_loss'], rel_tol=1e-4, abs_tol=1e-8)
        assert math.isclose(float(out['actor']['alpha']), theirs['train/ent_coef'], rel_tol=1e-6)
        for ours, theirs in pairs:
            np.testing.assert_allclose(ours.weight.detach(), theirs.weight.detach(), rtol=1e-4, atol=1e-6,
                                       err_msg=f'update {step + 1}: {ours} differs from SB3')
            np.testing.assert_allclose(ours.bias.detach(), theirs.bias.detach(), rtol=1e-4, atol=1e-6)
        assert math.isclose(float(learner.alpha_mod.log_alpha.detach()), float(model.log_ent_coef.detach()),
                            rel_tol=1e-4, abs_tol=1e-7)
    # the weights moved: the comparison above is between trained networks, not the copied start
    assert float(learner.alpha_mod.log_alpha.detach()) < -1e-3
