"""GAE against a plain-Python reference, and the collector's bootstrap values at episode ends."""
import numpy as np
import pytest

from pipeline.policy.gae import gae_advantages


def reference_gae(reward, value, terminated, truncated, last_value, final_value, gamma, lam):
    """One env at a time, one step at a time, written from the definition."""
    T, N = len(reward), len(reward[0])
    adv = [[0.0] * N for _ in range(T)]
    for n in range(N):
        running = 0.0
        for t in reversed(range(T)):
            if terminated[t][n]:
                next_v, running = 0.0, 0.0          # no bootstrap, nothing from the next episode
            elif truncated[t][n]:
                next_v, running = final_value[t][n], 0.0  # bootstrap from the true final observation
            elif t == T - 1:
                next_v = last_value[n]
            else:
                next_v = value[t + 1][n]
            delta = reward[t][n] + gamma * next_v - value[t][n]
            running = delta + gamma * lam * running
            adv[t][n] = running
    return adv


@pytest.mark.parametrize('seed', range(5))
def test_gae_matches_reference_with_terminations_and_truncations(seed):
    rng = np.random.default_rng(seed)
    T, N = 17, 6
    reward = rng.normal(size=(T, N)).astype(np.float32)
    value = rng.normal(size=(T, N)).astype(np.float32)
    terminated = rng.random((T, N)) < 0.1
    truncated = (rng.random((T, N)) < 0.1) & ~terminated
    # episode ends in the middle and at the very end, of both kinds, in known places
    terminated[5, 0] = True
    truncated[8, 1] = True
    terminated[T - 1, 2], truncated[T - 1, 2] = True, False
    truncated[T - 1, 3], terminated[T - 1, 3] = True, False
    terminated[T - 1, 4] = truncated[T - 1, 4] = False
    final_value = np.where(truncated, rng.normal(size=(T, N)), 0.0).astype(np.float32)
    last_value = rng.normal(size=N).astype(np.float32)
    gamma, lam = 0.97, 0.9
    adv, ret = gae_advantages(reward, value, terminated, truncated, last_value, final_value, gamma, lam)
    ref = np.array(reference_gae(reward.tolist(), value.tolist(), terminated.tolist(), truncated.tolist(),
                                 last_value.tolist(), final_value.tolist(), gamma, lam))
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref + value, rtol=1e-5, atol=1e-5)
    assert adv.dtype == ret.dtype == np.float32


def test_gae_edge_cases_by_hand():
    # one env, 3 steps: truncation at t=0 (bootstrap 10), termination at t=2 (ignores last_value)
    r = np.array([[1.0], [2.0], [3.0]], np.float32)
    v = np.array([[0.5], [1.0], [2.0]], np.float32)
    te = np.array([[False], [False], [True]])
    tr = np.array([[True], [False], [False]])
    fv = np.array([[10.0], [0.0], [0.0]], np.float32)
    adv, _ = gae_advantages(r, v, te, tr, np.array([99.0], np.float32), fv, gamma=0.5, lam=0.5)
    a2 = 3.0 - 2.0
    a1 = 2.0 + 0.5 * 2.0 - 1.0 + 0.25 * a2
    a0 = 1.0 + 0.5 * 10.0 - 0.5
    np.testing.assert_allclose(adv[:, 0], [a0, a1, a2], rtol=1e-6)


def test_gae_refuses_mismatched_shapes():
    with pytest.raises(ValueError, match='one shape'):
        gae_advantages(np.zeros((3, 2)), np.zeros((3, 3)), np.zeros((3, 2), bool), np.zeros((3, 2), bool),
                       np.zeros(2), np.zeros((3, 2)), 0.9, 0.9)
