"""PPO's loss against a hand computation on tiny batches (discrete and continuous)."""
import math

import pytest
import torch

from pipeline.policy.ppo import ppo_loss


def hand_adv_norm(adv):
    n = len(adv)
    m = sum(adv) / n
    sd = math.sqrt(sum((a - m) ** 2 for a in adv) / (n - 1))
    return [(a - m) / (sd + 1e-8) for a in adv]


def hand_surrogate(logp, old_logp, adv, clip):
    terms = []
    for lp, olp, a in zip(logp, old_logp, adv):
        r = math.exp(lp - olp)
        terms.append(min(r * a, min(max(r, 1 - clip), 1 + clip) * a))
    return -sum(terms) / len(terms)


@pytest.mark.parametrize('clip_vf', [None, 0.1])
def test_discrete_loss_by_hand(clip_vf):
    logits = [[0.2, -0.4], [1.0, 0.0], [-0.3, 0.6]]
    action = [0, 1, 1]
    old_logp = [-0.5, -1.9, -0.2]
    adv = [1.0, -2.0, 0.5]
    value, old_value, ret = [0.3, -0.1, 0.8], [0.1, 0.2, 0.9], [1.0, 0.0, 0.5]
    batch = {'action': torch.tensor(action), 'logp': torch.tensor(old_logp), 'advantage': torch.tensor(adv),
             'value': torch.tensor(old_value), 'return': torch.tensor(ret)}
    out = ppo_loss(torch.tensor(logits), torch.tensor(value), batch, None, clip_range=0.2, clip_range_vf=clip_vf,
                   vf_coef=0.5, ent_coef=0.01, normalize_advantage=True)

    logp, ent = [], []
    for lg, a in zip(logits, action):
        lse = math.log(sum(math.exp(x) for x in lg))
        lps = [x - lse for x in lg]
        logp.append(lps[a])
        ent.append(-sum(math.exp(x) * x for x in lps))
    pg = hand_surrogate(logp, old_logp, hand_adv_norm(adv), 0.2)
    v_terms = []
    for v, ov, r in zip(value, old_value, ret):
        e = (v - r) ** 2
        if clip_vf is not None:
            vc = ov + min(max(v - ov, -clip_vf), clip_vf)
            e = max(e, (vc - r) ** 2)
        v_terms.append(e)
    vl = sum(v_terms) / 3
    entropy = sum(ent) / 3
    ratios = [math.exp(lp - o) for lp, o in zip(logp, old_logp)]
    kl = sum((r - 1) - math.log(r) for r in ratios) / 3
    cf = sum(abs(r - 1) > 0.2 for r in ratios) / 3

    assert out['policy_loss'].item() == pytest.approx(pg, rel=1e-5)
    assert out['value_loss'].item() == pytest.approx(vl, rel=1e-5)
    assert out['entropy'].item() == pytest.approx(entropy, rel=1e-5)
    assert out['total_loss'].item() == pytest.approx(pg + 0.5 * vl - 0.01 * entropy, rel=1e-5)
    assert out['approx_kl'].item() == pytest.approx(kl, rel=1e-4)
    assert out['clip_fraction'].item() == pytest.approx(cf)
    if clip_vf is not None:  # the clipped branch is active for at least one row here
        unclipped = sum((v - r) ** 2 for v, r in zip(value, ret)) / 3
        assert vl > unclipped


def test_continuous_loss_by_hand_without_adv_norm():
    mean = [[0.0, 1.0], [0.5, -0.5]]
    log_std = [-0.5, 0.2]
    action = [[0.3, 2.5], [0.4, -0.6]]  # unclipped samples
    old_logp = [-2.0, -1.0]
    adv = [0.7, -0.3]
    batch = {'action': torch.tensor(action), 'logp': torch.tensor(old_logp), 'advantage': torch.tensor(adv),
             'value': torch.zeros(2), 'return': torch.tensor([1.0, -1.0])}
    out = ppo_loss(torch.tensor(mean), torch.tensor([0.5, 0.0]), batch, torch.tensor(log_std), clip_range=0.3,
                   vf_coef=1.0, ent_coef=0.1, normalize_advantage=False)
    logp = []
    for mu, a in zip(mean, action):
        logp.append(sum(-0.5 * ((ai - mi) / math.exp(ls)) ** 2 - ls - 0.5 * math.log(2 * math.pi)
                        for ai, mi, ls in zip(a, mu, log_std)))
    entropy = sum(0.5 + 0.5 * math.log(2 * math.pi) + ls for ls in log_std)
    pg = hand_surrogate(logp, old_logp, adv, 0.3)
    vl = ((0.5 - 1.0) ** 2 + (0.0 + 1.0) ** 2) / 2
    assert out['policy_loss'].item() == pytest.approx(pg, rel=1e-5)
    assert out['entropy'].item() == pytest.approx(entropy, rel=1e-6)
    assert out['total_loss'].item() == pytest.approx(pg + vl - 0.1 * entropy, rel=1e-5)


def test_loss_gradient_flows_to_log_std():
    log_std = torch.zeros(1, requires_grad=True)
    mean = torch.zeros(4, 1, requires_grad=True)
    batch = {'action': torch.tensor([[0.5], [-1.0], [2.0], [0.1]]), 'logp': torch.full((4,), -1.0),
             'advantage': torch.tensor([1.0, -1.0, 0.5, 0.2]), 'value': torch.zeros(4), 'return': torch.zeros(4)}
    out = ppo_loss(mean, torch.zeros(4, requires_grad=True), batch, log_std, clip_range=0.2, ent_coef=0.01)
    out['total_loss'].backward()
    assert log_std.grad is not None and log_std.grad.abs().item() > 0
