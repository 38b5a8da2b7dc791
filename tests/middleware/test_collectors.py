import numpy as np
import pytest

from contexts import OnlineRLContext
from middleware import EpisodeCollector, NStepAccumulator, StepCollector, eps_greedy_handler, nstep_reward_enhancer
from pipeline.config import compile_config
from pipeline.runtime.roles import Role


def test_step_collector_counts_and_transitions(cfg, fixed_env, zero_policy):
    env = fixed_env(n=4, length=3)
    col = StepCollector(cfg, zero_policy, env)  # n_sample 8 with 4 envs: 2 rounds
    ctx = OnlineRLContext()
    ctx.collect_kwargs['eps'] = 0.5
    col(ctx)
    assert ctx.env_step == 8 and ctx.env_episode == 0 and len(ctx.transitions) == 8
    assert zero_policy.calls == [{'eps': 0.5}, {'eps': 0.5}]
    t = ctx.transitions[4]
    assert set(t) == {'obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated', 'env_id'}
    assert t['env_id'] == 0 and t['obs'][0] == 1 and t['next_obs'][0] == 2 and t['action'] == 0
    col(ctx)  # third step ends every episode; episodes continue across calls
    assert ctx.env_step == 16 and ctx.env_episode == 4
    ends = [t for t in ctx.transitions if t['terminated']]
    assert len(ends) == 4 and all(t['next_obs'][0] == 3 for t in ends)
    assert ctx.info_for_logging['collect_episode_return'] == [3.0] * 4


def test_step_collector_n_sample_not_multiple_of_env_num(fixed_env, zero_policy):
    cfg = compile_config({'policy': {'collect': {'n_sample': 5}}})
    ctx = OnlineRLContext()
    StepCollector(cfg, zero_policy, fixed_env(n=2, length=10))(ctx)
    assert len(ctx.transitions) == 6 and ctx.env_step == 6  # whole rounds, at least n_sample


def test_episode_collector_returns_whole_episodes_and_keeps_partials(fixed_env, zero_policy):
    cfg = compile_config({'policy': {'collect': {'n_episode': 2}}})
    env = fixed_env(lengths=[2, 3])
    col = EpisodeCollector(cfg, zero_policy, env)
    ctx = OnlineRLContext()
    col(ctx)  # env0 ends at step 2 and 4; env1 at 3
    assert [len(e) for e in ctx.episodes] == [2, 3]
    assert all(e[-1]['terminated'] and [t['next_obs'][0] for t in e] == list(range(1, len(e) + 1))
               for e in ctx.episodes)
    assert ctx.env_step == 6 and ctx.env_episode == 2
    col(ctx)  # env0's second episode started in the previous call and ends first
    assert [(e[0]['env_id'], len(e)) for e in ctx.episodes] == [(0, 2), (0, 2), (1, 3)]  # >= n_episode
    assert all(e[0]['obs'][0] == 0 for e in ctx.episodes)  # every episode starts at its reset: nothing lost
    assert ctx.env_step == 12 and ctx.env_episode == 5


def test_collectors_are_gated_to_collector(cfg, fixed_env, zero_policy):
    assert StepCollector.__roles__ == frozenset({Role.COLLECTOR})
    assert EpisodeCollector(cfg, zero_policy, fixed_env()).__roles__ == frozenset({Role.COLLECTOR})
    assert eps_greedy_handler(cfg).__roles__ == frozenset({Role.COLLECTOR})


def test_eps_greedy_handler_schedules():
    cfg = compile_config({'policy': {'other': {'eps': {'type': 'exp', 'start': 0.95, 'end': 0.1, 'decay': 10000}}}})
    h = eps_greedy_handler(cfg)
    ctx = OnlineRLContext()
    h(ctx)
    assert ctx.collect_kwargs['eps'] == pytest.approx(0.95)
    ctx.env_step = 10000
    h(ctx)
    assert ctx.collect_kwargs['eps'] == pytest.approx(0.1 + 0.85 * np.exp(-1))
    cfg = compile_config({'policy': {'other': {'eps': {'type': 'linear', 'start': 1.0, 'end': 0.0, 'decay': 100}}}})
    h = eps_greedy_handler(cfg)
    ctx.env_step = 50
    h(ctx)
    assert ctx.collect_kwargs['eps'] == pytest.approx(0.5)
    ctx.env_step = 500
    h(ctx)
    assert ctx.collect_kwargs['eps'] == 0.0


def tr(env, t, r, term=False, trunc=False):
    return {'obs': t, 'action': 0, 'reward': r, 'next_obs': t + 1, 'terminated': term, 'truncated': trunc,
            'env_id': env}


def test_nstep_accumulator_interleaved_envs_and_episode_ends():
    acc = NStepAccumulator(3, 0.5)
    out = []
    out += acc.add(tr(0, 0, 1.0))
    out += acc.add(tr(1, 0, 8.0))
    out += acc.add(tr(0, 1, 2.0))
    out += acc.add(tr(0, 2, 4.0))
    assert len(out) == 1
    o = out[0]
    assert o['obs'] == 0 and o['next_obs'] == 3 and o['nstep'] == 3 and o['env_id'] == 0
    assert o['reward'] == pytest.approx(1 + 0.5 * 2 + 0.25 * 4)
    out = acc.add(tr(0, 3, 8.0, term=True))  # flushes env 0: t=1 (3 steps), t=2 (2), t=3 (1)
    assert [(o['obs'], o['nstep'], o['terminated']) for o in out] == [(1, 3, True), (2, 2, True), (3, 1, True)]
    assert [o['reward'] for o in out] == pytest.approx([2 + 2 + 2, 4 + 4, 8])
    assert acc.pending() == 1  # env 1 still waiting
    out = acc.add(tr(1, 1, 2.0, trunc=True))
    assert [(o['obs'], o['nstep'], o['terminated'], o['truncated'], o['next_obs']) for o in out] == \
        [(0, 2, False, True, 2), (1, 1, False, True, 2)]
    assert acc.pending() == 0


def test_nstep_reward_enhancer_on_context():
    cfg = compile_config({'policy': {'nstep': 2, 'discount_factor': 0.9}})
    enh = nstep_reward_enhancer(cfg)
    ctx = OnlineRLContext()
    ctx.transitions = [tr(0, 0, 1.0), tr(1, 0, 1.0)]
    enh(ctx)
    assert ctx.transitions == []
    ctx.transitions = [tr(0, 1, 1.0), tr(1, 1, 1.0, term=True)]
    enh(ctx)
    assert [(t['env_id'], t['obs'], t['nstep']) for t in ctx.transitions] == [(0, 0, 2), (1, 0, 2), (1, 1, 1)]
    assert ctx.transitions[0]['reward'] == pytest.approx(1.9)
    assert enh.__roles__ == frozenset({Role.COLLECTOR})
