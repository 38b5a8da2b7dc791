"""Truncated checkpoints and buffer files (issue 28, item 7), with the unchanged examples/dqn_cartpole.py run as
a process: a truncated ``final.buffer`` given to ``--resume`` is one line on stderr, exit status 2 and no run
folder; a restarted learner (``RLPIPE_RESTARTS``, as set by ``rlpipe run --auto-recover`` and the Ray launcher)
passes over a truncated newest checkpoint, says so in one line and resumes from the newest intact one."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'examples', 'dqn_cartpole.py')
SHORT = ['--max-env-step', '64', '--no-progress', '--set', 'policy.learn.learning_starts=16']

pytestmark = [pytest.mark.timeout(300), pytest.mark.multiprocess, pytest.mark.slow]


def _run(cwd, *argv, **env_extra):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
    for k in ('RLPIPE_KEY', 'RLPIPE_RESTARTS', 'RLPIPE_LAUNCH_ID', 'RLPIPE_NODE', 'RLPIPE_MAX_RESTARTS'):
        env.pop(k, None)
    env.update(env_extra)
    return subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=240, env=env,
                          cwd=str(cwd))


def _truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_a_truncated_buffer_or_checkpoint_given_to_resume_is_one_line_exit_2_and_no_run_folder(tmp_path):
    p = _run(tmp_path, *SHORT, '--exp-name', 'base')
    ckpt = tmp_path / 'base' / '1' / 'ckpt'
    assert (ckpt / 'final.buffer').is_file(), p.stdout[-2000:] + p.stderr[-2000:]
    _truncate(ckpt / 'final.buffer')
    p = _run(tmp_path, *SHORT, '--exp-name', 'resumed', '--resume', str(ckpt / 'final.pth.tar'))
    assert p.returncode == 2, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and 'final.buffer is truncated' in lines[0] and lines[0].startswith('error: --resume'), \
        p.stderr[-3000:]
    assert not (tmp_path / 'resumed').exists()
    _truncate(ckpt / 'final.pth.tar')
    p = _run(tmp_path, *SHORT, '--exp-name', 'resumed', '--resume', str(ckpt / 'final.pth.tar'))
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr[-3000:]
    assert 'checkpoint' in p.stderr and 'final.pth.tar is truncated' in p.stderr, p.stderr[-3000:]
    assert not (tmp_path / 'resumed').exists()


@pytest.mark.parametrize('broken', ['final.buffer', 'final.pth.tar'])
def test_a_restarted_learner_resumes_from_the_newest_intact_checkpoint(tmp_path, broken):
    launch = {'RLPIPE_LAUNCH_ID': 'launch-7', 'RLPIPE_NODE': json.dumps({'node_id': 0, 'roles': ['learner']})}
    p = _run(tmp_path, *SHORT, '--exp-name', 'job', **launch)
    ckpt = tmp_path / 'job' / '1' / 'ckpt'
    assert (ckpt / 'final.buffer').is_file(), p.stdout[-2000:] + p.stderr[-2000:]
    # an older periodic checkpoint with its buffer, intact; the newest one is cut short
    shutil.copy(ckpt / 'final.pth.tar', ckpt / 'iteration_40.pth.tar')
    shutil.copy(ckpt / 'final.buffer', ckpt / 'iteration_40.buffer')
    for name in ('iteration_40.pth.tar', 'iteration_40.buffer'):
        _age(ckpt / name, 60)
    _truncate(ckpt / broken)
    p = _run(tmp_path, *SHORT, '--exp-name', 'job', '--max-env-step', '128', RLPIPE_RESTARTS='1', **launch)
    err = p.stdout + p.stderr
    assert p.returncode in (0, 1), err[-4000:]  # 1: trained to its budget without solving CartPole
    said = [line for line in err.splitlines() if f'{broken} is truncated' in line]
    assert len(said) == 1 and f'using the newest intact checkpoint, {ckpt / "iteration_40.pth.tar"}' in said[0], \
        err[-4000:]
    assert f'resuming from {ckpt / "iteration_40.pth.tar"}' in err, err[-4000:]
    assert 'replay buffer restored from' in err and 'Traceback' not in err, err[-4000:]
