"""The multi-machine recipe of docs/distributed.md, run as written on loopback: two launchers, the second attached to the
first with --attach-to, until the job ends by itself.

Only what cannot be the same on one machine is replaced: HOST_A/HOST_B become 127.0.0.1 (and the listen
address 0.0.0.0 loopback: tests bind to loopback only), the ports become free ones, `rlpipe` is this
Python's `-m pipeline.run.cli`. The job is shortened by arguments for the example (a stop value every
evaluation reaches, an output folder in tmp); the flags of the recipe are the page's.
"""
import os
import re
import secrets
import shlex
import signal
import subprocess
import sys

import pytest

from test_distributed_pipeline import ROOT, _free_port_base

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

TIMEOUT = 400  # a hang guard only


def readme_commands():
    text = open(os.path.join(ROOT, 'docs', 'distributed.md')).read()
    blocks = re.findall(r'```bash\n(.*?)```', text, re.S)
    block = next(b for b in blocks if '--attach-to' in b and 'RLPIPE_KEY' in b)
    lines = block.replace('\\\n', ' ').splitlines()
    return [shlex.split(line.split('#')[0]) for line in lines if line.strip().startswith('rlpipe run')]


def test_readme_multi_machine_recipe_runs_to_the_end(tmp_path):
    commands = readme_commands()
    assert len(commands) == 2 and '--attach-to' in commands[1]
    base = _free_port_base(2)
    ports = {'50515': str(base), '50516': str(base + 1)}
    env = dict(os.environ, RLPIPE_KEY=secrets.token_hex(32))
    env['PYTHONPATH'] = ROOT + os.pathsep + env.get('PYTHONPATH', '')
    procs = []
    try:
        for cmd in commands:
            argv = []
            for arg in cmd:
                for a, b in (('HOST_A', '127.0.0.1'), ('HOST_B', '127.0.0.1'), ('0.0.0.0', '127.0.0.1')):
                    arg = arg.replace(a, b)
                for a, b in ports.items():
                    arg = arg.replace(a, b)
                argv.append(arg)
            assert argv[0] == 'rlpipe'
            argv = [sys.executable, '-m', 'pipeline.run.cli', *argv[1:], '--startup-interval', '0', '--',
                    '--set', 'env.stop_value=-1', '--set', 'policy.learn.learning_starts=64',
                    '--set', 'policy.eval.evaluator.eval_freq=20', '--exp-name', str(tmp_path / 'exp')]
            procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                          env=env, cwd=ROOT, start_new_session=True))
        outs = []
        for p in procs:
            try:
                outs.append(p.communicate(timeout=TIMEOUT)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    os.killpg(q.pid, signal.SIGKILL)
                raise AssertionError('the README recipe did not end:\n' + '\n'.join(
                    q.communicate(timeout=30)[0][-4000:] for q in procs))
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
    a, b = outs
    assert procs[0].returncode == 0 and procs[1].returncode == 0, a[-4000:] + b[-4000:]
    # they connected (each names the other), trained, and both printed the example's end line
    assert 'connected to node 1' in a and 'connected to node 0' in b, a[-4000:] + b[-4000:]
    assert 'solved: last mean eval return' in a and 'solved: last mean eval return' in b
    # each node's end line says whose it is: [node <id> <roles>]
    tags = [re.findall(r'^\[node (\d+) [a-z+]+\] solved: last mean eval return', o, re.M) for o in (a, b)]
    assert tags == [['0'], ['1']], (tags, a[-2000:], b[-2000:])
    ends = [re.search(r'after (\d+) training \+ \d+ evaluation env steps, (\d+) train iters', o) for o in (a, b)]
    assert all(ends) and int(ends[0].group(2)) > 0, a[-4000:]
