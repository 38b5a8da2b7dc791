"""Fault injection on a 3-node job (issue 11): a learner and two collectors, started by ``rlpipe run``.

Collector 1 is paused (SIGSTOP) past the heartbeat timeout and resumed; collector 2 kills itself (SIGKILL)
and the launcher restarts it with the same node id (``--auto-recover``). The learner still receives every
transition exactly once (each carries a unique id: node, process, counter), and the job ends on the
learner's finish with every process gone. Nothing asserts speed: the bounds are hang guards.
"""
import collections
import glob
import json
import os
import signal
import time

import pytest

from test_distributed_pipeline import launch, wait

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

GUARD = 300


def _lines(path):
    with open(path) as f:
        return [line.split() for line in f.read().splitlines() if line.strip()]


def _wait(pred, timeout, what, proc):
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end or proc.poll() is not None:
            os.killpg(proc.pid, signal.SIGKILL)
            out = proc.communicate(timeout=30)[0]
            raise AssertionError(f'{what} did not happen within {timeout} s:\n{out[-6000:]}')
        time.sleep(0.1)


def test_pause_and_restart_of_collectors_lose_nothing_and_the_job_ends(tmp_path):
    out = tmp_path / 'out'
    out.mkdir()
    hb_timeout = 2.0
    proc = launch('fault_main', 3, str(out), ['--kill-node', '2', '--kill-after', '40'],
                  extra=['--roles', 'learner:collector:collector', '--auto-recover', '--max-retries', '1'],
                  heartbeat_timeout=hb_timeout)

    def sent(node):
        return {p: _lines(p) for p in glob.glob(str(out / f'sent-{node}-*.txt'))}

    def batches(node):
        return sum(len(v) for v in sent(node).values())

    # both collectors deliver; then pause collector 1 well past the heartbeat timeout
    _wait(lambda: batches(1) >= 20 and batches(2) >= 10, GUARD, 'collection', proc)
    pid1 = int(glob.glob(str(out / 'pid-1-*'))[0].rsplit('-', 1)[1])
    os.kill(pid1, signal.SIGSTOP)
    try:
        time.sleep(3 * hb_timeout)
    finally:
        os.kill(pid1, signal.SIGCONT)
    after_pause = batches(1)
    # collector 2 killed itself and came back as a new process with the same node id
    _wait(lambda: len(sent(2)) == 2 and min(len(v) for v in sent(2).values()) >= 10, GUARD,
          'the restart of collector 2', proc)
    _wait(lambda: batches(1) >= after_pause + 20, GUARD, 'collection by collector 1 after its pause', proc)
    (out / 'finish-now').touch()
    log = wait(proc, GUARD)
    assert proc.returncode == 0, log[-6000:]
    assert 'node 2 exited with code -9; restarting it' in log

    records = {}
    for path in glob.glob(str(out / 'node-*.json')):
        r = json.load(open(path))
        records.setdefault(r['node'], []).append(r)
    learner = records[0][0]
    assert learner['finish'] and all(r['finish'] for rs in records.values() for r in rs)
    assert len(records[1]) == 1 and len(records[2]) == 1  # the killed incarnation wrote nothing
    received = collections.Counter(learner['received'])
    assert all(n == 1 for n in received.values()), [k for k, n in received.items() if n > 1][:10]
    # every transition sent was received, except at most the last window (2 batches) of each live collector
    for node in (1, 2):
        for path, lines in sent(node).items():
            ids = [i for line in lines for i in line]
            missing = [i for i in ids if i not in received]
            live = records[node][0]['pid'] == int(path.rsplit('-', 1)[1][:-4])
            if live:
                tail = {i for line in lines[-2:] for i in line}
                assert set(missing) <= tail, (path, missing[:10])
            else:  # the killed incarnation: it waited until the learner had consumed all it sent
                assert not missing, (path, missing[:10])
    assert set(received) <= {i for node in (1, 2) for lines in sent(node).values() for line in lines for i in line}
    assert learner['cx_stats']['duplicates'] == 0
    assert learner['bus_stats']['duplicates'] == 0 and learner['bus_stats']['gaps'] == 0, learner['bus_stats']
    # the learner saw the pause as a death and the collector come back; no heartbeat-only revival was lost
    assert 'node 1 is dead' in log and 'node 1, declared dead, is sending again' in log, log[-6000:]


def test_a_learner_paused_past_the_heartbeat_timeout_gets_what_was_collected_meanwhile(tmp_path):
    """The collector declares the paused learner dead but neither finishes nor drops data: it keeps its batches
    (counted, logged) and delivers them once the bus revives the learner; the learner gets every transition
    exactly once and the job ends on its finish."""
    out = tmp_path / 'out'
    out.mkdir()
    hb_timeout = 2.0
    proc = launch('fault_main', 2, str(out), [], extra=['--roles', 'learner:collector'],
                  heartbeat_timeout=hb_timeout)
    sent_file = lambda: glob.glob(str(out / 'sent-1-*.txt'))  # noqa: E731
    batches = lambda: sum(len(_lines(p)) for p in sent_file())  # noqa: E731
    _wait(lambda: batches() >= 10, GUARD, 'collection', proc)
    pid0 = int(glob.glob(str(out / 'pid-0-*'))[0].rsplit('-', 1)[1])
    os.kill(pid0, signal.SIGSTOP)
    try:
        before = batches()
        _wait(lambda: batches() >= before + 10, 6 * hb_timeout + 60, 'collection while the learner is paused',
              proc)
        time.sleep(hb_timeout)
    finally:
        os.kill(pid0, signal.SIGCONT)
    after_pause = batches()
    _wait(lambda: batches() >= after_pause + 10, GUARD, 'collection after the learner is back', proc)
    (out / 'finish-now').touch()
    log = wait(proc, GUARD)
    assert proc.returncode == 0, log[-6000:]
    records = {}
    for path in glob.glob(str(out / 'node-*.json')):
        r = json.load(open(path))
        records[r['node']] = r
    learner, collector = records[0], records[1]
    assert learner['finish'] and collector['finish']
    assert 'node 0 is dead' in log and 'keeping collected batches until one is back' in log, log[-6000:]
    assert collector['cx_stats']['batches_kept'] >= 1 and collector['cx_stats']['kept_dropped'] == 0
    received = collections.Counter(learner['received'])
    assert all(n == 1 for n in received.values()), [k for k, n in received.items() if n > 1][:10]
    lines = _lines(sent_file()[0])
    missing = [i for line in lines for i in line if i not in received]
    assert set(missing) <= {i for line in lines[-2:] for i in line}, missing[:10]  # at most the last window


def test_a_ppo_rollout_collected_while_the_learner_is_paused_is_trained_on_exactly_once(tmp_path):
    """RolloutExchanger: the learner is paused (SIGSTOP) past the heartbeat timeout while it waits for the
    collector's rollout of the current weights version; the collector, seeing no learner alive, keeps the
    rollout it collects meanwhile and sends it once the bus sees the learner again (SIGCONT). The learner,
    still at that version, trains on it exactly once."""
    out = tmp_path / 'out'
    out.mkdir()
    hb_timeout = 2.0
    proc = launch('ppo_fault_main', 2, str(out), [], extra=['--roles', 'learner:collector'],
                  heartbeat_timeout=hb_timeout)

    def trained():
        p = out / 'trained.txt'
        return [int(x) for x in p.read_text().split()] if p.exists() else []

    def collected():
        p = out / 'collected.txt'
        return [json.loads(line) for line in p.read_text().splitlines() if line.strip()] if p.exists() else []

    _wait(lambda: len(trained()) >= 5, GUARD, 'training', proc)
    (out / 'hold').touch()   # the collector stops at the start of its next collect step, weights loaded
    _wait(lambda: (out / 'holding').exists(), GUARD, 'the collector holding', proc)
    n_before = len(collected())
    pid0 = int(glob.glob(str(out / 'pid-0-*'))[0].rsplit('-', 1)[1])
    os.kill(pid0, signal.SIGSTOP)
    try:
        _wait(lambda: (out / 'dead-0').exists(), 6 * hb_timeout + 60, 'the collector declaring the learner dead',
              proc)
        (out / 'hold').unlink()
        _wait(lambda: len(collected()) > n_before, GUARD, 'a rollout collected while the learner is paused', proc)
    finally:
        os.kill(pid0, signal.SIGCONT)
    meanwhile = collected()[n_before]
    uid = meanwhile['uid']
    _wait(lambda: len([u for u in trained() if u > uid]) >= 2, GUARD, 'training after the learner is back', proc)
    (out / 'finish-now').touch()
    log = wait(proc, GUARD)
    assert proc.returncode == 0, log[-6000:]
    got = trained()
    assert got.count(uid) == 1, (uid, got[-10:], log[-6000:])
    assert len(got) == len(set(got)), got
    collector = json.load(open(out / 'node-1.json'))['cx_stats']
    assert meanwhile['stats']['rollouts_kept'] == 1, meanwhile   # no learner was alive at its send
    assert collector['kept_sent'] == 1 and collector['kept_dropped'] == 0, collector
    assert 'keeping the rollout of weights version' in log and 'kept meanwhile' in log, log[-6000:]
