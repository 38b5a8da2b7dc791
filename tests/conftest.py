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
