"""The ``kernel`` fixture: run a test with prioritized replay's compiled kernels ("C") and with the
numpy code ("numpy"); see kernel_switch.py. Modules opt in with
``pytestmark = pytest.mark.usefixtures("kernel")``."""
import pytest

from kernel_switch import use_kernel


@pytest.fixture(params=["C", "numpy"])
def kernel(request):
    with use_kernel(request.param):
        yield request.param
