import os
import subprocess
import sys

import pytest

from process_guard import process_starts, unmarked_start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


# Markers (registered in setup.cfg; --strict-markers refuses others): slow, multiprocess, bench. A test that
# starts a Python process without the multiprocess marker fails (tests/process_guard.py).
@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with process_starts() as started:
        result = yield
    _fail_unless_marked(item, started)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with process_starts() as started:
        result = yield
    _fail_unless_marked(item, started)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    with process_starts() as started:
        result = yield
    _fail_unless_marked(item, started)
    return result


def _fail_unless_marked(item, started):
    message = unmarked_start(item, started)
    if message:
        pytest.fail(message, pytrace=False)


@pytest.fixture(autouse=True)
def _stop_task_after_test():
    """Every test leaves the process-wide task stopped, whatever it did."""
    yield
    from pipeline import task
    from pipeline.runtime.router import set_default_router_factory

    task.stop()
    set_default_router_factory(None)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny nets on a shared 2-core machine: one intra-op torch thread avoids oversubscription stalls."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def small_dqn_cfg():
    """``make(**learn)``: the DQN config for CartPole-shaped data (obs 4, 2 actions), ``learn`` overrides merged."""
    from pipeline.config import compile_config

    def make(**learn):
        return compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2}, 'learn': learn}})

    return make


@pytest.fixture
def help_without_torch():
    """``run(script) -> help text``: runs ``python SCRIPT --help`` in a fresh interpreter and asserts that it
    exits 0, prints a usage, and never imported torch (``--help`` must answer at once)."""
    def run(script):
        code = ('import runpy, sys\n'
                f'sys.argv = [{os.path.basename(script)!r}, "--help"]\n'
                'try:\n'
                f'    runpy.run_path({script!r}, run_name="__main__")\n'
                'except SystemExit as e:\n'
                '    assert e.code in (0, None), e.code\n'
                'print("TORCH" if "torch" in sys.modules else "NO-TORCH")\n')
        env = dict(os.environ)
        env['PYTHONPATH'] = os.pathsep.join([ROOT, env.get('PYTHONPATH', '')])
        p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60, env=env)
        assert p.returncode == 0, p.stderr
        assert 'usage:' in p.stdout and p.stdout.strip().endswith('NO-TORCH'), p.stdout[-500:]
        return p.stdout

    return run
