"""A typo on the command line costs one or two lines and exit status 2: no traceback, no torch import,
no run folder (issue 27, item 5)."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs an example as __main__ and reports its exit code and whether torch was imported.
RUNNER = ('import runpy, sys\n'
          'sys.argv = sys.argv[1:]\n'
          'try:\n'
          '    runpy.run_path(sys.argv[0], run_name="__main__")\n'
          '    code = 0\n'
          'except SystemExit as e:\n'
          '    code = e.code\n'
          'print("EXIT", code, "TORCH" if "torch" in sys.modules else "NO-TORCH")\n')


def run_example(name, args, cwd):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
    script = os.path.join(ROOT, 'examples', f'{name}.py')
    p = subprocess.run([sys.executable, '-c', RUNNER, script, *args], capture_output=True, text=True, timeout=120,
                       cwd=str(cwd), env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip().splitlines()[-1], p.stderr


def assert_refused(name, args, cwd, *expected):
    last, err = run_example(name, args, cwd)
    assert last == 'EXIT 2 NO-TORCH', (last, err[-2000:])
    lines = err.strip().splitlines()
    assert 1 <= len(lines) <= 2 and lines[0].startswith('error: '), err
    assert 'Traceback' not in err
    for text in expected:
        assert text in err, err
    assert os.listdir(cwd) == [], 'a refused start left files behind'


@pytest.mark.multiprocess
@pytest.mark.parametrize('name', ['dqn_cartpole', 'ppo_cartpole', 'ppo_pendulum', 'ppo_mujoco', 'sac_mujoco',
                                  'dqn_atari', 'ppo_atari', 'her_bitflip', 'her_point', 'dqn_rnd'])
def test_a_misspelled_set_key_is_one_line_and_exit_2(name, tmp_path):
    assert_refused(name, ['--set', 'policy.learn.learnig_rate=1e-3'], tmp_path,
                   'policy.learn.learnig_rate: unknown key', 'did you mean')


@pytest.mark.multiprocess
@pytest.mark.parametrize('name', ['dqn_cartpole', 'ppo_cartpole'])
def test_a_misspelled_env_id_is_one_line_with_the_closest_ids(name, tmp_path):
    assert_refused(name, ['--set', 'env.env_id=CartPol-v1'], tmp_path, "'CartPol-v1'", "did you mean 'CartPole-v1'")


@pytest.mark.multiprocess
def test_a_misspelled_env_flag_is_refused_too(tmp_path):
    assert_refused('sac_mujoco', ['--env', 'HalfCheeta-v5'], tmp_path, "did you mean 'HalfCheetah-v5'")


@pytest.mark.multiprocess
def test_a_value_out_of_range_is_refused_before_torch(tmp_path):
    assert_refused('dqn_cartpole', ['--set', 'policy.learn.learning_rate=-1'], tmp_path,
                   'policy.learn.learning_rate')


def test_precheck_api_names_the_problem():
    from pipeline.run.precheck import UsageError, config_problems, env_id_problem, precheck_config

    assert env_id_problem('CartPole-v1') is None and env_id_problem('gymnasium.envs:Anything-v0') is None
    assert "did you mean 'CartPole-v1'" in env_id_problem('CartPol-v1')
    assert config_problems({'env': {'env_id': 'CartPole-v1'}}, 'dqn', env_check=True) == []
    with pytest.raises(UsageError, match='learnig_rate') as e:
        precheck_config({'policy': {'learn': {'learnig_rate': 1}}}, 'ppo')
    assert e.value.code == 2


def test_a_registered_env_whose_package_is_missing_names_the_extra(monkeypatch):
    import importlib.util

    from pipeline.run.precheck import env_id_problem

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec', lambda name, *a: None if name == 'mujoco' else find_spec(name, *a))
    problem = env_id_problem('HalfCheetah-v5')
    assert "needs the 'mujoco' package" in problem and "pip install -e '.[mujoco]'" in problem
    assert env_id_problem('Pendulum-v1') is None


def test_a_resume_checkpoint_that_does_not_fit_leaves_no_run_folder(tmp_path, monkeypatch):
    import importlib.util

    from pipeline.run import agents

    ckpt = agents.DQN('CartPole-v1').save(str(tmp_path / 'dqn.pth.tar'))  # [128, 128, 64] Q-net, untrained
    spec = importlib.util.spec_from_file_location('dqn_cartpole_typos', os.path.join(ROOT, 'examples', 'dqn_cartpole.py'))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    work = tmp_path / 'work'
    work.mkdir()
    monkeypatch.chdir(work)
    with pytest.raises(SystemExit, match='does not fit'):
        ex.main(['--resume', ckpt, '--set', 'policy.model.encoder_hidden_size_list=[32]', '--no-progress'])
    assert os.listdir(work) == []
