"""A checkpoint from elsewhere is data (issue 45): loading it never imports a module it names, its saved config
is checked against the schema before anything is built, and the networks it describes are refused above a
parameter budget the caller can raise."""
import os
import subprocess
import sys

import pytest
import torch

from pipeline.checkpoint import CheckpointError
from pipeline.envs.saved_spaces import spaces_from_plain, spaces_to_plain, SavedSpacesError
from pipeline.policy.loading import build_policy_from_checkpoint, load_policy
from pipeline.run import agents

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: a module that leaves a marker file when imported, and registers a CartPole twin under its own name
MODULE = '''import os, gymnasium as gym
open(os.environ['RLPIPE_TEST_MARKER'], 'a').write('imported\\n')
gym.register('TwinPole-v1', entry_point='gymnasium.envs.classic_control.cartpole:CartPoleEnv', max_episode_steps=500)
'''


@pytest.fixture(scope='module')
def files(tmp_path_factory):
    """Agent files of each algorithm (untrained), and the folder of a module that marks its import."""
    d = tmp_path_factory.mktemp('files')
    out = {'dir': d}
    for cls, env in ((agents.DQN, 'CartPole-v1'), (agents.PPO, 'CartPole-v1'), (agents.SAC, 'Pendulum-v1')):
        out[cls.algo] = cls(env, seed=0).save(str(d / f'{cls.algo}.pth.tar'))
    (d / 'rlpipe_marker_env.py').write_text(MODULE)
    return out


@pytest.fixture
def marker(files, tmp_path, monkeypatch):
    """The marker file the module writes when imported (it must stay absent), with the module importable."""
    path = tmp_path / 'imported.txt'
    monkeypatch.setenv('RLPIPE_TEST_MARKER', str(path))
    monkeypatch.syspath_prepend(str(files['dir']))
    yield path
    sys.modules.pop('rlpipe_marker_env', None)


def edited(src, dst, edit):
    state = torch.load(src, weights_only=True)
    edit(state)
    torch.save(state, dst)
    return str(dst)


def with_env_id(env_id, drop_spaces=False):
    def edit(state):
        state['extra']['config']['env']['env_id'] = env_id
        if drop_spaces:
            del state['extra']['spaces']
    return edit


# ----------------------------------------------------------------------------- module:Name env ids
@pytest.mark.parametrize('algo', ['dqn', 'ppo', 'sac'])
def test_loading_an_agent_file_never_imports_the_module_its_env_id_names(files, marker, tmp_path, algo):
    path = edited(files[algo], tmp_path / 'evil.pth.tar', with_env_id('rlpipe_marker_env:TwinPole-v1'))
    cls = getattr(agents, algo.upper())
    agent = cls.load(path)  # sized from the spaces in the file, not from an env
    action = agent.predict(agent.observation_space.sample())
    assert agent.action_space.contains(action) or algo == 'sac'
    load_policy(path)
    for use in (lambda: agent.evaluate(episodes=1), lambda: agent.train(max_env_step=8)):
        with pytest.raises(agents.AgentError) as e:
            use()
        assert "would import the module 'rlpipe_marker_env'" in str(e.value) and 'env_id=' in str(e.value)
        assert '\n' not in str(e.value)
    assert not marker.exists()


def test_an_older_file_without_spaces_and_a_module_env_id_is_refused_before_any_import(files, marker, tmp_path):
    path = edited(files['ppo'], tmp_path / 'old.pth.tar', with_env_id('rlpipe_marker_env:TwinPole-v1', True))
    with pytest.raises(agents.AgentError, match="would import the module 'rlpipe_marker_env'"):
        agents.PPO.load(path)
    with pytest.raises(CheckpointError, match="would import the module 'rlpipe_marker_env'"):
        load_policy(path)  # PPO sizes its net from the spaces: without them it would make the env
    assert not marker.exists()


def test_the_user_names_the_env_and_then_it_is_made(files, marker, tmp_path):
    path = edited(files['dqn'], tmp_path / 'named.pth.tar', with_env_id('rlpipe_marker_env:TwinPole-v1'))
    agent = agents.DQN.load(path, env_id='rlpipe_marker_env:TwinPole-v1')
    assert len(agent.evaluate(episodes=1)) == 1
    assert marker.read_text() == 'imported\n'  # the user's own choice
    old = edited(files['ppo'], tmp_path / 'old.pth.tar', with_env_id('rlpipe_marker_env:TwinPole-v1', True))
    assert load_policy(old, env_id='rlpipe_marker_env:TwinPole-v1') is not None


def _play(args, env=None, cwd=None):
    return subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'dqn_cartpole.py'), *args],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


@pytest.mark.multiprocess
@pytest.mark.slow
def test_play_refuses_a_module_env_id_in_one_line_unless_the_run_names_it(files, tmp_path):
    path = edited(files['dqn'], tmp_path / 'evil.pth.tar', with_env_id('rlpipe_marker_env:TwinPole-v1'))
    marker = tmp_path / 'imported.txt'
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join([str(files['dir']), ROOT]), 'RLPIPE_TEST_MARKER': str(marker)}
    r = _play(['--play', path, '--episodes', '1'], env, tmp_path)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().count('\n') == 0 and 'Traceback' not in r.stderr
    assert "would import the module 'rlpipe_marker_env'" in r.stderr and '--set env.env_id=' in r.stderr
    assert not marker.exists()
    r = _play(['--play', path, '--episodes', '1', '--set', 'env.env_id=rlpipe_marker_env:TwinPole-v1'], env, tmp_path)
    assert r.returncode == 0, r.stderr
    assert 'mean return over 1 episodes' in r.stdout and marker.exists()


# ----------------------------------------------------------------------------- the saved config is checked
@pytest.mark.multiprocess
def test_a_saved_config_the_schema_refuses_names_every_bad_key_at_load(files, tmp_path):
    def edit(state):
        learn = state['extra']['config']['policy']['learn']
        learn['learning_rate'], learn['batch_size'] = 'abc', -3
    path = edited(files['dqn'], tmp_path / 'bad.pth.tar', edit)
    for load in (agents.DQN.load, load_policy):
        with pytest.raises(ValueError) as e:
            load(path)
        msg = str(e.value)
        assert 'policy.learn.learning_rate' in msg and 'policy.learn.batch_size' in msg and '\n' not in msg
    r = _play(['--play', path], cwd=tmp_path)
    assert r.returncode == 2 and 'policy.learn.learning_rate' in r.stderr and 'Traceback' not in r.stderr


@pytest.mark.multiprocess
def test_a_network_above_the_parameter_budget_is_refused_before_it_is_allocated(files, tmp_path):
    def edit(state):
        state['extra']['config']['policy']['model']['encoder_hidden_size_list'] = [60000, 60000]
    path = edited(files['dqn'], tmp_path / 'big.pth.tar', edit)
    for load in (agents.DQN.load, build_policy_from_checkpoint):
        with pytest.raises(ValueError, match=r'builds networks of 10,801,140,003 parameters, more than the limit of '
                                             r'50,000,000.*max_params=N'):
            load(path)
    r = _play(['--play', path], cwd=tmp_path)
    assert r.returncode == 2 and '--max-params N' in r.stderr and 'Traceback' not in r.stderr


def test_the_parameter_budget_is_lifted_by_an_explicit_argument(files):
    with pytest.raises(agents.AgentError, match='more than the limit of 100;'):
        agents.DQN.load(files['dqn'], max_params=100)
    n = sum(p.numel() for p in agents.DQN.load(files['dqn'], max_params=None).policy.model.parameters())
    assert agents.DQN.load(files['dqn'], max_params=n).env_step == 0  # at the limit: allowed
    with pytest.raises(CheckpointError, match=f'builds networks of {n:,} parameters, more than the limit of {n - 1:,}'):
        load_policy(files['dqn'], max_params=n - 1)


# ----------------------------------------------------------------------------- the stored spaces
def test_spaces_round_trip_and_a_malformed_entry_is_refused(files, tmp_path):
    import gymnasium as gym
    import numpy as np

    box = gym.spaces.Box(np.array([-1.0, -2.0], dtype=np.float32), np.array([1.0, np.inf], dtype=np.float32))
    obs, act = spaces_from_plain(spaces_to_plain(box, gym.spaces.Discrete(3, start=1)))
    assert obs == box and act == gym.spaces.Discrete(3, start=1)
    assert spaces_to_plain(gym.spaces.MultiBinary(3), gym.spaces.Discrete(2)) is None  # not stored
    plain = spaces_to_plain(box, gym.spaces.Discrete(3))
    for what, change in [('shape', [1 << 20, 1 << 20]), ('shape', [0]), ('dtype', 'object'), ('low', [1.0, 2.0]),
                         ('type', 'Dict')]:
        bad = {'observation': {**plain['observation'], what: change}, 'action': plain['action']}
        with pytest.raises(SavedSpacesError, match=f'spaces.observation.{what}'):
            spaces_from_plain(bad)
    path = edited(files['ppo'], tmp_path / 'spaces.pth.tar',
                  lambda s: s['extra']['spaces']['action'].update(n=-1))
    with pytest.raises(agents.AgentError, match=r'spaces.action.n: expected an int'):
        agents.PPO.load(path)
