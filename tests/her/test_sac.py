"""SAC on the Learner: module separation, target updates, modes, and a one-step task it must solve."""
import numpy as np
import pytest
import torch

from pipeline.config import merge_config
from pipeline.policy.sac import SACPolicy, sac_default_config


def make_policy(**learn):
    cfg = merge_config(sac_default_config(), {"policy": {"learn": learn, "collect": {"random_collect_size": 4},
                                                         "model": {"actor_hidden_size_list": [32, 32],
                                                                   "critic_hidden_size_list": [32, 32]}}})
    return SACPolicy(cfg, obs_shape=3, action_shape=2, seed=0)


def batch(n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(n, 3, generator=g), "action": torch.rand(n, 2, generator=g) * 2 - 1,
            "reward": torch.randn(n, generator=g), "next_obs": torch.randn(n, 3, generator=g),
            "terminated": torch.zeros(n, dtype=torch.bool)}


def test_update_trains_all_modules_and_soft_updates_target():
    pol = make_policy(target_theta=0.5)
    lm = pol.learn_mode
    assert set(lm.modules) == {"actor", "critic", "alpha"}
    actor0 = [p.detach().clone() for p in pol.actor.parameters()]
    critic0 = [p.detach().clone() for p in pol.critic.parameters()]
    target0 = [p.detach().clone() for p in lm.target_critic.parameters()]
    alpha0 = lm.alpha.item()
    res = lm.update(batch=batch())
    assert {"actor", "critic", "alpha", "__all_modules__"} <= set(res)
    assert all(not torch.equal(a, b) for a, b in zip(actor0, pol.actor.parameters()))
    assert all(not torch.equal(a, b) for a, b in zip(critic0, pol.critic.parameters()))
    assert lm.alpha.item() != alpha0
    for t0, c, t in zip(target0, pol.critic.parameters(), lm.target_critic.parameters()):
        assert torch.allclose(t, t0 + 0.5 * (c.detach() - t0), atol=1e-6)
    assert lm.train_iter == 1


def test_actor_loss_does_not_reach_the_critic():
    pol = make_policy()
    lm = pol.learn_mode
    b = batch()
    losses = lm.compute_losses({m: b for m in lm.modules}, {})
    for p in pol.critic.parameters():
        p.grad = None
    losses["actor"]()["total_loss"].backward()
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in pol.critic.parameters())
    assert any(p.grad is not None for p in pol.actor.parameters())
    for p in pol.actor.parameters():
        p.grad = None
    losses["critic"]["total_loss"].backward()
    assert all(p.grad is None for p in pol.actor.parameters())


def test_actor_loss_is_taken_against_the_critic_after_its_step():
    """SB3's order: the critic (and temperature) step, then the actor's loss is computed with the new critic."""
    pol = make_policy()
    lm = pol.learn_mode
    b = batch()
    seen = []
    real = pol.critic.forward

    def spy(obs, action):
        seen.append([p.detach().clone() for p in pol.critic.parameters()])
        return real(obs, action)

    before = [p.detach().clone() for p in pol.critic.parameters()]
    pol.critic.forward = spy
    try:
        lm.update(batch=b)
    finally:
        del pol.critic.forward
    after = [p.detach().clone() for p in pol.critic.parameters()]
    assert not all(torch.equal(x, y) for x, y in zip(before, after))
    # the critic is called twice in the step: its own loss (old weights), then the actor's (new weights)
    assert len(seen) == 2
    assert all(torch.equal(x, y) for x, y in zip(seen[0], before))
    assert all(torch.equal(x, y) for x, y in zip(seen[1], after))


def test_modes_shapes_and_random_warmup():
    pol = make_policy()
    obs = np.zeros((3, 3), np.float32)
    a1 = pol.collect_mode.forward(obs, eps=0.3)  # first 4 actions random (3 here), extra kwargs ignored
    assert a1.shape == (3, 2) and a1.dtype == np.float32 and np.abs(a1).max() <= 1
    a2 = pol.collect_mode.forward(obs)
    a3 = pol.collect_mode.forward(obs)
    assert a2.shape == (3, 2) and np.abs(a3).max() <= 1
    e = pol.eval_mode.forward(obs)
    np.testing.assert_array_equal(e, pol.eval_mode.forward(obs))  # deterministic
    sd = pol.state_dict()
    other = make_policy()
    other.load_state_dict(sd)
    np.testing.assert_allclose(other.eval_mode.forward(obs), e)
    with pytest.raises(KeyError, match="SACPolicy"):
        other.load_state_dict({"model": {}})


def test_sac_solves_a_one_step_task():
    torch.manual_seed(0)
    pol = make_policy(learning_rate_actor=3e-3, learning_rate_critic=3e-3, init_alpha=0.05)
    lm = pol.learn_mode
    g = torch.Generator().manual_seed(1)
    target = torch.tensor([0.8, -0.6])
    probe = np.random.default_rng(0).normal(size=(32, 3)).astype(np.float32)
    err0 = np.abs(pol.eval_mode.forward(probe).mean(0) - target.numpy()).max()
    for i in range(150):
        obs = torch.randn(64, 3, generator=g)
        act = torch.rand(64, 2, generator=g) * 2 - 1
        rew = -(act - target).pow(2).sum(-1)
        lm.update(batch={"obs": obs, "action": act, "reward": rew, "next_obs": obs,
                         "terminated": torch.ones(64, dtype=torch.bool)})
    err = np.abs(pol.eval_mode.forward(probe).mean(0) - target.numpy()).max()
    assert err0 > 0.5 and err < 0.3
