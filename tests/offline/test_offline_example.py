"""examples/offline_cartpole.py runs end to end with --smoke (DQN -> dataset -> CQL and BC), and refuses a bad dataset."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

pytestmark = pytest.mark.multiprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, 'examples', 'offline_cartpole.py')


def _run(*argv, timeout=120):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    return subprocess.run([sys.executable, EXAMPLE, *argv], capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=ROOT)


def test_smoke_run_prints_dataset_and_both_returns(tmp_path):
    path = str(tmp_path / 'd.npz')
    p = _run('--smoke', '--save-dataset', path)
    assert p.returncode == 0, p.stderr[-2000:]
    m = re.search(r'dataset: (\d+) transitions, 4 episodes, mean episode return ([\d.]+)', p.stdout)
    assert m, p.stdout
    for algo in ('CQL', 'BC'):
        assert re.search(rf'{algo}\s+40 updates \(\d+ epochs, [\d.]+ s\): mean return [\d.]+ \+- [\d.]+ over 2 '
                         rf'episodes', p.stdout), p.stdout
    with np.load(path) as f:
        assert len(f['reward']) == int(m.group(1)) and f['terminated'].sum() + f['truncated'].sum() >= 4


def test_bad_dataset_refused_before_training(tmp_path):
    path = str(tmp_path / 'bad.npz')
    n = 20
    np.savez(path, obs=np.zeros((n, 4), np.float32), action=np.zeros(n, np.int64), reward=np.full(n, np.nan),
             next_obs=np.zeros((n, 4), np.float32), terminated=np.eye(n, dtype=bool)[-1], truncated=np.zeros(n, bool))
    p = _run('--dataset', path, '--train-iters', '5')
    assert p.returncode == 2
    assert 'NaN rewards' in p.stderr and 'updates' not in p.stdout


@pytest.mark.slow
def test_mujoco_smoke_run_from_a_sac_buffer_file(tmp_path):
    import pytest

    pytest.importorskip('mujoco', reason='needs the mujoco extra: pip install -e ".[mujoco]"')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    buf = str(tmp_path / 'sac_buffer.pt')
    p = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'offline_mujoco.py'), '--smoke', '--buffer', buf],
                       capture_output=True, text=True, timeout=150, env=env, cwd=str(tmp_path))
    assert p.returncode == 0, p.stderr[-2000:]
    assert os.path.exists(buf)
    m = re.search(r'dataset: (\d+) transitions, (\d+) episodes', p.stdout)
    assert m and 0 < int(m.group(1)) <= 400, p.stdout
    for algo in ('iql', 'cql_continuous'):
        assert re.search(rf'{algo}\s+30 updates .* mean return -?[\d.]+ \+- [\d.]+ over 1 episodes', p.stdout), p.stdout


def test_offline_to_online_smoke_run():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    p = subprocess.run([sys.executable, os.path.join(ROOT, 'examples', 'offline_to_online_cartpole.py'), '--smoke'],
                       capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    n = int(re.search(r'dataset: (\d+) transitions', p.stdout).group(1))
    assert re.search(r'offline: 30 updates, mean return [\d.]+', p.stdout), p.stdout
    m = re.search(r'online: 200 env steps, (\d+) more updates, buffer (\d+) transitions', p.stdout)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) == n + 200, p.stdout  # dataset + collected
