"""The first hour of a user with the examples: --help without torch, run folders, Ctrl-C and resume,
--play, loading a policy in three lines, clear errors, extra middleware, the progress display."""
import importlib.util
import io
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ['dqn_cartpole', 'her_bitflip', 'her_point', 'dqn_rnd', 'hello_pipeline', 'ppo_cartpole', 'ppo_pendulum',
            'ppo_mujoco']
TRAINING = ['dqn_cartpole', 'her_bitflip', 'her_point', 'dqn_rnd', 'ppo_cartpole', 'ppo_pendulum', 'ppo_mujoco']
SMALL = ['--set', 'policy.learn.learning_starts=64', '--set', 'policy.learn.batch_size=16', '--no-progress']


def env_with_root():
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
    return env


def load(name):
    spec = importlib.util.spec_from_file_location(f'{name}_cli_test', os.path.join(ROOT, 'examples', f'{name}.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize('name, args', [('dqn_rnd', (10, 0)), ('her_bitflip', (4, 0)), ('her_point', (0,))])
def test_an_examples_make_config_gives_its_config(name, args):
    """The examples' ``make_config`` (used from Python, not by their command line) builds the config."""
    cfg = load(name).make_config(*args)
    assert cfg.seed == args[-1] and cfg.policy.learn.batch_size > 0


@pytest.mark.multiprocess
@pytest.mark.parametrize('name', EXAMPLES)
def test_help_answers_without_importing_torch(name, help_without_torch):
    text = help_without_torch(os.path.join(ROOT, 'examples', f'{name}.py'))
    if name in TRAINING:
        for flag in ('--exp-name', '--seed', '--set', '--resume', '--play', '--video', '--middleware', '--device'):
            assert flag in text, f'{name} --help lacks {flag}'


def test_new_run_dirs_count_up_and_one_launch_shares_one(tmp_path):
    from pipeline.run import new_run_dir

    a = new_run_dir('exp', root=str(tmp_path), launch_id='')
    b = new_run_dir('exp', root=str(tmp_path), launch_id='')
    assert (os.path.basename(a), os.path.basename(b)) == ('1', '2')
    c = new_run_dir('exp', root=str(tmp_path), launch_id='L1')  # the first node of a launch makes it
    d = new_run_dir('exp', root=str(tmp_path), launch_id='L1')  # the others find it
    e = new_run_dir('exp', root=str(tmp_path), launch_id='L2')
    assert c == d == str(tmp_path / 'exp' / '3') and e == str(tmp_path / 'exp' / '4')


@pytest.mark.multiprocess
@pytest.mark.slow
def test_bad_resume_or_play_paths_fail_at_once_with_a_message(tmp_path):
    junk = tmp_path / 'junk.pth.tar'
    junk.write_bytes(b'garbage' * 20)
    cases = [(['--resume', 'nope.pth.tar'], 'no checkpoint at'), (['--resume', str(tmp_path)], 'is a directory'),
             (['--set', 'nokeyvalue'], 'an override is KEY=VALUE'), (['--middleware', 'nomodule'], 'MODULE:FACTORY'),
             (['--render'], '--render and --video go with --play'), (['--resume', str(junk)], 'not a checkpoint file')]
    for argv, words in cases:
        p = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'dqn_cartpole.py'), *argv],
                           capture_output=True, text=True, timeout=120, env=env_with_root(), cwd=str(tmp_path))
        assert p.returncode != 0 and words in p.stderr, (argv, p.stderr[-800:])
        assert 'Traceback' not in p.stderr and 'weights_only=False' not in p.stderr
    assert not (tmp_path / 'cartpole_dqn').exists()  # nothing was started


def test_dqn_on_a_continuous_action_space_names_sac(tmp_path, monkeypatch):
    import gymnasium as gym

    from pipeline.policy.common import discrete_action_count

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        load('dqn_cartpole').main(['--set', 'env.env_id=Pendulum-v1', '--set', 'env.stop_value=0', '--no-progress'])
    assert 'DQN needs a discrete action space' in str(e.value) and 'SAC' in str(e.value) and e.value.code == 2
    assert discrete_action_count(gym.spaces.Discrete(3)) == 3


def test_an_mlp_example_takes_only_a_vector_space_and_says_what_fits_otherwise():
    import gymnasium as gym
    import numpy as np

    from pipeline.policy.common import vector_size

    assert vector_size(gym.spaces.Box(-1, 1, (5,), np.float32)) == 5
    assert vector_size(gym.spaces.Box(-1, 1, (2,), np.float32), 'action', 'SAC') == 2
    with pytest.raises(ValueError, match=r'DQN with an MLP needs a 1-D Box observation space.*examples/dqn_atari.py'):
        vector_size(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    for space in (gym.spaces.Discrete(16), gym.spaces.Dict({'a': gym.spaces.Box(-1, 1, (2,))}),
                  gym.spaces.Box(-1, 1, (3, 3), np.float32)):
        with pytest.raises(ValueError, match='DQN with an MLP needs a 1-D Box observation space.*FlattenObservation'):
            vector_size(space)
    with pytest.raises(ValueError, match='SAC with an MLP needs a 1-D Box action space.*Discrete actions use DQN'):
        vector_size(gym.spaces.Discrete(3), 'action', 'SAC')


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ctrl_c_saves_once_prints_the_resume_command_and_resume_continues(tmp_path, monkeypatch, capsys, caplog):
    import threading

    cmd = [sys.executable, os.path.join(ROOT, 'examples', 'dqn_cartpole.py'), '--max-env-step', '200000', *SMALL]
    # SIGINT as Ctrl-C in a terminal delivers it, even when pytest itself runs in the background (a
    # shell's `&` starts it with SIGINT ignored, and Python then raises no KeyboardInterrupt)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env_with_root(),
                            cwd=str(tmp_path), preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err_lines = []
    trained = threading.Event()

    def read_err():
        for ln in proc.stderr:
            err_lines.append(ln)
            if 'train iter 100:' in ln:
                trained.set()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    try:
        assert trained.wait(240), ''.join(err_lines)[-2000:]  # training runs: interrupt it
        proc.send_signal(signal.SIGINT)
        out = proc.stdout.read()
        proc.wait(timeout=120)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = ''.join(err_lines)
    assert proc.returncode == 130, out[-1000:] + err[-2000:]
    assert 'Traceback' not in err and 'KeyboardInterrupt' not in err
    assert sum('interrupted at' in ln for ln in out.splitlines()) == 1
    final = tmp_path / 'cartpole_dqn' / '1' / 'ckpt' / 'final.pth.tar'
    assert f'saved {final}' in out and (tmp_path / 'cartpole_dqn' / '1' / 'ckpt' / 'final.buffer').is_file()
    argv = shlex.split(re.search(r'resume with: (.+)', out).group(1))
    assert argv[1] == cmd[1] and argv[-2:] == ['--resume', str(final)] and '--max-env-step' in argv
    import torch
    step = torch.load(final, weights_only=True)['counters']['env_step']
    assert step >= 100
    monkeypatch.chdir(tmp_path)  # run the printed command's arguments in this process (faster than a new one)
    with caplog.at_level(logging.INFO):
        load('dqn_cartpole').main(argv[2:] + ['--max-env-step', str(step + 16)])
    assert re.search(rf'after {step + 16} training \+', capsys.readouterr().out)
    msgs = [r.getMessage() for r in caplog.records]
    assert any(m.startswith('replay buffer restored') for m in msgs) and any(f'resumed from {final}' in m for m in msgs)


@pytest.fixture(scope='module')
def trained_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp('trained')
    cwd = os.getcwd()
    os.chdir(d)
    try:
        load('dqn_cartpole').main(['--max-env-step', '400', *SMALL])
    finally:
        os.chdir(cwd)
    best = d / 'cartpole_dqn' / '1' / 'ckpt' / 'eval.pth.tar'
    assert best.is_file()
    return best


def test_play_prints_returns_and_records_video(trained_ckpt, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mod = load('dqn_cartpole')
    assert mod.main(['--play', str(trained_ckpt), '--episodes', '2']) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r'episode \d: return [\d.]+ \(\d+ steps\)', out)) == 2
    assert 'mean return over 2 episodes' in out and not (tmp_path / 'cartpole_dqn').exists()
    try:
        import moviepy  # noqa: F401
    except ImportError:
        pytest.skip('moviepy is not installed (pip install -e .[video]): --video not checked')
    assert mod.main(['--play', str(trained_ckpt), '--episodes', '1', '--video', str(tmp_path / 'vid')]) == 0
    assert [f for f in os.listdir(tmp_path / 'vid') if f.endswith('.mp4')]


def test_a_policy_loads_from_a_checkpoint_in_three_lines(trained_ckpt):
    import gymnasium as gym
    import numpy as np

    from pipeline.policy import load_policy
    policy = load_policy(str(trained_ckpt))
    env = gym.make('CartPole-v1')
    obs, _ = env.reset(seed=0)
    action = policy(obs[None])[0]
    assert int(action) in (0, 1)
    from pipeline.checkpoint import CheckpointError
    with pytest.raises(CheckpointError, match='not a checkpoint file'):
        load_policy(__file__)
    assert isinstance(np.asarray(policy(np.zeros((3, 4), np.float32))), np.ndarray)


calls = []


def recording_factory(cfg):
    """Used by --middleware tests.test_examples_cli:recording_factory."""
    def record(ctx):
        calls.append(ctx.env_step)
    return record


def test_extra_middleware_by_argument_and_by_flag(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(os.path.dirname(os.path.abspath(__file__)))
    mod = load('dqn_cartpole')
    seen = []
    import test_examples_cli as me
    me.calls.clear()
    mod.main(['--max-env-step', '32', '--middleware', 'test_examples_cli:recording_factory', *SMALL],
             extra_middleware=[lambda ctx: seen.append(ctx.env_step)])
    assert seen == list(range(4, 33, 4))  # after the collector (4 env steps per step), every step
    assert me.calls == list(range(4, 33, 4))


def test_progress_lines_have_rate_and_eta_and_log_lines_stay_whole():
    from middleware.functional.logger import ProgressDisplay
    from pipeline.run import setup_logging

    buf = io.StringIO()
    d = ProgressDisplay(buf, total=1000, interval=0.0, use_tqdm=False)
    d.update(10, 'train_iter 1')  # at once: no rate over a ~0 s interval (it read e.g. "56198891 steps/s")
    first = buf.getvalue().strip()
    assert 'env_step 10/1000' in first and 'steps/s' not in first and 'ETA' not in first, first
    buf.seek(0)
    buf.truncate()
    d._t0 -= 2.0  # as if started 2 s ago
    d.update(100, 'train_iter 5')
    line = buf.getvalue().strip()
    assert 'env_step 100/1000 (10%)' in line and 'steps/s' in line and 'train_iter 5' in line
    assert re.search(r'ETA to the step budget \d\d:\d\d', line), line

    buf = io.StringIO()
    handler = setup_logging(stream=buf)
    try:
        bar = ProgressDisplay(buf, total=1000, use_tqdm=True)
        bar.update(10, 'train_iter 1')
        logging.getLogger('x').info('hello from a log line')
        bar.update(20, 'train_iter 2')
        bar.close()
    finally:
        logging.getLogger().removeHandler(handler)
    text = buf.getvalue()
    log_lines = [seg for seg in re.split(r'[\r\n]', text) if 'hello from a log line' in seg]
    assert log_lines and all(re.fullmatch(r'\d\d:\d\d:\d\d hello from a log line', s.strip()) for s in log_lines)
    assert 'env steps' in text  # the bar's unit


def test_the_bar_names_its_estimate_the_time_to_the_step_budget_and_drops_it_when_the_run_stops_early():
    """A run that stops on an evaluation target ends long before its step budget: while it runs, the bar's
    remaining time is labelled as the time to the budget; the bar left on screen at the end shows none."""
    from middleware.functional.logger import ProgressDisplay

    def segments(total, steps):
        buf = io.StringIO()
        bar = ProgressDisplay(buf, total=total, use_tqdm=True)
        for n in steps:
            time.sleep(0.01)
            bar.update(n, 'train_iter 1')
        bar.close()
        return [seg for seg in re.split(r'[\r\n]', buf.getvalue()) if seg.strip()]

    shown = segments(300_000, [1000, 2000, 3000])   # stops at 1% of the budget (e.g. solved)
    assert all('to the step budget' in seg for seg in shown[:-1]), shown
    assert not any('<' in seg for seg in shown), shown   # tqdm's unlabelled "[elapsed<remaining" ETA
    last = shown[-1]
    assert '3.00k/300k' in last and 'stopped before the step budget' in last, last
    assert 'to the step budget,' not in last, last
    done = segments(1000, [500, 1000])              # reached the budget: nothing to correct
    assert 'stopped' not in done[-1] and '1.00k/1.00k' in done[-1], done


def test_end_of_run_lines_name_the_node_in_a_multi_node_run_only(capsys, monkeypatch):
    import pipeline.runtime.node as node_mod
    from pipeline.run import node_print

    node_print('\nsolved: last mean eval return 500.0', 'run folder: x')   # one process: as is
    assert capsys.readouterr().out == '\nsolved: last mean eval return 500.0\nrun folder: x\n'
    monkeypatch.setattr(node_mod, 'node_label', lambda: 'node 3 evaluator')
    node_print('\nsolved: last mean eval return 500.0', 'run folder: x')
    assert capsys.readouterr().out == ('\n[node 3 evaluator] solved: last mean eval return 500.0\n'
                                       '[node 3 evaluator] run folder: x\n')
