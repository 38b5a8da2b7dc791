"""What `rlpipe run --parallel-workers N` prints on its one console (issue 27, item 7): the learner reports the
run (run folder, progress, summary, its connections); the other nodes print only their log lines (evaluations,
warnings); the end-of-run counters and goodbyes are details shown with -v."""
import os
import re
import subprocess
import sys

import pytest

from test_distributed_pipeline import ROOT, _free_port_base

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TIMEOUT = 300  # a hang guard only


def _run(tmp_path, *flags):
    env = dict(os.environ)
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    env.pop('RLPIPE_KEY', None)
    cmd = [sys.executable, '-m', 'pipeline.run.cli', 'run', '--package', ROOT, '--main', 'examples.dqn_cartpole.main',
           '--parallel-workers', '3', '--ports', str(_free_port_base(3)), '--roles', 'learner:collector:evaluator',
           '--startup-interval', '0', *flags, '--',
           '--set', 'env.stop_value=-1', '--set', 'policy.learn.learning_starts=64',
           '--set', 'policy.eval.evaluator.eval_freq=20', '--exp-name', str(tmp_path / 'exp')]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                       timeout=TIMEOUT)
    assert p.returncode == 0, p.stdout[-4000:]
    return p.stdout


def test_one_node_reports_the_run_and_details_wait_for_verbose(tmp_path):
    out = _run(tmp_path)
    lines = out.splitlines()
    # run folder and summary: the learner's only
    assert [ln for ln in lines if 'run folder:' in ln and ln.startswith('[node 0 learner]')], out[-3000:]
    assert not [ln for ln in lines if 'run folder:' in ln and not ln.startswith('[node 0 learner]')], out[-3000:]
    assert re.findall(r'^\[node (\d+) [a-z+]+\] solved: last mean eval return', out, re.M) == ['0'], out[-3000:]
    # progress lines: the learner's only
    progress = re.findall(r'^node (\d+) [a-z+]+ \| env_step', out, re.M)
    assert progress and set(progress) == {'0'}, out[-3000:]
    # the learner's connections are news; the others' and the end-of-run counters are details
    assert re.search(r'\[node 0 learner\] node 0: connected to node 1', out), out[-3000:]
    assert not re.search(r'\[node [12] [a-z]+\] node \d: connected to', out), out[-3000:]
    for detail in (' at finish: ', ' stopped (sent ', ' left (the task is finishing)', 'stopped waiting for'):
        assert detail not in out, (detail, out[-3000:])
    # the evaluator still logs its evaluations
    assert re.search(r'^\S+ \[node 2 evaluator\] eval at train iter', out, re.M), out[-3000:]


def test_verbose_shows_every_node_and_the_counters(tmp_path):
    out = _run(tmp_path, '-v')
    assert re.search(r'\[node 1 collector\] run folder:', out), out[-3000:]
    assert re.search(r'\[node 1 collector\] node 1: connected to node 0', out), out[-3000:]
    assert re.search(r'\[node 0 learner\] ContextExchanger\(node 0, learner.*\) at finish: ', out), out[-3000:]
    assert re.search(r'\[node 1 collector\] node 1 stopped \(sent \d+', out), out[-3000:]
