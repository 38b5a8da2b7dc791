"""The "watch it" command printed at the end of a run (issue 27, items 2 and 9): it names the example
that ran, and ``--play ... --render`` without a display or without pygame says what to install in
one line and plays on without a window instead of a traceback."""
import os
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def random_policy(obs):
    import numpy as np

    return np.zeros(len(obs), dtype=np.int64)


def make_cartpole(mode):
    import gymnasium as gym

    return gym.make('CartPole-v1', render_mode=mode)


def test_render_without_a_display_plays_without_a_window(monkeypatch):
    from pipeline.run.play import play_policy

    monkeypatch.delenv('DISPLAY', raising=False)
    monkeypatch.delenv('WAYLAND_DISPLAY', raising=False)
    monkeypatch.setattr(sys, 'platform', 'linux')
    lines = []
    returns = play_policy(random_policy, make_cartpole, episodes=2, render=True, print_fn=lines.append)
    assert len(returns) == 2 and all(r > 0 for r in returns)
    notes = [line for line in lines if line.startswith('--render:')]
    assert len(notes) == 1 and 'no display' in notes[0] and "pip install -e '.[video]'" in notes[0]


def test_render_without_pygame_says_what_to_install_and_plays_on(monkeypatch):
    from pipeline.run.play import play_policy

    monkeypatch.setenv('DISPLAY', ':99')
    monkeypatch.setitem(sys.modules, 'pygame', None)  # `import pygame` raises ImportError
    lines = []
    returns = play_policy(random_policy, make_cartpole, episodes=1, render=True, print_fn=lines.append)
    assert len(returns) == 1
    notes = [line for line in lines if line.startswith('--render:')]
    assert len(notes) == 1 and 'pygame' in notes[0] and "pip install -e '.[video]'" in notes[0]
    assert lines[-1].startswith('mean return over 1 episodes')


def _env():
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
    env.pop('DISPLAY', None)
    env.pop('WAYLAND_DISPLAY', None)
    return env


@pytest.mark.multiprocess
@pytest.mark.slow
def test_ppo_pendulum_names_itself_and_its_watch_it_command_runs(tmp_path):
    script = os.path.join(ROOT, 'examples', 'ppo_pendulum.py')
    args = ['--max-env-step', '128', '--set', 'policy.collect.n_steps=16', '--set', 'policy.learn.batch_size=32',
            '--set', 'policy.eval.evaluator.eval_freq=1', '--set', 'env.evaluator_env_num=1',
            '--set', 'env.n_evaluator_episode=1', '--no-progress']
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                       env=_env())
    assert p.returncode == 0, p.stderr[-3000:]
    watch = [line for line in p.stdout.splitlines() if 'watch it:' in line]
    assert len(watch) == 1, p.stdout
    cmd = shlex.split(watch[0].split('watch it:', 1)[1])
    assert os.path.basename(cmd[1]) == 'ppo_pendulum.py' and cmd[-1] == '--render'
    q = subprocess.run([sys.executable, *cmd[1:], '--episodes', '1'], capture_output=True, text=True, timeout=300,
                       cwd=str(tmp_path), env=_env())
    assert q.returncode == 0, q.stderr[-3000:]
    assert 'Traceback' not in q.stderr
    assert '--render: no display' in q.stdout and 'mean return over 1 episodes' in q.stdout
