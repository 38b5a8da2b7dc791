"""Issue 12 item 9: every policy's config declares each value's type and range (the schema);
``compile_config`` reports every violation at once, naming the key and what is allowed."""
import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import ConfigError, apply_overrides, compile_config, get_schema, merge_config, parse_override
from pipeline.config.schema import check, defaults, iter_specs, spec_at

NAN, INF = float('nan'), float('inf')


def _set_all(out, flat):
    for path, value in flat.items():
        node = out
        *parents, leaf = path.split('.')
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


# (dotted key, wrong value, what the message must say) -- the cases of issue 12 item 9, and a few more
ISSUE_CASES = [
    ('policy.learn.learning_rate', INF, 'policy.learn.learning_rate: must be a finite float in (0, 1], got inf'),
    ('policy.learn.learning_rate', None, 'policy.learn.learning_rate: expected a finite float in (0, 1], got None'),
    ('policy.learn.learning_rate', NAN, 'policy.learn.learning_rate: must be a finite float in (0, 1], got nan'),
    ('policy.learn.batch_size', None, 'policy.learn.batch_size: expected an int >= 1, got None'),
    ('policy.learn.target_update_freq', 0, 'policy.learn.target_update_freq: must be an int >= 1, got 0'),
    ('policy.other.eps.decay', 0, 'policy.other.eps.decay: must be an int >= 1, got 0'),
    ('policy.other.eps.start', 5, 'policy.other.eps.start: must be a finite float in [0, 1], got 5'),
    ('policy.eval.evaluator.eval_freq', 0, 'policy.eval.evaluator.eval_freq: must be an int >= 1, got 0'),
    ('policy.model.encoder_hidden_size_list', [64, -8],
     'policy.model.encoder_hidden_size_list: must be a non-empty list of ints >= 1, got [64, -8]'),
    ('policy.learn.grad_clip', NAN, 'policy.learn.grad_clip: must be a finite float > 0 (or None), got nan'),
    ('policy.other.eps.end', NAN, 'policy.other.eps.end: must be a finite float in [0, 1], got nan'),
    ('policy.other.replay_buffer.priority_power_factor', NAN,
     'policy.other.replay_buffer.priority_power_factor: must be a finite float in [0, 1], got nan'),
    ('policy.learn.optimizer', 'adamx',
     "policy.learn.optimizer: must be one of 'adam', 'adamw', 'sgd', 'rmsprop', got 'adamx'"),
    ('policy.learn.optimizer_kwargs', {'momentum_typo': 0.9}, "policy.learn.optimizer_kwargs: 'adam' does not accept"),
    ('policy.discount_factor', 1.5, 'policy.discount_factor: must be a finite float in [0, 1], got 1.5'),
    ('env.collector_env_num', 0, 'env.collector_env_num: must be an int >= 1, got 0'),
    ('seed', -1, 'seed: must be an int >= 0, got -1'),
]


@pytest.mark.parametrize('key,value,message', ISSUE_CASES, ids=[f'{k}={v!r}' for k, v, _ in ISSUE_CASES])
def test_each_bad_value_is_refused_naming_key_and_range(key, value, message):
    with pytest.raises(ConfigError) as e:
        compile_config(_set_all({}, {key: value}))
    assert e.value.errors == [m for m in e.value.errors if m.startswith(key)]
    assert any(m.startswith(message) for m in e.value.errors), e.value.errors


def test_every_violation_is_reported_at_once():
    flat = {}
    for key, value, _ in ISSUE_CASES:
        flat.setdefault(key, value)  # one wrong value per key
    flat['policy.learn.target_update_type'] = 'soft'  # and a contradiction: soft update without a theta
    flat['policy.learn.batchsize'] = 32  # and a typo
    with pytest.raises(ConfigError) as e:
        compile_config(_set_all({}, flat))
    errs = e.value.errors
    for key in flat:
        if key not in ('policy.learn.target_update_type', 'policy.learn.optimizer_kwargs'):
            assert sum(m.startswith(key + ':') for m in errs) == 1, (key, errs)
    assert any(m.startswith('policy.learn.target_theta: a soft target update needs') for m in errs)
    assert any("did you mean 'batch_size'" in m for m in errs)


def test_edge_values_inside_the_ranges_are_accepted():
    cfg = compile_config(_set_all({}, {
        'policy.learn.learning_rate': 1, 'policy.other.eps.start': 1.0, 'policy.other.eps.end': 0,
        'env.stop_value': INF, 'policy.learn.grad_clip': None, 'policy.learn.optimizer': 'SGD',
        'policy.learn.optimizer_kwargs': {'momentum': 0.9}, 'policy.model.head_layer_num': 0,
        'policy.model.obs_shape': [2, 3], 'policy.learn.learning_starts': 0,
    }))
    assert cfg.policy.learn.learning_rate == 1 and cfg.env.stop_value == INF


@pytest.mark.parametrize('policy', ['dqn', 'sac', 'ppo'])
def test_defaults_satisfy_their_schema_and_every_key_is_declared(policy):
    schema = get_schema(policy)
    assert check(schema, defaults(schema)) == []
    for path, spec in iter_specs(schema):
        assert spec.allowed(), path


def test_sac_config_is_checked_by_compile_config_and_by_merge_config():
    from pipeline.policy.sac import sac_default_config

    bad = {'policy': {'learn': {'learning_rate_actor': INF, 'target_theta': 0, 'init_alpha': -1},
                      'model': {'actor_hidden_size_list': []}}}
    for call in (lambda: compile_config(bad, policy='sac'), lambda: merge_config(sac_default_config(), bad)):
        with pytest.raises(ConfigError) as e:
            call()
        assert len(e.value.errors) == 4
        assert any(m.startswith('policy.learn.target_theta: must be a finite float in (0, 1]') for m in e.value.errors)
    assert compile_config({'policy': {'learn': {'target_theta': 0.01}}}, policy='sac').policy.learn.target_theta == 0.01


def test_dqn_default_config_is_the_schema_defaults():
    from pipeline.config import get_default_config
    from pipeline.policy.dqn import dqn_default_config

    assert dqn_default_config() == get_default_config('dqn') and dqn_default_config().policy.learn.batch_size == 64


def test_apply_overrides_parses_values_and_feeds_the_check():
    user = {'policy': {'learn': {'batch_size': 64}}}
    out = apply_overrides(user, ['policy.learn.learning_rate=5e-4', 'env.env_id=CartPole-v1',
                                 'policy.model.encoder_hidden_size_list=[32, 32]', 'policy.learn.grad_clip=None'])
    assert out == {'policy': {'learn': {'batch_size': 64, 'learning_rate': 5e-4, 'grad_clip': None},
                              'model': {'encoder_hidden_size_list': [32, 32]}},
                   'env': {'env_id': 'CartPole-v1'}}
    assert user == {'policy': {'learn': {'batch_size': 64}}}  # not modified
    assert parse_override("exp_name='x=y'") == ('exp_name', 'x=y')
    assert parse_override('policy.learn.learning_rate=inf') == ('policy.learn.learning_rate', INF)
    with pytest.raises(ValueError, match='KEY=VALUE'):
        apply_overrides({}, ['policy.learn.batch_size'])
    with pytest.raises(ConfigError, match='batch_size: must be an int >= 1, got 0'):
        compile_config(apply_overrides({}, ['policy.learn.batch_size=0']))


# ------------------------------------------------------------------ property: refuse or train cleanly
# Paths the short run below does not take from the config: the example scripts set the shapes from
# the env, and the env is fixed (free-form env kwargs go to gymnasium, which refuses unknown ones).
_NOT_VARIED = {'exp_name', 'env.env_id', 'policy.type', 'policy.model.obs_shape', 'policy.model.action_shape',
               'env.env_kwargs'}
SCHEMA = get_schema('dqn')
VARIED = [p for p, _ in iter_specs(SCHEMA) if p not in _NOT_VARIED]
WRONG = [None, NAN, INF, -INF, -1, 0, 1, 5, 0.5, -0.5, 2.5, True, 'x', [], [0], [-3], [4, 2], {}, {'lr': 1}]


def _edges(path):
    """Values at and just past the edges of what the schema allows at ``path`` (so that some pass)."""
    spec = spec_at(SCHEMA, path)
    out = [v for v in (getattr(spec, 'lo', None), getattr(spec, 'hi', None)) if v is not None]
    out += [v + d for v in out for d in (-1, 1e-9, 1)]
    out += list(getattr(spec, 'choices', ())) + [False]
    return out


def _wrong_values(path):
    return st.tuples(st.just(path), st.one_of(st.sampled_from(_edges(path)), st.sampled_from(WRONG)))


BASE = {
    'env': {'env_id': 'CartPole-v1', 'collector_env_num': 2, 'evaluator_env_num': 1, 'n_evaluator_episode': 1,
            'max_episode_steps': 30},
    'policy': {'model': {'encoder_hidden_size_list': [8]},
               'learn': {'batch_size': 8, 'learning_starts': 8, 'update_per_collect': 2},
               'collect': {'n_sample': 4}, 'eval': {'evaluator': {'eval_freq': 4}},
               'other': {'replay_buffer': {'replay_buffer_size': 200}}},
}


def _short_run(cfg):
    """The DQN pipeline of examples/dqn_cartpole.py for ~60 env steps; returns the policy and train outputs."""
    from contexts import OnlineRLContext
    from middleware import (OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler,
                            interaction_evaluator, nstep_reward_enhancer, termination_checker)
    from pipeline import task
    from pipeline.data import DequeBuffer, PrioritizedSampler
    from pipeline.envs import EnvManager
    from pipeline.policy import DQNPolicy

    steps = cfg.env.max_episode_steps or 30
    cenv = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=cfg.seed, max_episode_steps=steps)
    eenv = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=cfg.seed + 1, max_episode_steps=steps)
    cfg.policy.model.obs_shape = cenv.observation_space.shape[0]
    cfg.policy.model.action_shape = int(cenv.action_space.n)
    policy = DQNPolicy(cfg, seed=cfg.seed)
    rb = cfg.policy.other.replay_buffer
    sampler = None
    if rb.priority:
        sampler = PrioritizedSampler(alpha=rb.priority_power_factor, beta=rb.IS_weight_power_factor,
                                     anneal=rb.IS_weight_anneal_train_iter, is_weight=rb.priority_IS_weight)
    buf = DequeBuffer(rb.replay_buffer_size, seed=cfg.seed, sampler=sampler)
    outputs = []
    with task.start(ctx=OnlineRLContext()):
        task.use(interaction_evaluator(cfg, policy.eval_mode, eenv))
        task.use(eps_greedy_handler(cfg))
        task.use(StepCollector(cfg, policy.collect_mode, cenv))
        if cfg.policy.nstep > 1:
            task.use(nstep_reward_enhancer(cfg))
        task.use(data_pusher(cfg, buf))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buf))
        task.use(lambda ctx: outputs.extend(ctx.train_output or []))
        task.use(termination_checker(max_env_step=60))
        task.run(max_step=40)
    return policy, outputs


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(st.sampled_from(VARIED).flatmap(_wrong_values), min_size=1, max_size=2, unique_by=lambda kv: kv[0]))
def test_random_wrong_values_are_refused_or_train_without_error_or_nan(pairs):
    flat = dict(pairs)
    user = _set_all(apply_overrides(BASE, []), flat)
    try:
        cfg = compile_config(user)
    except ConfigError as e:
        # refused: every message names one of the changed keys (or the key a contradiction needs)
        named = set(flat) | {'policy.learn.target_theta'}
        assert all(any(m.startswith(k + ':') for k in named) for m in e.errors), (flat, e.errors)
        return
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        policy, outputs = _short_run(cfg)
    finally:
        torch.set_num_threads(n)
    assert all(torch.isfinite(p).all() for p in policy.model.parameters()), flat
    assert all(math.isfinite(o['total_loss']) for o in outputs), flat
