"""Learner.update metrics, gradient handling, lr schedules and loss extras."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from learner_helpers import RecordingLearner, index_batch, two_modules
from pipeline.learner import Learner, MetricsLogger, Stats

peek = MetricsLogger.peek_results


def test_result_tree_has_stats_leaves_and_expected_keys():
    lrn = RecordingLearner(lr=0.01)
    res = lrn.update(index_batch(10), minibatch_size=4, num_epochs=2)
    assert set(res) == {"default_policy", "__all_modules__"}
    for sub in res.values():
        assert all(isinstance(v, Stats) for v in sub.values())
    mod = peek(res)["default_policy"]
    assert mod["learning_rate"] == pytest.approx(0.01)
    assert mod["num_skipped_steps"] == 0
    assert mod["gradients_norm"] > 0 and math.isfinite(mod["gradients_norm"])
    assert math.isfinite(mod["total_loss"])


def test_total_loss_is_last_minibatch():
    class Const(RecordingLearner):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            loss = super().compute_loss_for_module(module_id, batch, fwd_out)
            return loss * 0 + float(batch["idx"][0])  # loss value = first row index of the minibatch

    res = Const().update(index_batch(10), minibatch_size=4, num_epochs=2)
    assert peek(res)["default_policy"]["total_loss"] == 6.0  # last minibatch [6-9]


def test_lifetime_counters_and_weights_seq_no():
    lrn = RecordingLearner()
    seqs, lifetimes = [], []
    for _ in range(3):
        vals = peek(lrn.update(index_batch(10), minibatch_size=4, num_epochs=2))
        seqs.append(vals["__all_modules__"]["weights_seq_no"])
        lifetimes.append((vals["default_policy"]["num_module_steps_trained_lifetime"],
                          vals["__all_modules__"]["num_env_steps_trained_lifetime"]))
        assert vals["default_policy"]["num_module_steps_trained"] == 20
    assert seqs == [1, 2, 3]
    assert lifetimes == [(20, 20), (40, 40), (60, 60)]
    assert lrn.weights_seq_no == 3 and lrn.num_minibatch_updates_lifetime == 15


def test_nonfinite_gradients_skip_the_step_and_are_counted():
    class Poison(RecordingLearner):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            loss = super().compute_loss_for_module(module_id, batch, fwd_out)
            if 3 in batch["idx"].tolist():
                loss = loss * float("nan")
            return loss

    lrn = Poison()
    before = lrn.modules["default_policy"].weight.detach().clone()
    res = lrn.update(index_batch(8), minibatch_size=4, num_epochs=1, num_total_minibatches=1)
    assert torch.equal(lrn.modules["default_policy"].weight, before)  # skipped
    vals = peek(res)["default_policy"]
    assert vals["num_skipped_steps"] == 1 and vals["num_skipped_steps_lifetime"] == 1
    assert math.isnan(vals["gradients_norm"])  # no finite step in this call
    res = lrn.update(index_batch(8), minibatch_size=4, num_epochs=1)  # [0-3] skipped, [4-7] applied
    vals = peek(res)["default_policy"]
    assert vals["num_skipped_steps"] == 1 and vals["num_skipped_steps_lifetime"] == 2
    assert not torch.equal(lrn.modules["default_policy"].weight, before)
    assert all(torch.isfinite(p).all() for p in lrn.modules["default_policy"].parameters())


def test_grad_clip_limits_the_applied_gradient():
    class Big(RecordingLearner):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            return super().compute_loss_for_module(module_id, batch, fwd_out) * 1e4

    sgd = lambda params, lr: torch.optim.SGD(params, lr=lr)  # noqa: E731
    lrn = Big(lr=1.0, optimizer=sgd, grad_clip=0.5)
    params = list(lrn.modules["default_policy"].parameters())
    before = [p.detach().clone() for p in params]
    res = lrn.update(index_batch(16))
    step = torch.sqrt(sum(((p.detach() - b) ** 2).sum() for p, b in zip(params, before)))
    assert step.item() == pytest.approx(0.5, rel=1e-3)  # SGD lr 1: update norm == clipped grad norm
    assert peek(res)["default_policy"]["gradients_norm"] > 100  # reported before clipping


def test_custom_optimizer_and_per_module_lr():
    lrn = RecordingLearner(two_modules(), lr={"p": 0.1, "q": 0.2},
                           optimizer=lambda ps, lr: torch.optim.SGD(ps, lr=lr))
    assert isinstance(lrn.optimizers["p"], torch.optim.SGD)
    vals = peek(lrn.update({"p": index_batch(2), "q": index_batch(2)}))
    assert vals["p"]["learning_rate"] == pytest.approx(0.1)
    assert vals["q"]["learning_rate"] == pytest.approx(0.2)


def test_lr_schedule_advances_once_per_call_from_timesteps():
    lrn = RecordingLearner(lr_schedule=[(0, 1.0), (100, 0.0)])
    assert lrn.optimizers["default_policy"].param_groups[0]["lr"] == 1.0
    seen_lr = []

    class Spy(RecordingLearner):
        def before_gradient_based_update(self, timesteps):
            seen_lr.append(self.optimizers["default_policy"].param_groups[0]["lr"])

    spy = Spy(lr_schedule=[(0, 1.0), (100, 0.0)])
    res = spy.update(index_batch(4), timesteps={"num_env_steps_sampled_lifetime": 25})
    assert seen_lr == [pytest.approx(0.75)]  # set before the hook
    assert peek(res)["default_policy"]["learning_rate"] == pytest.approx(0.75)
    spy.update(index_batch(4), timesteps=250)
    assert seen_lr[-1] == 0.0
    calls = []
    counting = RecordingLearner(lr_schedule=lambda t: calls.append(t) or 0.1)
    calls.clear()
    counting.update(index_batch(10), minibatch_size=2, num_epochs=3, timesteps=9)
    assert calls == [9]  # evaluated once per call, not per minibatch
    # without timesteps the learner's own env-steps-trained count drives it
    own = RecordingLearner(lr_schedule=lambda t: 1.0 / (1 + t))
    own.update(index_batch(4))
    res = own.update(index_batch(4))
    assert peek(res)["default_policy"]["learning_rate"] == pytest.approx(1.0 / 5)


def test_bad_lr_schedules_raise():
    with pytest.raises(ValueError, match="ascending"):
        RecordingLearner(lr_schedule=[(10, 1.0), (0, 0.5)])
    with pytest.raises(ValueError, match="unknown module ids"):
        RecordingLearner(lr_schedule={"nope": [(0, 1.0)]})


def test_loss_dict_extras_become_metrics_and_last_outputs():
    class Extras(RecordingLearner):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            err = fwd_out - batch["y"]
            return {
                "total_loss": (err ** 2).mean(),
                "first_idx": batch["idx"][0].float(),  # scalar -> metric (mean over minibatches)
                "count": 1,
                "priority": err.abs(),  # per-row -> last_outputs
            }

    lrn = Extras()
    res = lrn.update(index_batch(10), minibatch_size=4, num_epochs=2)
    vals = peek(res)["default_policy"]
    assert vals["first_idx"] == pytest.approx((0 + 4 + 8 + 2 + 6) / 5)
    assert vals["count"] == 1
    prio = lrn.last_outputs["default_policy"]["priority"]
    assert prio.shape == (4,) and not prio.requires_grad
    res = lrn.update(index_batch(64))  # full batch: priorities for every row
    assert lrn.last_outputs["default_policy"]["priority"].shape == (64,)


def test_loss_dict_without_total_loss_raises():
    class Bad(RecordingLearner):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            return {"loss": fwd_out.mean()}

    with pytest.raises(ValueError, match="no 'total_loss'"):
        Bad().update(index_batch(2))


class TakesDict(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, batch):
        return self.lin(batch["x"])


def test_base_learner_needs_a_loss_and_default_forward_calls_the_module():
    lrn = Learner(TakesDict())
    with pytest.raises(NotImplementedError, match="compute_loss_for_module"):
        lrn.update({"x": torch.zeros(2, 3)})
    out = lrn.forward_train("default_policy", {"x": torch.zeros(2, 3)})
    assert out.shape == (2, 1)


def test_detached_loss_gives_a_clear_error():
    class Detached(RecordingLearner):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            return super().compute_loss_for_module(module_id, batch, fwd_out).detach()

    with pytest.raises(ValueError, match="does not depend on any trainable parameter"):
        Detached().update(index_batch(4))


def test_module_without_parameters_is_rejected():
    with pytest.raises(ValueError, match="no trainable parameters"):
        Learner({"a": nn.Linear(2, 2), "target": nn.Linear(2, 2).requires_grad_(False)})


def test_no_metrics_reduce_accumulates_in_the_learner():
    lrn = RecordingLearner()
    assert lrn.update(index_batch(10), minibatch_size=4, num_epochs=2, _no_metrics_reduce=True) is None
    assert lrn.update(index_batch(6), _no_metrics_reduce=True) is None
    assert lrn.weights_seq_no == 2
    vals = lrn.metrics.peek()
    assert vals["default_policy"]["num_module_steps_trained"] == 26  # 20 + 6
    assert vals["default_policy"]["num_module_steps_trained_lifetime"] == 26
    res = peek(lrn.update(index_batch(4)))  # a reducing call returns everything since
    assert res["default_policy"]["num_module_steps_trained"] == 30
    assert res["__all_modules__"]["weights_seq_no"] == 3
    res = peek(lrn.update(index_batch(4)))
    assert res["default_policy"]["num_module_steps_trained"] == 4  # cleared by the reduce
    assert res["default_policy"]["num_module_steps_trained_lifetime"] == 34


def test_custom_metrics_logged_in_hooks_are_returned():
    class Logs(RecordingLearner):
        def after_gradient_based_update(self, timesteps):
            self.metrics.log_value(("default_policy", "custom"), 5.0, window=1)

    res = peek(Logs().update(index_batch(4)))
    assert res["default_policy"]["custom"] == 5.0
    assert res["default_policy"]["num_module_steps_trained"] == 4


def test_two_module_losses_backprop_together():
    lrn = RecordingLearner(two_modules())
    w = {k: m.weight.detach().clone() for k, m in lrn.modules.items()}
    res = peek(lrn.update({"p": index_batch(4), "q": index_batch(4, seed=1)}))
    assert all(not torch.equal(lrn.modules[k].weight, w[k]) for k in w)
    assert res["__all_modules__"]["total_loss"] == pytest.approx(res["p"]["total_loss"] + res["q"]["total_loss"])
