"""middleware.PeriodicReset: which layers it re-initialises, when, what it does to the optimizer, its state."""
import pytest
import torch
from torch import nn

from contexts import OnlineRLContext
from middleware import PeriodicReset
from pipeline.policy.base import optimizer_factory


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


def _train(net, opt, steps=3):
    for _ in range(steps):
        opt.zero_grad()
        net(torch.randn(5, 4)).pow(2).mean().backward()
        opt.step()


def _at(train_iter):
    ctx = OnlineRLContext()
    ctx.train_iter = train_iter
    return ctx


def test_a_reset_happens_at_each_multiple_and_touches_only_the_given_layers():
    net = _net()
    opt = optimizer_factory('adam')(net.parameters(), 1e-2)
    _train(net, opt)
    body, head = net[0], net[2]
    reset = PeriodicReset([head], opt, every=10)
    before_body = [p.detach().clone() for p in body.parameters()]
    before_head = [p.detach().clone() for p in head.parameters()]
    reset(_at(9))
    assert reset.resets == 0 and all(torch.equal(a, b) for a, b in zip(before_head, head.parameters()))
    torch.manual_seed(123)
    reset(_at(10))
    assert reset.resets == 1
    torch.manual_seed(123)
    fresh = nn.Linear(8, 3)   # PyTorch's default initialisation from the same generator state
    assert torch.equal(head.weight, fresh.weight) and torch.equal(head.bias, fresh.bias)
    assert not torch.equal(before_head[0], head.weight)
    assert all(torch.equal(a, b) for a, b in zip(before_body, body.parameters()))
    assert all(p not in opt.state for p in head.parameters())    # fresh Adam moments and step count
    assert all(len(opt.state[p]) > 0 for p in body.parameters())  # the rest keeps its optimizer state
    _train(net, opt, 1)                                           # the optimizer steps on after the reset
    assert all(len(opt.state[p]) > 0 for p in head.parameters())
    assert int(opt.state[head.weight]['step']) == 1 and int(opt.state[body.weight]['step']) == 4
    after_first = head.weight.detach().clone()
    reset(_at(19))
    assert reset.resets == 1 and torch.equal(after_first, head.weight)
    reset(_at(35))   # two multiples passed in one step: one reset
    assert reset.resets == 3 and not torch.equal(after_first, head.weight)


def test_a_resumed_reset_counts_on_from_its_state():
    net = _net()
    opt = optimizer_factory('adam')(net.parameters(), 1e-2)
    first = PeriodicReset([net[2]], opt, every=10)
    first(_at(25))
    assert first.state_dict() == {'resets': 2}
    resumed = PeriodicReset([net[2]], opt, every=10)
    resumed.load_state_dict(first.state_dict())
    weight = net[2].weight.detach().clone()
    resumed(_at(26))
    assert resumed.resets == 2 and torch.equal(weight, net[2].weight)   # no second reset for the same multiple
    resumed(_at(30))
    assert resumed.resets == 3 and not torch.equal(weight, net[2].weight)
    with pytest.raises(ValueError, match="'resets', an int >= 0"):
        resumed.load_state_dict({'resets': -1})


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))


def test_bad_arguments_say_what_was_wrong():
    net = _net()
    opt = optimizer_factory('adam')(net.parameters(), 1e-2)
    with pytest.raises(ValueError, match='every must be an int >= 1'):
        PeriodicReset([net[2]], opt, every=0)
    with pytest.raises(ValueError, match='ReLU has no parameters to reset'):
        PeriodicReset([net[1]], opt, every=10)
    odd = _Scale()
    with pytest.raises(ValueError, match='_Scale holds parameters but has no reset_parameters'):
        PeriodicReset([odd], torch.optim.Adam(odd.parameters()), every=10)
    other = nn.Linear(2, 2)
    with pytest.raises(ValueError, match='the optimizer does not update every parameter'):
        PeriodicReset([other], opt, every=10)


def test_it_runs_on_learner_nodes_and_declares_what_it_reads():
    net = _net()
    reset = PeriodicReset([net[2]], torch.optim.Adam(net.parameters()), every=10)
    from pipeline.runtime.roles import Role

    assert reset.__roles__ == {Role.LEARNER}
    assert reset.__fields__.reads == ('train_iter',) and reset.__fields__.writes == ()
