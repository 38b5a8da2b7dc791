"""The Python agents (``pipeline.run.agents``, issue 27): train with tiny budgets, predict's shapes and dtypes,
a save/load round trip acts identically, the examples' checkpoints load, bad input is one line."""
import importlib.util
import os

import numpy as np
import pytest

from pipeline.run import agents
from pipeline.run.agents import AgentError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {
    'DQN': {'policy': {'learn': {'learning_starts': 32, 'batch_size': 16}}},
    'PPO': {'env': {'collector_env_num': 2}, 'policy': {'collect': {'n_steps': 16}, 'learn': {'batch_size': 16}}},
    'SAC': {'policy': {'learn': {'learning_starts': 32, 'batch_size': 16},
                       'collect': {'random_collect_size': 32}}},
}


def _obs(agent, n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, *agent.observation_space.shape)).astype(np.float32)


def _load_example(name):
    spec = importlib.util.spec_from_file_location(f'{name}_agents_test', os.path.join(ROOT, 'examples', f'{name}.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """One tiny-budget agent per algorithm, with its saved file."""
    out = {}
    tmp = tmp_path_factory.mktemp('agents')
    for cls, env_id in ((agents.DQN, 'CartPole-v1'), (agents.PPO, 'Pendulum-v1'), (agents.SAC, 'Pendulum-v1')):
        agent = cls(env_id, seed=0, config=TINY[cls.__name__])
        result = agent.train(max_env_step=128)
        assert result['env_step'] >= 128 and result['train_iter'] > 0 and not result['interrupted']
        out[cls.__name__] = (agent, agent.save(str(tmp / f'{cls.__name__}.pth.tar')))
    return out


def test_dqn_predicts_one_int_action_or_a_batch(trained):
    agent, _ = trained['DQN']
    one = agent.predict(np.zeros(4, dtype=np.float32))
    assert np.ndim(one) == 0 and np.issubdtype(np.asarray(one).dtype, np.integer) and agent.action_space.contains(
        int(one))
    batch = agent.predict(_obs(agent, 5))
    assert batch.shape == (5,) and np.issubdtype(batch.dtype, np.integer)
    sampled = agent.predict(_obs(agent, 64), deterministic=False)
    assert sampled.shape == (64,) and set(np.unique(sampled)) <= {0, 1}


@pytest.mark.parametrize('name', ['PPO', 'SAC'])
def test_continuous_agents_predict_actions_within_the_envs_bounds(trained, name):
    agent, _ = trained[name]
    one = agent.predict(np.zeros(3, dtype=np.float32))
    assert one.shape == (1,) and one.dtype == np.float32
    for deterministic in (True, False):
        batch = agent.predict(_obs(agent, 16) * 10, deterministic=deterministic)
        assert batch.shape == (16, 1) and np.all(batch >= -2.0) and np.all(batch <= 2.0)


@pytest.mark.parametrize('name', ['DQN', 'PPO', 'SAC'])
def test_save_and_load_give_identical_actions_and_counters(trained, name):
    agent, path = trained[name]
    loaded = getattr(agents, name).load(path)
    obs = _obs(agent, 32, seed=1)
    np.testing.assert_array_equal(agent.predict(obs), loaded.predict(obs))
    assert loaded.env_step == agent.env_step and loaded.env_id == agent.env_id and loaded.cfg.seed == 0


def test_a_loaded_agent_trains_on_from_its_counters(trained):
    _, path = trained['DQN']
    import torch

    agent = agents.DQN.load(path)
    before = agent.env_step
    torch.set_num_threads(2)
    result = agent.train(max_env_step=16)  # one torch thread while training, as the examples
    assert torch.get_num_threads() == 2
    assert result['env_step'] == agent.env_step >= before + 16
    assert len(agent.evaluate(episodes=2)) == 2


def test_an_examples_checkpoint_loads_and_an_agents_file_plays_in_the_example(tmp_path, monkeypatch, trained):
    monkeypatch.chdir(tmp_path)
    ex = _load_example('dqn_cartpole')
    ex.main(['--max-env-step', '64', '--no-progress', '--set', 'policy.learn.learning_starts=32',
             '--set', 'policy.learn.batch_size=16'])
    ckpt = tmp_path / 'cartpole_dqn' / '1' / 'ckpt' / 'final.pth.tar'
    agent = agents.DQN.load(str(ckpt))
    from pipeline.policy import load_policy

    obs = _obs(agent, 16)
    np.testing.assert_array_equal(agent.predict(obs), load_policy(str(ckpt))(obs))
    assert agent.env_step == 64
    _, agent_file = trained['DQN']
    assert ex.main(['--play', agent_file, '--episodes', '1']) == 0


@pytest.mark.parametrize('make, message', [
    (lambda: agents.DQN('CartPol-v1'), "did you mean 'CartPole-v1'"),
    (lambda: agents.PPO('CartPole-v1', config={'policy': {'learn': {'learnig_rate': 1e-3}}}),
     "policy.learn.learnig_rate: unknown key (did you mean 'learning_rate'?)"),
    (lambda: agents.SAC('CartPole-v1'), 'SAC needs continuous actions'),
    (lambda: agents.DQN('Pendulum-v1'), 'DQN needs a discrete action space'),
    (lambda: agents.DQN(config=[1]), 'config must be a dict'),
    (lambda: agents.DQN('FrozenLake-v1'), 'the agents take flat Box observations'),
])
def test_bad_construction_is_one_line(make, message):
    with pytest.raises(AgentError) as e:
        make()
    assert message in str(e.value) and '\n' not in str(e.value)


def test_bad_calls_are_one_line(trained, tmp_path):
    agent, _ = trained['DQN']
    _, ppo_file = trained['PPO']
    cases = [(lambda: agent.predict(np.zeros(3)), 'observations have shape (4,)'),
             (lambda: agent.predict(np.zeros((2, 5))), 'got shape (2, 5)'),
             (lambda: agent.train(max_env_step=0), 'max_env_step must be a positive int'),
             (lambda: agent.evaluate(episodes=0), 'episodes must be a positive int'),
             (lambda: agents.DQN.load(ppo_file), 'holds a PPO policy: load it with agents.PPO.load'),
             (lambda: agents.DQN.load(str(tmp_path / 'none.pth.tar')), 'no checkpoint file')]
    junk = tmp_path / 'junk.pth.tar'
    junk.write_bytes(b'not a checkpoint' * 8)
    cases.append((lambda: agents.DQN.load(str(junk)), 'junk.pth.tar'))
    for call, message in cases:
        with pytest.raises(AgentError) as e:
            call()
        assert message in str(e.value) and '\n' not in str(e.value), str(e.value)


def test_the_readme_and_docs_snippets_run_with_a_small_budget(tmp_path, monkeypatch):
    """Every Python block of docs/agents.md and the README's "Python API" block, with budgets cut to a few
    hundred env steps (the docs page's last block loads the checkpoint of an example run made here)."""
    import contextlib
    import io
    import re

    monkeypatch.chdir(tmp_path)
    _load_example('dqn_cartpole').main(['--max-env-step', '64', '--no-progress', '--set',
                                        'policy.learn.learning_starts=32'])
    with open(os.path.join(ROOT, 'docs', 'agents.md')) as f:
        blocks = re.findall(r'```python\n(.*?)```', f.read(), re.S)
    with open(os.path.join(ROOT, 'README.md')) as f:
        readme = f.read()
    section = readme[readme.index('## Python API'):]
    blocks += re.findall(r'```python\n(.*?)```', section[:section.index('\n## ', 5)], re.S)
    assert len(blocks) >= 5
    for block in blocks:
        small = re.sub(r'max_env_step=[\d_]+', 'max_env_step=200', block)
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(small, 'snippet', 'exec'), {})
