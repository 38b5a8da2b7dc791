"""One seed per run (issue 28, item 8): ``--seed`` and ``--set seed=N`` are the same setting. Either alone sets
it; both with different values, or a seed that is not an int >= 0, end the start with one line and exit status
2, before a run folder is made. The unchanged examples/dqn_cartpole.py runs as a process."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, 'examples', 'dqn_cartpole.py')
SHORT = ['--max-env-step', '32', '--no-progress', '--set', 'policy.learn.learning_starts=16', '--no-save-buffer']

pytestmark = pytest.mark.timeout(300)


def _run(cwd, *argv):
    env = dict(os.environ)
    env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
    for k in ('RLPIPE_KEY', 'RLPIPE_RESTARTS', 'RLPIPE_LAUNCH_ID', 'RLPIPE_NODE'):
        env.pop(k, None)
    return subprocess.run([sys.executable, SCRIPT, *argv], capture_output=True, text=True, timeout=240, env=env,
                          cwd=str(cwd))


@pytest.mark.multiprocess
@pytest.mark.slow
def test_set_seed_alone_runs_with_that_seed(tmp_path):
    p = _run(tmp_path, *SHORT, '--set', 'seed=5')
    assert p.returncode in (0, 1), p.stderr[-3000:]  # 1: not solved within the tiny budget
    config = json.loads((tmp_path / 'cartpole_dqn' / '1' / 'config.json').read_text())['config']
    assert config['seed'] == 5


@pytest.mark.multiprocess
@pytest.mark.parametrize('argv, words', [
    (['--seed', '3', '--set', 'seed=5'], 'error: --seed 3 and --set seed=5 disagree: give the seed once'),
    (['--set', 'seed=-1'], 'error: the seed must be an int >= 0, got -1'),
    (['--seed', '-1'], 'error: the seed must be an int >= 0, got -1'),
])
def test_a_seed_conflict_or_a_bad_seed_is_one_line_and_exit_2(tmp_path, argv, words):
    p = _run(tmp_path, *SHORT, *argv)
    assert p.returncode == 2, (p.returncode, p.stderr[-3000:])
    assert p.stderr.strip().splitlines() == [words], p.stderr[-3000:]
    assert not (tmp_path / 'cartpole_dqn').exists()


def test_the_parser_resolves_one_seed():
    from pipeline.run import example_parser

    p = example_parser(None, exp_name='exp', seed=7)
    assert p.parse_args([]).seed == 7
    assert p.parse_args(['--seed', '3']).seed == 3
    assert p.parse_args(['--set', 'seed=5']).seed == 5
    assert p.parse_args(['--seed', '5', '--set', 'seed=5']).seed == 5  # the same value twice is no conflict
    assert p.parse_args(['--set', 'seed=4', '--set', 'seed=5']).seed == 5  # the last --set wins, as for any key
