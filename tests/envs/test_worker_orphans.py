"""Env workers never outlive their parent and leave no files (issue 28, item 6).

A parent process makes a subprocess env manager whose envs hang in ``step`` (one in Python code, one in C code
that holds the GIL), starts a step and is killed with SIGKILL: its workers end within a bounded time and the
temp folder it used is empty. Run with the default start method and with ``spawn``.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [pytest.mark.timeout(120), pytest.mark.multiprocess]

PARENT = textwrap.dedent('''
    import ctypes, os, sys, time
    import gymnasium as gym
    import numpy as np
    from pipeline.envs import EnvManager

    class HangingEnv(gym.Env):
        def __init__(self, how):
            self.how = how
            self.observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
            self.action_space = gym.spaces.Discrete(2)

        def reset(self, seed=None, options=None):
            return np.zeros(2, np.float32), {}

        def step(self, action):
            open(os.path.join(sys.argv[1], 'hanging-%d' % os.getpid()), 'w').close()
            if self.how == 'c':
                ctypes.CDLL(None).sleep(600)   # in C, without releasing the GIL
            time.sleep(600)
            return np.zeros(2, np.float32), 0.0, False, False, {}

    def make(how):
        return lambda: HangingEnv(how)

    if __name__ == '__main__':
        start = sys.argv[2] if sys.argv[2] != 'default' else None
        m = EnvManager([make('py'), make('c')], 2, backend='subprocess', workers=2, step_timeout=None,
                       start_method=start)
        m.reset()
        with open(os.path.join(sys.argv[1], 'workers'), 'w') as f:
            f.write(' '.join(str(p.pid) for p in m._backend._procs))
        m.step(np.array([0, 0]))   # hangs
''')


def _gone(pid: int) -> bool:
    try:
        with open(f'/proc/{pid}/stat') as f:
            return f.read().rsplit(')', 1)[1].split()[0] in ('Z', 'X')  # a zombie nobody reaped is gone
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not sys.platform.startswith('linux'), reason='reads /proc')
@pytest.mark.parametrize('start', ['default', 'spawn'])
def test_workers_die_with_a_killed_parent_and_leave_no_files(tmp_path, start):
    out, tmp = tmp_path / 'out', tmp_path / 'tmp'
    out.mkdir()
    tmp.mkdir()
    script = tmp_path / 'parent.py'
    script.write_text(PARENT)
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    parent = subprocess.Popen([sys.executable, str(script), str(out), start], env=env, cwd=str(tmp_path),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 90
        while len([p for p in os.listdir(out) if p.startswith('hanging-')]) < 2:
            assert parent.poll() is None, parent.communicate()[0][-3000:]
            assert time.monotonic() < end, 'the workers did not start stepping'
            time.sleep(0.1)
        pids = [int(x) for x in (out / 'workers').read_text().split()]
        assert len(pids) == 2 and not any(_gone(p) for p in pids)
    except BaseException:
        parent.kill()
        raise
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    end = time.monotonic() + 20
    while not all(_gone(p) for p in pids) and time.monotonic() < end:
        time.sleep(0.1)
    alive = [p for p in pids if not _gone(p)]
    for p in alive:  # do not leave them behind when the test fails
        os.kill(p, signal.SIGKILL)
    assert not alive, f'workers {alive} outlived their parent'
    assert os.listdir(tmp) == [], os.listdir(tmp)
