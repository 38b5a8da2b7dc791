"""A node that the launcher restarted (RLPIPE_RESTARTS >= 1) resumes the launch's run from its newest learner
checkpoint through ``prepare_run`` (what every training example calls); other nodes and first starts do not."""
import argparse
import json
import os
import re
import time

import pytest

from pipeline.checkpoint import latest_checkpoint
from pipeline.run import new_run_dir, prepare_run


def _args(**kw):
    base = dict(exp_name='exp', seed=0, set=[], resume=None, play=None, render=False, video=None, middleware=[])
    return argparse.Namespace(**{**base, **kw})


def _touch(path, age):
    with open(path, 'wb') as f:
        f.write(b'x')
    t = time.time() - age
    os.utime(path, (t, t))


def test_latest_checkpoint_is_the_newest_learner_file_never_the_evaluators(tmp_path):
    assert latest_checkpoint(str(tmp_path / 'missing')) is None
    _touch(tmp_path / 'iteration_1000.pth.tar', 30)
    _touch(tmp_path / 'iteration_2000.pth.tar', 20)
    _touch(tmp_path / 'eval.pth.tar', 0)
    _touch(tmp_path / 'iteration_x.pth.tar', 0)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / 'iteration_2000.pth.tar')
    _touch(tmp_path / 'final.pth.tar', 10)
    assert latest_checkpoint(str(tmp_path)) == str(tmp_path / 'final.pth.tar')


def test_a_restarted_learner_resumes_the_shared_run_other_nodes_and_first_starts_do_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv('RLPIPE_LAUNCH_ID', 'launch-1')
    run_dir = new_run_dir('exp')  # what the first incarnation made
    os.makedirs(os.path.join(run_dir, 'ckpt'))
    _touch(os.path.join(run_dir, 'ckpt', 'iteration_1000.pth.tar'), 5)
    node = {'node_id': 0, 'address': 'tcp://127.0.0.1:1', 'peers': {}, 'roles': ['learner']}
    monkeypatch.setenv('RLPIPE_NODE', json.dumps(node))
    monkeypatch.setenv('RLPIPE_RESTARTS', '0')
    first = prepare_run(_args(), {})
    assert first.resume is None and first.dir is None  # a first start makes its folder later, as before
    monkeypatch.setenv('RLPIPE_RESTARTS', '1')
    again = prepare_run(_args(), {})
    assert again.dir == run_dir and again.resume == os.path.join(run_dir, 'ckpt', 'iteration_1000.pth.tar')
    monkeypatch.setenv('RLPIPE_NODE', json.dumps({**node, 'roles': ['collector']}))
    assert prepare_run(_args(), {}).resume is None  # only a learner resumes
    monkeypatch.delenv('RLPIPE_LAUNCH_ID')
    monkeypatch.setenv('RLPIPE_NODE', json.dumps(node))
    assert prepare_run(_args(), {}).resume is None  # no launch: nothing to continue


@pytest.mark.multiprocess
@pytest.mark.slow
def test_plain_launcher_auto_recover_restarts_a_killed_learner_that_resumes_from_its_checkpoint(tmp_path):
    """The unchanged examples/dqn_cartpole.py under `rlpipe run --auto-recover` (local processes): the learner
    SIGKILLs itself after its first periodic checkpoint; the launcher restarts it with RLPIPE_RESTARTS=1, and it
    resumes from that checkpoint with its counters (not from zero) and the replay buffer saved with it, as under
    the Ray launcher."""
    import socket
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(('127.0.0.1', 0))
            ports.append(str(s.getsockname()[1]))
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([root, os.path.join(root, 'tests', 'parallel'), env.get('PYTHONPATH', '')])
    for k in ('RLPIPE_KEY', 'RLPIPE_RESTARTS', 'RLPIPE_LAUNCH_ID', 'RLPIPE_NODE'):
        env.pop(k, None)
    cmd = [sys.executable, '-m', 'pipeline.run.cli', 'run', '--package', root, '--main',
           'examples.dqn_cartpole.main', '--parallel-workers', '2', '--roles', 'learner:collector',
           '--ports', ','.join(ports), '--startup-interval', '0.05', '--stop-grace', '10',
           '--auto-recover', '--max-retries', '1', '--',
           '--no-progress', '--max-env-step', '1500', '--exp-name', 'restart',
           '--set', 'policy.learn.update_per_collect=8', '--set', 'policy.learn.learning_starts=64',
           '--middleware', 'ray_fault_hooks:kill_learner_once']
    p = subprocess.run(cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=400)
    text = p.stdout + p.stderr
    assert 'restarting it (attempt 1 of 1)' in text, text[-3000:]
    assert 'restart 1 of this node: resuming from' in text, text[-3000:]
    assert re.search(r'replay buffer restored from \S+iteration_\d+\.buffer \(\d+ items\)', text), text[-3000:]
    sys.path.insert(0, os.path.join(root, 'tests', 'parallel'))
    try:
        from ray_fault_hooks import check_resumed_run
    finally:
        sys.path.pop(0)
    check_resumed_run(tmp_path)
