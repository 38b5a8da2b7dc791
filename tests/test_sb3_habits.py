"""Stable-Baselines3 habits (issue 48, part 1): ``agents.DQN('MlpPolicy', env)``, ``learn(total_timesteps=...)``,
gymnasium and vectorised env objects read through their spec, callables returning an env, SB3 keywords answered
with the config entry, and the page mapping SB3's calls to rlpipe's."""
import os
import re

import gymnasium as gym
import numpy as np
import pytest

from pipeline.run import agents
from pipeline.run.agents import AgentError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {'policy': {'learn': {'learning_starts': 32, 'batch_size': 16}}}
TINY_SAC = {'policy': {'learn': {'learning_starts': 32, 'batch_size': 16}, 'collect': {'random_collect_size': 32}}}


def one_line(call, *words):
    with pytest.raises(AgentError) as e:
        call()
    text = str(e.value)
    assert '\n' not in text and all(w in text for w in words), text
    return text


@pytest.mark.parametrize('make', [
    lambda: agents.DQN('MlpPolicy', 'CartPole-v1'),
    lambda: agents.DQN('MlpPolicy', env='CartPole-v1'),
    lambda: agents.DQN(policy='MlpPolicy', env='CartPole-v1'),
    lambda: agents.DQN('CartPole-v1', policy='MlpPolicy'),
    lambda: agents.DQN(env='CartPole-v1'),
])
def test_sb3s_policy_name_and_order_mean_the_default_network(make):
    agent = make()
    assert agent.env_id == 'CartPole-v1' and agent.cfg.seed == 0
    assert agent.cfg.policy.model.encoder_hidden_size_list == agents.DQN('CartPole-v1').cfg.policy.model.\
        encoder_hidden_size_list


def test_other_policy_names_and_a_positional_seed_are_refused_in_one_line():
    one_line(lambda: agents.DQN('CnnPolicy', 'CartPole-v1'), "'CnnPolicy'", 'examples/dqn_atari.py')
    one_line(lambda: agents.PPO('MultiInputPolicy', 'CartPole-v1'), 'FlattenObservation', 'agents.PPO(')
    one_line(lambda: agents.DQN('MlpLstmPolicy', 'CartPole-v1'), "give 'MlpPolicy'")
    one_line(lambda: agents.DQN('CartPole-v1', 3), 'give the seed as seed=3')
    one_line(lambda: agents.DQN('CartPole-v1', 'Acrobot-v1'), 'two envs given')
    one_line(lambda: agents.DQN('CartPole-v1', seed='1'), 'seed must be an int >= 0')
    one_line(lambda: agents.DQN(3), 'env must be a gymnasium id')


def test_a_gymnasium_env_object_is_read_through_its_spec():
    env = gym.make('Pendulum-v1', g=9.0, max_episode_steps=50, render_mode='rgb_array')
    agent = agents.PPO('MlpPolicy', env)
    e = agent.cfg.env
    assert (e.env_id, dict(e.env_kwargs), e.max_episode_steps) == ('Pendulum-v1', {'g': 9.0}, 50)
    made = agent._env_fn()()  # what the collector and evaluator make: the spec's arguments, no window
    assert made.unwrapped.g == 9.0 and made.spec.max_episode_steps == 50 and made.render_mode is None
    plain = agents.DQN(gym.make('CartPole-v1'))  # the id's own time limit is not copied
    assert plain.cfg.env.max_episode_steps is None and not plain.cfg.env.env_kwargs
    assert plain._env_fn() == 'CartPole-v1'


def test_vectorised_envs_are_read_through_their_spec():
    for vec in (gym.make_vec('CartPole-v1', num_envs=2),
                gym.vector.SyncVectorEnv([lambda: gym.make('CartPole-v1')] * 2)):
        agent = agents.PPO(vec)
        assert agent.env_id == 'CartPole-v1' and not agent.cfg.env.env_kwargs, agent.cfg.env
        assert agent.cfg.env.collector_env_num == 8  # the settings', not the vec env's
        vec.close()
    sb3 = pytest.importorskip('stable_baselines3')
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    venv = make_vec_env('CartPole-v1', n_envs=2)  # Monitor-wrapped envs: Monitor only records
    assert agents.PPO('MlpPolicy', venv).env_id == 'CartPole-v1'
    one_line(lambda: agents.PPO('MlpPolicy', VecNormalize(venv)), 'VecNormalize wraps a vec env', 'normalize_obs')
    assert sb3


def test_an_env_without_a_spec_or_with_wrappers_is_refused_in_one_line_saying_what_to_pass():
    from gymnasium.envs.classic_control import CartPoleEnv

    one_line(lambda: agents.DQN(CartPoleEnv()), 'has no spec', 'pass the env id, or a callable',
             'agents.DQN(CartPoleEnv)')
    one_line(lambda: agents.DQN(gym.wrappers.FlattenObservation(gym.make('CartPole-v1'))),
             'wrapped in FlattenObservation', 'agents.DQN(lambda: FlattenObservation(')
    one_line(lambda: agents.DQN(lambda: 'not an env'), 'returned str, not an env')


def test_a_callable_returning_an_env_trains_evaluates_and_saves(tmp_path):
    from gymnasium.envs.classic_control import CartPoleEnv, PendulumEnv

    agent = agents.DQN(lambda: gym.wrappers.TimeLimit(CartPoleEnv(), 30), config=TINY)
    assert (agent.env_id, agent.cfg.env.max_episode_steps) == ('CartPoleEnv', 30)  # its name and time limit
    assert agent.train(max_env_step=64)['env_step'] >= 64
    assert all(r <= 30 for r in agent.evaluate(episodes=2))
    loaded = agents.DQN.load(agent.save(str(tmp_path / 'a.pth.tar')))
    obs = np.zeros((3, 4), np.float32)
    np.testing.assert_array_equal(loaded.predict(obs), agent.predict(obs))
    sac = agents.SAC(lambda: gym.wrappers.TimeLimit(PendulumEnv(), 40), config=TINY_SAC)
    assert sac.learn(64) is sac and sac.env_step >= 64
    assert np.all(np.abs(sac.predict(np.zeros((8, 3), np.float32))) <= 2.0)


def test_learn_is_train_returning_the_agent(capsys):
    agent = agents.DQN('MlpPolicy', 'CartPole-v1', config=TINY, verbose=1)
    assert agent.learn(total_timesteps=1e2) is agent and agent.env_step >= 100
    assert 'env_step' in capsys.readouterr().err  # verbose=1: the progress line
    assert agent.learn(50, reset_num_timesteps=False).env_step >= 150
    one_line(lambda: agent.learn(total_timesteps=0), 'total_timesteps must be a positive int')
    one_line(lambda: agent.learn(100, callback=print), 'middleware')
    one_line(lambda: agent.learn(100, tb_log_name='run'), 'log_dir=')
    one_line(lambda: agent.learn(100, reset_num_timesteps=True), 'counters here always continue')
    with pytest.raises(TypeError, match="unexpected keyword argument 'foo'"):
        agent.learn(100, foo=1)


def test_tensorboard_log_is_the_default_log_dir(tmp_path):
    agent = agents.DQN('MlpPolicy', 'CartPole-v1', config=TINY, tensorboard_log=str(tmp_path / 'tb'))
    agent.learn(64)
    pytest.importorskip('tensorboard')
    assert any(f.startswith('events.') for f in os.listdir(tmp_path / 'tb'))


@pytest.mark.parametrize('cls, kw, words', [
    (agents.DQN, {'learning_rate': 1e-3}, ["config={'policy': {'learn': {'learning_rate': 0.001}}}"]),
    (agents.DQN, {'gamma': 0.9}, ['policy.discount_factor', "Stable-Baselines3's 'gamma'"]),
    (agents.DQN, {'exploration_fraction': 0.1}, ['policy.other.eps.decay', 'in env steps']),
    (agents.SAC, {'learning_rate': 3e-4}, ['learning_rate_actor', 'learning_rate_critic']),
    (agents.PPO, {'policy_kwargs': {'net_arch': [64]}}, ['policy.model.hidden']),
])
def test_sb3_keywords_are_answered_with_the_config_entry(cls, kw, words):
    one_line(lambda: cls('MlpPolicy', **kw), *words, 'agents.' + cls.__name__)


def test_an_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        agents.PPO('CartPole-v1', colour='red')


def test_the_from_sb3_page_is_linked_and_covers_the_habits():
    page = open(os.path.join(ROOT, 'docs', 'from_sb3.md')).read()
    for call in ('"MlpPolicy"', 'learn(total_timesteps', 'predict(obs', '(action, state)', 'make_vec_env',
                 'describe_config', 'evaluate_policy', '--list-config', 'reset_num_timesteps'):
        assert call in page, call
    assert re.search(r'\]\(docs/from_sb3\.md\)', open(os.path.join(ROOT, 'README.md')).read())
    assert 'from_sb3.md' in open(os.path.join(ROOT, 'mkdocs.yml')).read()
