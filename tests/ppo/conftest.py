import pytest
import torch


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Tiny nets on a shared 2-core machine: one intra-op thread avoids oversubscription stalls."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
