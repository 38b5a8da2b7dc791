import pytest

from pipeline.config import ConfigError, compile_config, get_default_config, merge_config


def test_defaults_match_di_engine_cartpole_dqn():
    cfg = get_default_config('dqn')
    assert cfg.env.collector_env_num == 8 and cfg.policy.collect.n_sample == 8
    assert cfg.policy.learn.update_per_collect == 5 and cfg.policy.learn.batch_size == 64
    assert cfg.policy.learn.learning_rate == 1e-3 and cfg.policy.discount_factor == 0.97
    assert cfg.policy.model.encoder_hidden_size_list == [128, 128, 64] and cfg.policy.model.dueling
    assert cfg.policy.learn.target_update_freq == 100
    assert cfg.policy.other.replay_buffer.replay_buffer_size == 20000
    # DI-engine's schedule, and ez-greedy (rlpipe's addition) off
    assert cfg.policy.other.eps == {'type': 'exp', 'start': 0.95, 'end': 0.1, 'decay': 10000,
                                    'repeat_exponent': None, 'repeat_max': 100, 'repeat_min_eps': 0.0}


def test_merge_overrides_without_touching_inputs():
    d = get_default_config()
    user = {'env': {'stop_value': 475}, 'policy': {'learn': {'learning_rate': 1}}}
    cfg = merge_config(d, user)
    assert cfg.env.stop_value == 475 and cfg.policy.learn.learning_rate == 1  # int ok for float
    assert cfg.env.collector_env_num == 8  # sibling defaults kept
    assert d.env.stop_value == 195 and user == {'env': {'stop_value': 475}, 'policy': {'learn': {'learning_rate': 1}}}
    cfg.policy.learn.batch_size = 1
    assert get_default_config().policy.learn.batch_size == 64  # fresh copies


def test_unknown_keys_reported_with_suggestions_and_all_errors_listed():
    with pytest.raises(ConfigError) as e:
        compile_config({'policy': {'learn': {'batchsize': 32, 'learning_rate': 'fast'}}, 'evn': {}})
    errs = e.value.errors
    assert len(errs) == 3
    text = str(e.value)
    assert "policy.learn.batchsize: unknown key (did you mean 'batch_size'?)" in text
    assert "evn: unknown key (did you mean 'env'?)" in text
    assert "policy.learn.learning_rate: expected a finite float in (0, 1], got str 'fast'" in text


@pytest.mark.parametrize('override,fragment', [
    ({'policy': {'nstep': 2.5}}, 'policy.nstep: expected an int >= 1'),
    ({'policy': {'nstep': True}}, 'policy.nstep: expected an int >= 1'),
    ({'policy': {'learn': {'double_dqn': 1}}}, 'double_dqn: expected a bool'),
    ({'policy': {'model': {'encoder_hidden_size_list': 64}}}, 'encoder_hidden_size_list: expected a non-empty list of ints >= 1'),
    ({'env': 'CartPole-v1'}, 'env: expected mapping'),
    ({'policy': {'learn': {'grad_clip': 'x'}}}, 'grad_clip: expected a finite float > 0 \\(or None\\)'),
])
def test_wrong_types(override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        compile_config(override)


def test_free_form_sections_and_none():
    cfg = compile_config({'env': {'env_kwargs': {'render_mode': 'rgb_array'}, 'max_episode_steps': None},
                          'policy': {'learn': {'grad_clip': 10}}})
    assert cfg.env.env_kwargs.render_mode == 'rgb_array' and cfg.policy.learn.grad_clip == 10


def test_value_checks():
    with pytest.raises(ConfigError, match='target_theta'):
        compile_config({'policy': {'learn': {'target_update_type': 'soft'}}})
    with pytest.raises(ConfigError, match='batch_size: must be an int >= 1, got 0'):
        compile_config({'policy': {'learn': {'batch_size': 0}}})
    with pytest.raises(ConfigError, match="target_update_type: must be one of 'hard', 'soft', got 'smooth'"):
        compile_config({'policy': {'learn': {'target_update_type': 'smooth'}}})
    with pytest.raises(ValueError, match='no default config'):
        compile_config({}, policy='no_such_policy')
    with pytest.raises(ConfigError, match='mapping'):
        merge_config(get_default_config(), [1, 2])
    cfg = compile_config({'policy': {'learn': {'target_update_type': 'soft', 'target_theta': 0.01}}})
    assert cfg.policy.learn.target_theta == 0.01
