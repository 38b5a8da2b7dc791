"""The distributed middleware with real processes on loopback, started by the ``rlpipe run`` launcher.

- the 4-node DQN pipeline (1 learner, 2 collectors, 1 evaluator) for a short budget: every env step reaches
  the learner once, both collectors deliver, train_iter and weights go back, the evaluator's finish stops
  every node and every node knows the final evaluation;
- a collector killed with SIGKILL: the learner goes on with the other one, or finishes when configured so;
  nothing hangs (bounded timeouts everywhere).
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# A guard against hangs only (nothing here asserts speed): startup alone takes > 90 s on a loaded 2-core machine.
TIMEOUT = 400


def _free_port_base(n: int) -> int:
    import socket
    for _ in range(50):
        socks = []
        try:
            s = socket.socket()
            s.bind(('127.0.0.1', 0))
            base = s.getsockname()[1]
            socks.append(s)
            for i in range(1, n):
                t = socket.socket()
                t.bind(('127.0.0.1', base + i))
                socks.append(t)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError('no block of free ports')


def launch(main: str, n: int, out: str, main_args, extra=(), heartbeat_timeout: float = 1.5) -> subprocess.Popen:
    """``rlpipe run`` in a session of its own, so that ``wait`` can end the launcher and its nodes together."""
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    env.pop('RLPIPE_KEY', None)
    cmd = [sys.executable, '-m', 'pipeline.run.cli', 'run', '--package', HERE, '--main', f'dist_nodes.{main}',
           '--parallel-workers', str(n), '--topology', 'mesh', '--ports', str(_free_port_base(n)),
           '--startup-interval', '0', '--heartbeat-interval', '0.2', '--heartbeat-timeout', str(heartbeat_timeout),
           '--stop-grace', '5', *extra, '--', '--out', out, *main_args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                            start_new_session=True)


def wait(proc: subprocess.Popen, timeout: float = TIMEOUT) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the nodes too: they hold the output pipe open
        out, _ = proc.communicate(timeout=30)
        pytest.fail(f'the run did not end within {timeout} s:\n{out[-5000:]}')
    return out


def excerpt(log: str) -> str:
    """What a failed run's message shows: every node's error lines (a traceback, ERROR/CRITICAL lines, the
    launcher's account of exits) wherever they are in the log, then its last 3000 characters."""
    lines = log.splitlines()
    keep, tb = [], 0
    for line in lines:
        if 'Traceback' in line:
            tb = 40  # the traceback's lines follow
        if tb or ' ERROR ' in line or ' CRITICAL ' in line or 'exited' in line or 'launcher' in line:
            keep.append(line)
            tb = max(tb - 1, 0)
    return '\n'.join(keep[-150:]) + '\n--- last lines ---\n' + log[-3000:]


def results(out_dir: str):
    res = {}
    for name in os.listdir(out_dir):
        if name.endswith('.json'):
            with open(os.path.join(out_dir, name)) as f:
                r = json.load(f)
            res[r['node']] = r
    return res


def test_dqn_four_nodes_learner_gets_everything_once_and_evaluator_finish_stops_all(tmp_path):
    out_dir = str(tmp_path / 'dqn')
    # stop value -1: the evaluator finishes at its first evaluation after >= 40 train iterations; the
    # termination checker's budget (100k env steps) is far away, so only that finish can stop the nodes.
    # What is tested is delivery and finish, not failure detection: a heartbeat timeout that a loaded
    # machine does not reach by accident.
    proc = launch('dqn_main', 4, out_dir, ['--stop-value', '-1', '--eval-freq', '40'], heartbeat_timeout=10)
    log = wait(proc)
    assert proc.returncode == 0, excerpt(log)
    res = results(out_dir)
    assert sorted(res) == [0, 1, 2, 3], excerpt(log)
    learner, c1, c2, ev = res[0], res[1], res[2], res[3]
    assert learner['roles'] == ['learner'] and c1['roles'] == c2['roles'] == ['collector']
    assert ev['roles'] == ['evaluator']
    # every node stopped by the evaluator's finish, long before the env-step budget
    assert all(r['finish'] for r in res.values())
    assert learner['env_step'] < 100_000
    # it finished at an evaluation of trained weights (its first one may come after iteration 40 when the
    # evaluator process starts late on a loaded machine, so only 'trained' is certain)
    assert ev['last_eval_iter'] >= 1
    # env steps reached the learner exactly once: its count is the sum of what the collectors collected
    sent = c1['cx_stats']['env_steps_sent'] + c2['cx_stats']['env_steps_sent']
    assert learner['cx_stats']['env_steps_received'] == learner['env_step']
    assert learner['cx_stats']['duplicates'] == 0
    # each collector's batches: all it sent were received (the last ones may be in flight at finish)
    # (a collector whose process started late on a loaded machine may have sent nothing before the finish)
    delivered = []
    for cid, c in ((1, c1), (2, c2)):
        got = learner['received_from'].get(str(cid), 0)
        assert c['cx_stats']['batches_sent'] - 2 <= got <= c['cx_stats']['batches_sent']
        if got >= 3:  # it waited for an acknowledgement, so learner updates reached it
            delivered.append(c)
    assert delivered, excerpt(log)
    assert sent - 2 * 2 * 3 * 4 <= learner['env_step'] <= sent  # at most 2 batches of 12 steps in flight each
    assert learner['buffer_count'] > 100
    # train_iter and weights went back: collectors saw the learner's train_iter and loaded new versions
    for c in delivered + [ev]:
        assert 0 < c['train_iter'] <= learner['train_iter']
        assert c['model_version'] > 0 and c['mx_stats']['loaded'] >= 1
    assert learner['mx_stats']['sent'] >= 2
    # the evaluator evaluated the learner's weights of its version; at the end everybody knows its result
    for r in res.values():
        assert r['last_eval_value'] == ev['last_eval_value'] and r['last_eval_iter'] == ev['last_eval_iter']
    # collectors follow the global env-step count (exploration schedule of the whole run)
    for c in delivered:
        assert c['env_step'] >= learner['env_step'] * 0.6


@pytest.mark.parametrize('on_lost', ['continue', 'finish'])
def test_killed_collector(tmp_path, on_lost):
    out_dir = str(tmp_path / on_lost)
    # with 'finish', the weights travel with PeriodicalModelExchanger: every 3 train iterations, and a
    # collector uses one version for at most 2 steps before it waits for a newer one
    periodical = ['--period', '3', '--stale', '2'] if on_lost == 'finish' else []
    proc = launch('toy_main', 3, out_dir, ['--kill-node', '1', '--kill-after', '15', '--on-lost', on_lost,
                                           '--max-train-iter', '120', *periodical],
                  extra=['--roles', 'learner:collector:collector'])
    log = wait(proc)
    res = results(out_dir)
    assert sorted(res) == [0, 2], excerpt(log)  # node 1 died before writing anything
    learner, c2 = res[0], res[2]
    assert 'collector node 1 is lost' in log
    assert learner['received_from'].get('1', 0) >= 10  # it delivered before dying
    assert learner['cx_stats']['duplicates'] == 0
    assert learner['cx_stats']['env_steps_received'] == learner['env_step'] == learner['n_received']  # 1 transition per env step
    # the model reached the surviving collector in order, with the learner's weights
    assert c2['model_version'] > 0 and c2['versions_monotonic']
    assert c2['seen_versions'][-1] >= 1
    if on_lost == 'continue':
        assert learner['train_iter'] >= 120  # it went on to its own end with collector 2
        assert learner['received_from']['2'] > learner['received_from']['1']
        assert 'the learner goes on with collectors [2]' in log
    else:
        assert learner['train_iter'] < 120  # it stopped when collector 1 was declared dead
        assert 'finishing the task' in log
        assert learner['finish'] and c2['finish']  # the finish reached the other collector too
        # only versions sent every 3 iterations reached the collector, and it waited for fresh ones
        versions = [v for v in c2['all_seen_versions'] if v >= 1]  # below 1: the initial random weights
        assert len(versions) >= 2 and all((v - versions[0]) % 3 == 0 for v in versions), versions
        assert learner['mx_stats']['sent'] <= learner['train_iter'] // 3 + 2
        # no version was used for more than 2 steps (unless a wait for a newer one timed out)
        assert c2['longest_use_of_one_version'] <= 2 or c2['mx_stats']['wait_timeouts'] > 0


def test_storage_reads_and_removes_only_its_own_batch_files(tmp_path):
    """Batches travel as files in storage=; messages naming other files (outside, by '..', a symlink, a
    non-batch name) neither read nor remove them, are counted, and the collector does not stall."""
    storage, out_dir = tmp_path / 'storage', str(tmp_path / 'out')
    storage.mkdir()
    victims = []
    for name in ('outside.rlp', 'ctx-1-1-999.rlp'):
        v = tmp_path / name
        v.write_bytes(b'precious')
        victims.append(v)
    (storage / 'ctx-1-1-998.rlp').symlink_to(victims[0])
    (storage / 'notes.txt').write_bytes(b'precious')
    forged = [str(victims[0]), str(storage / '..' / 'ctx-1-1-999.rlp'), 'ctx-1-1-998.rlp',
              str(storage / 'notes.txt'), '../ctx-1-1-999.rlp']
    proc = launch('toy_main', 2, out_dir, ['--max-train-iter', '30', '--storage', str(storage),
                                           '--forge', ','.join(forged)],
                  extra=['--roles', 'learner:collector'], heartbeat_timeout=10)
    log = wait(proc)
    assert proc.returncode == 0, excerpt(log)
    learner = results(out_dir)[0]
    assert learner['cx_stats']['refused_files'] == len(forged), excerpt(log)
    assert 'refused the batch file' in log
    for v in victims + [storage / 'notes.txt']:
        assert v.read_bytes() == b'precious'
    assert (storage / 'ctx-1-1-998.rlp').is_symlink()
    # the genuine batches went through the storage directory, each read once and removed
    assert learner['train_iter'] >= 30
    assert learner['cx_stats']['env_steps_received'] == learner['env_step'] == learner['n_received']
    left = sorted(p.name for p in storage.iterdir() if p.name not in ('ctx-1-1-998.rlp', 'notes.txt'))
    assert len(left) <= 2, left  # at most the collector's window was in flight when the learner finished
