"""Jobs that end and logs that stay small (issue 28, items 3-5), with real processes on loopback started by
``rlpipe run`` (node main: ``fault_nodes2.trio_main``).

- the only collector of a learner/collector/evaluator job is killed (no ``--auto-recover``): the learner stops
  training on stale data in a loop and the job ends after ``collector_timeout``, with one line saying so;
- the learner is paused (SIGSTOP) past the heartbeat timeout: the evaluator neither spins nor floods the log;
- a collector reaches its budget while the learner is paused: the batches it kept are counted as lost and
  said so (what the guarantees table states).

Nothing asserts speed: the bounds are hang guards.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from test_distributed_pipeline import HERE, ROOT, _free_port_base

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

GUARD = 120


def launch(n: int, out: str, main_args, roles: str, heartbeat_timeout: float = 1.5) -> subprocess.Popen:
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    env.pop('RLPIPE_KEY', None)
    cmd = [sys.executable, '-m', 'pipeline.run.cli', 'run', '--package', HERE, '--main', 'fault_nodes2.trio_main',
           '--parallel-workers', str(n), '--topology', 'mesh', '--ports', str(_free_port_base(n)),
           '--startup-interval', '0', '--heartbeat-interval', '0.2', '--heartbeat-timeout', str(heartbeat_timeout),
           '--stop-grace', '5', '--roles', roles, '--', '--out', out, *main_args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                            start_new_session=True)


def _end(proc: subprocess.Popen, timeout: float) -> str:
    try:
        return proc.communicate(timeout=timeout)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out = proc.communicate(timeout=30)[0]
        pytest.fail(f'the job did not end within {timeout} s:\n{out[-6000:]}')


def _wait(pred, what: str, proc: subprocess.Popen, timeout: float = GUARD) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            out = proc.communicate(timeout=30)[0]
            raise AssertionError(f'{what} did not happen within {timeout} s:\n{out[-6000:]}')
        time.sleep(0.1)


def _pid(out, node: int) -> int:
    return int(glob.glob(str(out / f'pid-{node}-*'))[0].rsplit('-', 1)[1])


def _record(out, node: int) -> dict:
    with open(out / f'node-{node}.json') as f:
        return json.load(f)


def test_killing_the_only_collector_ends_the_job_after_collector_timeout(tmp_path):
    out = tmp_path / 'out'
    proc = launch(3, str(out), ['--kill-collector-after', '40', '--wait-timeout', '1', '--collector-timeout', '3'],
                  'learner:collector:evaluator')
    log = _end(proc, GUARD)
    assert 'node 1 crashed (exit code -9)' in log, log[-6000:]
    learner, evaluator = _record(out, 0), _record(out, 2)
    assert learner['finish'] and evaluator['finish'], log[-6000:]
    assert learner['received'] > 0
    # told in one line, and once
    assert log.count('no collector came back within 3 s (collector_timeout); finishing the task') == 1, log[-6000:]
    assert learner['cx_stats']['collector_timeouts'] == 1
    # no training on stale data in a loop: one update per wait of wait_timeout (1 s) during the 3 s, give or take
    assert learner['max_since_data'] <= 8, learner


def test_a_paused_learner_does_not_make_the_evaluator_spin_or_flood_the_log(tmp_path):
    out = tmp_path / 'out'
    proc = launch(3, str(out), ['--wait-timeout', '5'], 'learner:collector:evaluator')
    _wait(lambda: (out / 'trained-20').exists(), 'training', proc)
    pid0 = _pid(out, 0)
    os.kill(pid0, signal.SIGSTOP)
    try:
        _wait(lambda: (out / 'dead-0').exists(), 'the learner declared dead', proc, 60)
        time.sleep(3.0)  # a dead learner for a while (on main: thousands of evaluator steps and log lines a second)
    finally:
        os.kill(pid0, signal.SIGCONT)
    (out / 'finish-now').touch()
    log = _end(proc, GUARD)
    learner, evaluator = _record(out, 0), _record(out, 2)
    assert learner['finish'] and evaluator['finish'], log[-6000:]
    n = log.count('stopped waiting for a learner update')
    # logged when it starts and once more with its count when it ends
    assert 1 <= n <= 2, (n, log[-3000:])
    assert 'stopped waiting for a learner update: no learner is alive: ' in log and 'times in a row' in log, log[-6000:]
    # the evaluator waits for each learner update (one step per update), plus a few backed-off steps while
    # the learner was dead
    assert evaluator['eval_steps'] <= learner['train_iter'] + 40, (evaluator['eval_steps'], learner['train_iter'])


def test_a_collector_finishing_while_the_learner_is_paused_says_its_kept_batches_are_lost(tmp_path):
    out = tmp_path / 'out'
    proc = launch(2, str(out), ['--wait-timeout', '5'], 'learner:collector')
    _wait(lambda: (out / 'trained-20').exists(), 'training', proc)
    pid0 = _pid(out, 0)
    os.kill(pid0, signal.SIGSTOP)
    try:
        _wait(lambda: (out / 'dead-0').exists(), 'the learner declared dead', proc, 60)
        time.sleep(1.0)  # it keeps a few batches
        (out / 'collector-finish').touch()
        _wait(lambda: (out / 'node-1.json').exists(), 'the collector ending', proc, 60)
    finally:
        os.kill(pid0, signal.SIGCONT)
    log = _end(proc, GUARD)
    collector = _record(out, 1)
    assert collector['finish']
    stats = collector['cx_stats']
    assert stats['batches_kept'] >= 1 and stats['kept_dropped'] == 0, stats
    # none reached the learner: all of them are counted and said to be lost
    assert stats['kept_lost'] == stats['batches_kept'], stats
    assert f"finishes with {stats['kept_lost']} collected batches" in log and 'they are lost' in log, log[-6000:]
    assert _record(out, 0)['finish']
