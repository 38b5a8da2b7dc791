"""Learner.update: exact epoch/minibatch/wrap-around/shuffle semantics and hook order."""
from __future__ import annotations

import pytest
import torch

from learner_helpers import RecordingLearner, index_batch, two_modules
from pipeline.learner import MetricsLogger

peek = MetricsLogger.peek_results


def test_full_batch_one_update_per_epoch():
    lrn = RecordingLearner()
    res = lrn.update(index_batch(10), num_epochs=3)
    assert lrn.seen["default_policy"] == [list(range(10))] * 3
    vals = peek(res)
    assert vals["__all_modules__"]["num_minibatch_updates"] == 3
    assert vals["default_policy"]["num_module_steps_trained"] == 30


def test_minibatch_wraparound_10_rows_m4_2_epochs():
    lrn = RecordingLearner()
    res = lrn.update(index_batch(10), minibatch_size=4, num_epochs=2)
    assert lrn.seen["default_policy"] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 0, 1],
        [2, 3, 4, 5],
        [6, 7, 8, 9],
    ]
    vals = peek(res)
    assert vals["default_policy"]["num_module_steps_trained"] == 20  # not RLlib's 5 * 10
    assert vals["__all_modules__"]["num_env_steps_trained"] == 20
    assert vals["__all_modules__"]["num_minibatch_updates"] == 5


def test_exact_division_has_no_extra_empty_minibatch():
    lrn = RecordingLearner()
    lrn.update(index_batch(8), minibatch_size=4, num_epochs=2)
    assert lrn.seen["default_policy"] == [[0, 1, 2, 3], [4, 5, 6, 7]] * 2


def test_batch_smaller_than_minibatch_wraps():
    lrn = RecordingLearner()
    lrn.update(index_batch(3), minibatch_size=4, num_epochs=1)
    assert lrn.seen["default_policy"] == [[0, 1, 2, 0]]  # ceil(1 * 3 / 4) = 1


def test_num_total_minibatches_overrides_epochs():
    lrn = RecordingLearner()
    res = lrn.update(index_batch(10), minibatch_size=4, num_epochs=5, num_total_minibatches=2)
    assert lrn.seen["default_policy"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert peek(res)["__all_modules__"]["num_minibatch_updates"] == 2
    lrn2 = RecordingLearner()
    lrn2.update(index_batch(5), num_total_minibatches=3)  # full batch, k updates
    assert lrn2.seen["default_policy"] == [list(range(5))] * 3


def test_two_modules_smaller_module_wraps():
    lrn = RecordingLearner(two_modules())
    batch = {"p": index_batch(6), "q": index_batch(3, seed=1)}
    res = lrn.update(batch, minibatch_size=4, num_epochs=2)
    # largest module: 6 rows, 2 epochs -> ceil(12 / 4) = 3 updates; every module gets 4 rows
    assert lrn.seen["p"] == [[0, 1, 2, 3], [4, 5, 0, 1], [2, 3, 4, 5]]
    assert lrn.seen["q"] == [[0, 1, 2, 0], [1, 2, 0, 1], [2, 0, 1, 2]]
    vals = peek(res)
    assert vals["p"]["num_module_steps_trained"] == 12
    assert vals["q"]["num_module_steps_trained"] == 12
    assert vals["__all_modules__"]["num_env_steps_trained"] == 12


def test_modules_missing_from_batch_are_not_trained():
    lrn = RecordingLearner(two_modules())
    before = lrn.modules["q"].weight.detach().clone()
    res = lrn.update({"p": index_batch(4)})
    assert "q" not in lrn.seen and "q" not in res
    assert torch.equal(lrn.modules["q"].weight, before)


def test_shuffle_permutes_at_each_wrap_and_first_pass_in_order():
    lrn = RecordingLearner(seed=123)
    lrn.update(index_batch(10, t=3), minibatch_size=4, num_epochs=3, shuffle_batch_per_epoch=True)
    seen = lrn.seen["default_policy"]
    flat = [i for mb in seen for i in mb]
    assert len(seen) == 8 and len(flat) == 32  # ceil(3 * 10 / 4)
    assert flat[:10] == list(range(10))  # first pass in order
    second, third = flat[10:20], flat[20:30]
    assert sorted(second) == list(range(10)) and sorted(third) == list(range(10))  # whole passes
    assert second != list(range(10)) or third != list(range(10))  # and they were permuted
    # [B, T] rows stay whole: every row's sequence matches its index
    for mb_idx, seq in zip(seen, lrn.seen["default_policy/seq"]):
        expected = torch.tensor(mb_idx).unsqueeze(1) * 100 + torch.arange(3)
        assert torch.equal(seq, expected)


def test_shuffle_is_per_module_and_seeded():
    def run(seed):
        lrn = RecordingLearner(two_modules(), seed=seed)
        lrn.update({"p": index_batch(8), "q": index_batch(8)}, minibatch_size=4, num_epochs=6,
                   shuffle_batch_per_epoch=True)
        return lrn.seen

    a, b = run(7), run(7)
    assert a == b  # same seed, same order
    assert a["p"][2:] != a["q"][2:]  # each module draws its own permutation


def test_shuffle_ignored_for_single_epoch_and_full_batch():
    lrn = RecordingLearner(seed=0)
    lrn.update(index_batch(10), minibatch_size=4, num_epochs=1, shuffle_batch_per_epoch=True)
    assert lrn.seen["default_policy"] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    lrn2 = RecordingLearner(seed=0)
    lrn2.update(index_batch(5), num_epochs=2, shuffle_batch_per_epoch=True)
    assert lrn2.seen["default_policy"] == [list(range(5))] * 2


def test_hook_order_and_timesteps():
    lrn = RecordingLearner()
    lrn.update(index_batch(8), minibatch_size=4, num_epochs=1, timesteps={"num_env_steps_sampled_lifetime": 77})
    step = [("forward", "default_policy"), ("loss", "default_policy"), ("gradients", ("default_policy",)),
            ("postprocess", ("default_policy",)), ("apply", ("default_policy",))]
    ts = {"num_env_steps_sampled_lifetime": 77}
    assert lrn.events == [("before", ts)] + step + step + [("after", ts)]


def test_int_timesteps_and_missing_timesteps_reach_hooks():
    lrn = RecordingLearner()
    lrn.update(index_batch(2), timesteps=5)
    assert lrn.events[0] == ("before", {"num_env_steps_sampled_lifetime": 5})
    lrn.events.clear()
    lrn.update(index_batch(2))
    assert lrn.events[0] == ("before", {}) and lrn.events[-1] == ("after", {})


def test_training_changes_weights_and_loss_decreases():
    torch.manual_seed(0)
    lrn = RecordingLearner(lr=0.05)
    b = index_batch(64)
    b["y"] = b["x"] @ torch.tensor([1.0, -2.0, 0.5]) + 0.3
    first = peek(lrn.update(b))["default_policy"]["total_loss"]
    for _ in range(200):
        last = peek(lrn.update(b, minibatch_size=16, num_epochs=1))["default_policy"]["total_loss"]
    assert last < first * 0.05


def test_treetensor_batch_matches_dict_batch():
    import treetensor.torch as ttorch

    a, b = RecordingLearner(seed=3), RecordingLearner(seed=3)
    b.set_weights(a.get_weights())
    data = index_batch(10, t=2)
    ra = a.update(data, minibatch_size=4, num_epochs=3, shuffle_batch_per_epoch=True)
    rb = b.update(ttorch.Tensor(data), minibatch_size=4, num_epochs=3, shuffle_batch_per_epoch=True)
    assert a.seen["default_policy"] == b.seen["default_policy"]
    assert peek(ra)["default_policy"]["total_loss"] == pytest.approx(peek(rb)["default_policy"]["total_loss"])
    assert torch.equal(a.modules["default_policy"].weight, b.modules["default_policy"].weight)


def test_multi_module_treetensor_batch():
    import treetensor.torch as ttorch

    lrn = RecordingLearner(two_modules())
    tree = ttorch.Tensor({"p": index_batch(4), "q": index_batch(2)})
    lrn.update(tree, minibatch_size=2, num_epochs=1)
    assert lrn.seen == {"p": [[0, 1], [2, 3]], "q": [[0, 1], [0, 1]]}


def test_a_tree_given_to_update_reaches_the_core_as_nested_dicts():
    import treetensor.torch as ttorch

    class Seen(RecordingLearner):
        def forward_train(self, module_id, batch):
            self.seen.setdefault("types", []).append((type(batch), type(batch["sub"])))
            return super().forward_train(module_id, batch)

    data = index_batch(6)
    data["sub"] = ttorch.Tensor({"j": torch.arange(6)})  # a tree under a key of a plain dict
    lrn = Seen()
    lrn.update(data, minibatch_size=3, num_epochs=1)
    assert lrn.seen["types"] == [(dict, dict), (dict, dict)]
    assert lrn.seen["default_policy"] == [[0, 1, 2], [3, 4, 5]]
    lrn.update(ttorch.Tensor(data), minibatch_size=6, num_epochs=1)  # a whole tree
    assert lrn.seen["types"][-1] == (dict, dict)


def test_nested_dict_batch_slices_every_leaf():
    class Nested(RecordingLearner):
        def forward_train(self, module_id, batch):
            self.seen.setdefault("inner", []).append(batch["sub"]["j"].tolist())
            return super().forward_train(module_id, batch)

    lrn = Nested()
    b = index_batch(5)
    b["sub"] = {"j": torch.arange(5) + 10}
    lrn.update(b, minibatch_size=3, num_epochs=1)
    assert lrn.seen["inner"] == [[10, 11, 12], [13, 14, 10]]


class _LaterLoss(RecordingLearner):
    """Module 'q' returns a function: its loss is computed after 'p' stepped, and reads p's weights then."""

    def __init__(self, **kw):
        super().__init__(two_modules(), shared_batch=True, **kw)
        self.p_seen_by_q: list = []

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        loss = super().compute_loss_for_module(module_id, batch, fwd_out)
        if module_id == "p":
            return loss

        def later():
            self.p_seen_by_q.append(self.modules["p"].weight.detach().clone())
            return {"total_loss": loss, "extra": loss.detach() * 0 + 7.0}
        return later


def test_a_loss_given_as_a_function_steps_after_the_other_modules():
    lrn = _LaterLoss(lr=0.1)
    w0 = lrn.modules["p"].weight.detach().clone()
    res = lrn.update(batch=index_batch(8))
    steps = [e for e in lrn.events if e[0] in ("gradients", "apply")]
    assert steps == [("gradients", ("p",)), ("apply", ("p",)), ("gradients", ("q",)), ("apply", ("q",))]
    (seen,) = lrn.p_seen_by_q
    assert not torch.equal(seen, w0) and torch.equal(seen, lrn.modules["p"].weight.detach())
    out = peek(res)
    assert out["q"]["extra"] == 7.0
    assert out["q"]["num_module_steps_trained"] == 8 == out["p"]["num_module_steps_trained"]


def test_a_loss_function_must_return_a_loss():
    class Bad(_LaterLoss):
        def compute_loss_for_module(self, module_id, batch, fwd_out):
            out = super().compute_loss_for_module(module_id, batch, fwd_out)
            return (lambda: "nope") if module_id == "q" else out

    with pytest.raises(TypeError, match="module 'q' is a str"):
        Bad(lr=0.1).update(batch=index_batch(8))
