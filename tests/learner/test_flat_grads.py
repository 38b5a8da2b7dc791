"""A module's gradients live in one buffer (``FlatGrads``): the same updates as fresh per-parameter gradients,
and the same ``.grad`` semantics as ``zero_grad(set_to_none=True)``."""
import copy

import pytest
import torch
from torch import nn

from pipeline.learner import Learner
from pipeline.learner.optim import FlatGrads


class TwoHeads(nn.Module):
    """A body and two heads; ``use`` says which head the loss goes through."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(3, 8)
        self.a = nn.Linear(8, 1)
        self.b = nn.Linear(8, 1)
        self.use = "both"

    def forward(self, x):
        h = torch.tanh(self.body(x))
        if self.use == "a":
            return self.a(h)
        if self.use == "b":
            return self.b(h)
        return self.a(h) + self.b(h)


class Regression(Learner):
    def forward_train(self, module_id, batch):
        return self.modules[module_id](batch["x"]).squeeze(-1)

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        return ((fwd_out - batch["y"]) ** 2).mean()


def _batch(seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(32, 3, generator=g), "y": 5 * torch.randn(32, generator=g)}


def _per_tensor(learner: Learner) -> Learner:
    """The same learner on the per-parameter route (no gradient buffer)."""
    learner.optim.flat_grads = {mid: None for mid in learner.optim.flat_grads}
    return learner


@pytest.mark.parametrize("grad_clip", [None, 0.5])
def test_the_buffer_gives_the_updates_and_norms_of_per_parameter_gradients(grad_clip):
    torch.manual_seed(0)
    net = TwoHeads()
    flat = Regression(net, grad_clip=grad_clip)
    plain = _per_tensor(Regression(copy.deepcopy(net), grad_clip=grad_clip))
    assert isinstance(flat.optim.flat_grads["default_policy"], FlatGrads)
    for i in range(20):
        net.use = flat.modules["default_policy"].use = ["both", "a", "b"][i % 3]
        plain.modules["default_policy"].use = net.use
        rf, rp = flat.update(batch=_batch(i)), plain.update(batch=_batch(i))
        nf = rf["default_policy"]["gradients_norm"].peek()
        np_ = rp["default_policy"]["gradients_norm"].peek()
        assert nf == pytest.approx(np_, rel=1e-5)
        if grad_clip is not None:
            assert nf > grad_clip  # the clip was active
    for pf, pp in zip(flat.modules["default_policy"].parameters(), plain.modules["default_policy"].parameters()):
        torch.testing.assert_close(pf, pp, rtol=1e-5, atol=1e-6)


def test_a_parameter_the_loss_does_not_reach_has_no_gradient_and_does_not_move():
    torch.manual_seed(0)
    learner = Regression(TwoHeads())
    net = learner.modules["default_policy"]
    learner.update(batch=_batch(0))  # both heads train: Adam has moments for head b
    net.use = "a"
    before = [p.detach().clone() for p in net.b.parameters()]
    for i in range(3):
        learner.update(batch=_batch(i + 1))
        assert all(p.grad is None for p in net.b.parameters())  # as zero_grad(set_to_none=True) leaves it
        assert all(p.grad is not None for p in net.a.parameters())
    for p, q in zip(net.b.parameters(), before):
        assert torch.equal(p, q)  # Adam skipped head b although its moments are not zero
    net.use = "b"
    learner.update(batch=_batch(9))
    assert all(p.grad is not None for p in net.b.parameters())
    assert not any(torch.equal(p, q) for p, q in zip(net.b.parameters(), before))


def test_gradients_replaced_or_cleared_between_updates_take_the_per_parameter_route():
    torch.manual_seed(0)
    net = TwoHeads()
    learner = Regression(net, grad_clip=0.1)
    plain = _per_tensor(Regression(copy.deepcopy(net), grad_clip=0.1))
    learner.update(batch=_batch(0))
    plain.update(batch=_batch(0))
    learner.optimizers["default_policy"].zero_grad()  # a user's zero_grad: every .grad is None
    plain.optimizers["default_policy"].zero_grad()
    learner.update(batch=_batch(1))
    plain.update(batch=_batch(1))
    fg = learner.optim.flat_grads["default_policy"]
    assert fg.intact()  # the views are back

    def replace(grads, rows):  # what a data-parallel gradient sync may do: new tensors in .grad
        for params in grads.values():
            for p in params:
                p.grad = p.grad.clone() * 2
    learner.gradient_sync = plain.gradient_sync = replace
    r1, r2 = learner.update(batch=_batch(2)), plain.update(batch=_batch(2))
    assert not fg.intact()
    assert r1["default_policy"]["gradients_norm"].peek() == pytest.approx(r2["default_policy"]["gradients_norm"].peek(),
                                                                          rel=1e-5)
    for pf, pp in zip(net.parameters(), plain.modules["default_policy"].parameters()):
        torch.testing.assert_close(pf, pp, rtol=1e-5, atol=1e-6)  # clipped the same way on both routes
    learner.gradient_sync = None
    learner.update(batch=_batch(3))
    assert fg.intact()


def test_no_gradient_exists_before_the_first_update_and_mixed_dtypes_keep_per_parameter_gradients():
    torch.manual_seed(0)
    learner = Regression(TwoHeads())
    assert all(p.grad is None for p in learner.modules["default_policy"].parameters())
    mixed = nn.Linear(3, 1)
    mixed.bias.data = mixed.bias.data.double()
    assert not FlatGrads.supports(list(mixed.parameters()))


def test_a_channels_last_conv_weight_gets_a_gradient_view_with_its_own_strides():
    """A conv weight in channels-last format gets a view of the buffer with its strides: the backward pass adds into
    it with no layout warning, and the gradient equals a plain backward pass's."""
    import warnings

    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 1))
    conv[0].to(memory_format=torch.channels_last)
    params = list(conv.parameters())
    flat = FlatGrads(params)
    x = torch.randn(5, 2, 6, 6).contiguous(memory_format=torch.channels_last)
    flat.zero()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # "grad and param do not obey the gradient layout contract"
        conv(x).sum().backward()
    flat.finish()
    w = conv[0].weight
    assert w.grad is flat.views[0] and w.grad.stride() == w.stride() != w.contiguous().stride()
    plain = copy.deepcopy(conv)
    for p in plain.parameters():
        p.grad = None
    plain(x).sum().backward()
    for p, q in zip(params, plain.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert float(flat.norm()) == pytest.approx(float(torch.linalg.vector_norm(
        torch.cat([q.grad.flatten() for q in plain.parameters()]))), rel=1e-6)


def test_any_dense_layout_gets_a_view_with_its_strides_and_a_gappy_one_a_plain_view():
    """A transposed weight (dense, not contiguous) keeps its strides in the buffer like a channels-last one; a
    weight with gaps between its elements gets a contiguous view; both give a plain backward pass's gradients."""
    import warnings
    from pipeline.learner.optim import _dense

    transposed = nn.Parameter(torch.randn(5, 3).t())            # strides (1, 3)
    gappy = nn.Parameter(torch.randn(3, 10)[:, ::2])             # strides (10, 2)
    assert _dense(transposed) and not _dense(gappy) and _dense(torch.randn(2, 1, 3)) and _dense(torch.zeros(0, 3))
    assert not _dense(torch.randn(3, 1).expand(3, 4))
    flat = FlatGrads([transposed, gappy])
    assert flat.views[0].stride() == transposed.stride() and flat.views[1].is_contiguous()
    x = torch.randn(7, 5)
    flat.zero()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x @ transposed.t()).square().sum().backward()
        (x @ gappy.t()).sum().backward()
    flat.finish()
    assert transposed.grad is flat.views[0] and gappy.grad is flat.views[1]
    torch.testing.assert_close(transposed.grad, 2 * (x @ transposed.t()).t() @ x)
    torch.testing.assert_close(gappy.grad, torch.ones(7, 3).t() @ x)
