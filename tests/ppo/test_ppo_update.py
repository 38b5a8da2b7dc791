"""PPO's trainer calls Learner.update once per rollout with the configured epochs and minibatches;
schedules, KL early stop, and the running statistics saved in checkpoints."""
import gymnasium as gym
import numpy as np
import pytest
import torch

from contexts import OnlineRLContext
from middleware import OnPolicyTrainer, RolloutCollector, gae_estimator
from pipeline.checkpoint import load_checkpoint, save_checkpoint
from pipeline.envs import EnvManager
from pipeline.learner import Learner
from pipeline.policy.ppo import PPOPolicy, make_ppo_config
from pipeline.policy.ppo_model import RunningMeanStd


def setup(n_steps=8, env_num=2, **learn):
    cfg = make_ppo_config({'policy': {'collect': {'n_steps': n_steps}, 'learn': learn}})
    env = EnvManager('CartPole-v1', env_num, seed=0)
    policy = PPOPolicy(cfg, env.observation_space, env.action_space, seed=0)
    return cfg, env, policy


def one_round(cfg, env, policy, ctx=None):
    ctx = ctx or OnlineRLContext()
    RolloutCollector(cfg, policy.collect_mode, env)(ctx)
    gae_estimator(cfg, policy.model)(ctx)
    OnPolicyTrainer(cfg, policy.learn_mode)(ctx)
    return ctx


def test_one_update_call_with_configured_epochs_and_minibatches(monkeypatch):
    cfg, env, policy = setup(n_steps=8, env_num=2, n_epochs=3, batch_size=4)  # 16 rows
    calls, minibatches = [], []
    orig_update, orig_forward = Learner.update, type(policy.learn_mode).forward_train

    def spy_update(self, *a, **kw):
        calls.append(kw)
        return orig_update(self, *a, **kw)

    def spy_forward(self, mid, batch):
        minibatches.append(batch['obs'].shape[0])
        return orig_forward(self, mid, batch)

    monkeypatch.setattr(Learner, 'update', spy_update)
    monkeypatch.setattr(type(policy.learn_mode), 'forward_train', spy_forward)
    ctx = one_round(cfg, env, policy)
    assert len(calls) == 1
    kw = calls[0]
    assert kw['minibatch_size'] == 4 and kw['num_epochs'] == 3 and kw['shuffle_batch_per_epoch'] is True
    assert kw['batch']['obs'].shape == (16, 4) and kw['timesteps'] == {'num_env_steps_sampled_lifetime': 16}
    assert minibatches == [4] * 12  # 3 epochs x 16 rows / 4
    out = ctx.train_output[0]
    assert out['num_minibatch_updates'] == 12 and out['num_env_steps_trained'] == 48
    assert ctx.train_iter == 1
    for k in ('approx_kl', 'clip_fraction', 'policy_loss', 'value_loss', 'entropy', 'explained_variance'):
        assert np.isfinite(out[k]), k


def test_linear_lr_and_clip_schedules():
    cfg, env, policy = setup(n_steps=8, env_num=2, total_env_steps=64, learning_rate=1e-3, clip_range=0.2)
    ctx = one_round(cfg, env, policy)  # evaluated at env step 16: 3/4 left
    assert ctx.train_output[0]['learning_rate'] == pytest.approx(0.75e-3)
    assert ctx.train_output[0]['clip_range'] == pytest.approx(0.15)
    cfg2, env2, policy2 = setup(lr_schedule='constant', clip_schedule='constant')
    ctx2 = one_round(cfg2, env2, policy2)
    assert ctx2.train_output[0]['learning_rate'] == pytest.approx(1e-3)
    assert ctx2.train_output[0]['clip_range'] == pytest.approx(0.2)


def test_kl_early_stop_ends_the_epochs():
    cfg, env, policy = setup(n_steps=16, env_num=2, n_epochs=10, batch_size=8, target_kl=1e-9)
    ctx = one_round(cfg, env, policy)
    # minibatch 1: ratio 1, KL 0 -> a step; minibatch 2 then differs -> stop without a step
    assert ctx.train_output[0]['num_minibatch_updates'] == 1
    assert ctx.train_output[0]['kl_early_stop'] == 1.0
    assert policy.learn_mode.kl_stops == 1
    cfg2, env2, policy2 = setup(n_steps=16, env_num=2, n_epochs=10, batch_size=8)
    assert one_round(cfg2, env2, policy2).train_output[0]['num_minibatch_updates'] == 40


def test_running_mean_std_merges_exactly():
    rng = np.random.default_rng(0)
    rms = RunningMeanStd((3,))
    chunks = [rng.normal(2.0, 3.0, size=(n, 3)) for n in (5, 17, 1, 40)]
    for c in chunks:
        rms.update(c)
    allx = np.concatenate(chunks)
    np.testing.assert_allclose(rms.mean.numpy(), allx.mean(0), rtol=1e-10)
    np.testing.assert_allclose(rms.var.numpy(), allx.var(0), rtol=1e-10)
    x = torch.tensor(allx[:4], dtype=torch.float32)
    expect = np.clip((allx[:4] - allx.mean(0)) / np.sqrt(allx.var(0) + 1e-8), -10, 10)
    np.testing.assert_allclose(rms.normalize(x).numpy(), expect, rtol=1e-5, atol=1e-5)


def test_normalisation_statistics_are_trained_with_and_saved(tmp_path):
    cfg, env, policy = setup(n_steps=8, env_num=2, normalize_reward=True)
    cfg.policy.model.normalize_obs = True
    policy = PPOPolicy(cfg, env.observation_space, env.action_space, seed=0)
    ctx = one_round(cfg, env, policy)
    obs_norm, ret_norm = policy.model.obs_norm, policy.model.ret_norm
    assert obs_norm.count.item() == 16 and ret_norm.count.item() == 16
    np.testing.assert_allclose(obs_norm.mean.numpy(), ctx.rollout['obs'].reshape(-1, 4).mean(0), rtol=1e-6)
    path = save_checkpoint(str(tmp_path / 'ppo.pth.tar'), policy, ctx)
    fresh = PPOPolicy(cfg, env.observation_space, env.action_space, seed=1)
    assert fresh.model.obs_norm.count.item() == 0
    load_checkpoint(path, fresh)  # weights_only load
    for name in ('mean', 'var', 'count'):
        torch.testing.assert_close(getattr(fresh.model.obs_norm, name), getattr(obs_norm, name))
        torch.testing.assert_close(getattr(fresh.model.ret_norm, name), getattr(ret_norm, name))
    obs = torch.randn(5, 4)
    torch.testing.assert_close(fresh.model(obs)[0], policy.model(obs)[0])  # same normalised inputs


def test_continuous_actions_are_clipped_for_the_env_only():
    cfg = make_ppo_config({'policy': {'model': {'log_std_init': 1.0}}})
    space = gym.spaces.Box(-0.5, 0.5, (2,), np.float32)
    policy = PPOPolicy(cfg, gym.spaces.Box(-1, 1, (3,), np.float32), space, seed=0)
    out = policy.collect_mode.forward(np.zeros((256, 3), np.float32))
    assert np.abs(out['action']).max() > 0.5 and np.abs(out['env_action']).max() <= 0.5
    np.testing.assert_allclose(out['env_action'], np.clip(out['action'], -0.5, 0.5))
    # log-probs are of the unclipped sample
    pi_out, _ = policy.model(torch.zeros(256, 3))
    from pipeline.policy.ppo_model import logp_entropy
    lp, _ = logp_entropy(pi_out, torch.from_numpy(out['action']), policy.model.log_std)
    np.testing.assert_allclose(out['logp'], lp.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert np.abs(policy.eval_mode.forward(np.zeros((4, 3), np.float32))).max() <= 0.5


def test_bad_config_values_are_reported():
    from pipeline.config import ConfigError
    with pytest.raises(ConfigError, match='n_epochs'):
        make_ppo_config({'policy': {'learn': {'n_epochs': 0, 'lr_schedule': 'cosine'}}})
    with pytest.raises(ConfigError, match='unknown key'):
        make_ppo_config({'policy': {'learn': {'n_epoch': 3}}})
