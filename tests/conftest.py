import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


@pytest.fixture(autouse=True)
def _stop_task_after_test():
    """Every test leaves the process-wide task stopped, whatever it did."""
    yield
    from pipeline import task
    from pipeline.router import set_default_router_factory

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
