"""Which torch optimizer kernels the learners take: fused where the device has them, else foreach;
what a config names explicitly wins; the kernels change the rounding of an update, not the update."""
import copy

import pytest
import torch
from torch import nn

from pipeline.learner import Learner
from pipeline.learner.optim import kernel_kwargs
from pipeline.policy.base import optimizer_factory

try:
    from torch.utils._foreach_utils import _get_fused_kernels_supported_devices
    CPU_FUSED = 'cpu' in _get_fused_kernels_supported_devices()
except (ImportError, AttributeError):
    CPU_FUSED = False


def _kernels(opt: torch.optim.Optimizer) -> tuple:
    return bool(opt.defaults.get('fused')), bool(opt.defaults.get('foreach'))


def test_the_default_learner_optimizer_takes_fused_kernels_where_the_device_has_them():
    learner = Learner(nn.Linear(3, 2), lr=1e-3)
    assert _kernels(learner.optimizers[Learner.DEFAULT_MODULE_ID]) == ((True, False) if CPU_FUSED else (False, True))
    meta = [nn.Parameter(torch.zeros(2, device='meta'))]
    assert kernel_kwargs(meta) == {'foreach': True}  # no fused kernels there
    assert kernel_kwargs([]) == {'foreach': True}


def test_named_optimizers_take_fused_kernels_unless_the_config_names_kernels():
    params = list(nn.Linear(3, 2).parameters())
    fused = (True, False) if CPU_FUSED else (False, True)
    assert _kernels(optimizer_factory('adam', {'eps': 1e-5})(params, 1e-3)) == fused
    assert _kernels(optimizer_factory('sgd')(params, 1e-3)) == fused
    assert _kernels(optimizer_factory('rmsprop')(params, 1e-3)) == (False, True)  # torch has no fused RMSprop
    assert _kernels(optimizer_factory('adam', {'foreach': False})(params, 1e-3)) == (False, False)
    assert _kernels(optimizer_factory('adam', {'foreach': True})(params, 1e-3)) == (False, True)


@pytest.mark.skipif(not CPU_FUSED, reason='this torch has no fused CPU kernels')
def test_fused_and_foreach_adam_train_a_network_to_the_same_weights_up_to_rounding():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 2))
    a, b = copy.deepcopy(net), copy.deepcopy(net)
    opt_a = torch.optim.Adam(a.parameters(), lr=1e-3, fused=True)
    opt_b = torch.optim.Adam(b.parameters(), lr=1e-3, foreach=True)
    for _ in range(200):
        x = torch.randn(32, 4)
        for m, opt in ((a, opt_a), (b, opt_b)):
            opt.zero_grad()
            m(x).pow(2).mean().backward()
            opt.step()
    moved = max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), net.parameters()))
    apart = max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), b.parameters()))
    assert moved > 1e-2 and apart < 1e-5 * moved
