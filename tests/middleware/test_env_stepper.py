"""EnvStepper: the one stepping path of StepCollector, EpisodeCollector and RolloutCollector."""
import numpy as np
import pytest

from contexts import OnlineRLContext
from middleware import RolloutCollector
from middleware.env_stepper import EnvStepper
from pipeline.envs import EnvManager

pytestmark = pytest.mark.timeout(120)


class DictPolicy:
    """Deterministic, row by row; a PPO-like output dict whose extras depend on the observation;
    records ``reset`` calls."""

    def __init__(self):
        self.resets = []

    def forward(self, obs, **kw):
        a = (np.floor(np.abs(obs[:, 1]) * 1e5) % 2).astype(np.int64)
        return {'env_action': a, 'action': a, 'logp': obs[:, 0].astype(np.float32) + kw.get('shift', 0.0),
                'value': obs[:, 2].astype(np.float32)}

    def value(self, obs):
        return obs[:, 3].astype(np.float32)

    def reset(self, env_ids=None):
        self.resets.append(None if env_ids is None else sorted(env_ids))


def run(overlap, rounds=40, backend='sync'):
    """Each round of all envs as rows (obs, action, reward, next_obs, done, logp, value), ctx, the policy."""
    pol = DictPolicy()
    with EnvManager('CartPole-v1', 5, seed=7, backend=backend, max_episode_steps=9) as m:
        st = EnvStepper(pol, m, overlap=overlap, action_key='env_action')
        ctx = OnlineRLContext()
        assert st.reset_if_needed() and not st.reset_if_needed()
        rows = []
        for _ in range(rounds):
            parts = []
            for _ in range(st.parts):
                step, out = st.step(ctx, {'shift': 1.0})
                assert np.array_equal(out['action'], step.action)   # the output that chose these actions
                np.testing.assert_array_equal(out['logp'], step.obs[:, 0] + 1.0)
                parts.append((step.obs, step.action, step.reward, step.next_obs, step.done, out['logp'],
                              out['value']))
            rows.append([np.concatenate(c) for c in zip(*parts)])
        return rows, (ctx.env_step, ctx.env_episode, dict(ctx.info_for_logging)), pol, m.in_flight


@pytest.mark.multiprocess
@pytest.mark.parametrize('backend', ['sync', 'subprocess'])
def test_overlapped_steps_are_the_lock_step_ones_half_by_half_with_their_forward_outputs(backend):
    ref, counts, pol, _ = run(False)
    got, counts2, pol2, in_flight = run(True, backend=backend)
    assert counts == counts2 and counts[0] == 40 * 5 and counts[1] > 5
    for a, b in zip(ref, got):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert in_flight == 1  # one half's step stays in flight between steps
    # the policy's per-env state: reset once at the start, then for each finished env
    assert pol.resets[0] is None and sum(len(r) for r in pol.resets[1:]) == counts[1]
    assert sorted(x for r in pol.resets[1:] for x in r) == sorted(x for r in pol2.resets[1:] for x in r)


def test_start_next_false_leaves_nothing_in_flight_and_the_next_step_starts_over():
    pol = DictPolicy()
    with EnvManager('CartPole-v1', 4, seed=0) as m:
        st = EnvStepper(pol, m, overlap=True, action_key='env_action')
        ctx = OnlineRLContext()
        st.reset_if_needed()
        ids = [st.step(ctx)[0].env_ids.tolist() for _ in range(3)]
        assert ids == [[0, 1], [2, 3], [0, 1]] and m.in_flight == 1
        assert st.step(ctx, start_next=False)[0].env_ids.tolist() == [2, 3] and m.in_flight == 0
        assert st.step(ctx)[0].env_ids.tolist() == [0, 1] and ctx.env_step == 10
        assert not st.reset_if_needed() and st.reset_if_needed(drop_in_flight=True)  # a step was in flight
        assert m.in_flight == 0 and pol.resets.count(None) == 2


def test_one_env_or_no_overlap_is_lock_step_and_a_plain_callable_policy_works():
    with EnvManager('CartPole-v1', 1, seed=0) as m:
        st = EnvStepper(lambda obs: np.zeros(len(obs), np.int64), m, overlap=True)
        assert not st.overlap and st.parts == 1
        st.reset_if_needed()
        step, out = st.step(OnlineRLContext())
        assert step.env_ids.tolist() == [0] and out.tolist() == [0]


def test_rollout_collector_resets_the_policy_state_of_finished_envs():
    pol = DictPolicy()
    cfg = {'policy': {'collect': {'n_steps': 12}, 'discount_factor': 0.9}}
    with EnvManager('CartPole-v1', 4, seed=1, max_episode_steps=5) as m:
        col = RolloutCollector(cfg, pol, m, overlap=True)
        ctx = OnlineRLContext()
        col(ctx)
        assert m.in_flight == 0 and ctx.env_step == 48
        assert pol.resets[0] is None and sum(len(r) for r in pol.resets[1:]) == ctx.env_episode > 0
        np.testing.assert_array_equal(ctx.rollout['logp'], ctx.rollout['obs'][..., 0])
