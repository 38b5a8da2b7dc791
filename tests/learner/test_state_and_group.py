"""Weights, state, safe checkpoints and LearnerGroup."""
from __future__ import annotations

import copy
import functools
import os
import sys
import types

import pytest
import torch

from learner_helpers import RecordingLearner, index_batch, two_modules
from pipeline.learner import LearnerGroup, MetricsLogger, plan_shards

peek = MetricsLogger.peek_results


class TargetLearner(RecordingLearner):
    """Like a DQN learner: a target network outside `modules`, saved as extra state."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.target = copy.deepcopy(self.modules["default_policy"]).requires_grad_(False)
        self.syncs = 0

    def after_gradient_based_update(self, timesteps):
        self.syncs += 1
        self.seq_in_hook = (self.weights_seq_no, self.num_minibatch_updates_lifetime, self.num_env_steps_trained_lifetime)
        self.target.load_state_dict(self.modules["default_policy"].state_dict())

    def get_extra_state(self):
        return {"target": self.target.state_dict(), "syncs": self.syncs}

    def set_extra_state(self, state):
        self.target.load_state_dict(state["target"])
        self.syncs = state["syncs"]


def _params_equal(a, b):
    return all(torch.equal(x, y) for x, y in zip(a.parameters(), b.parameters()))


def test_get_weights_are_copies_and_set_weights_respects_seq_no():
    a, b = RecordingLearner(), RecordingLearner()
    w = a.get_weights()
    w["default_policy"]["weight"].add_(1.0)  # a copy: the learner is untouched
    assert not torch.equal(w["default_policy"]["weight"], a.modules["default_policy"].weight)
    a.update(index_batch(4))
    a.update(index_batch(4))
    assert b.set_weights(a.get_weights(), weights_seq_no=a.weights_seq_no) is True
    assert b.weights_seq_no == 2 and _params_equal(a.modules["default_policy"], b.modules["default_policy"])
    old = RecordingLearner().get_weights()
    assert b.set_weights(old, weights_seq_no=1) is False  # older: ignored
    assert _params_equal(a.modules["default_policy"], b.modules["default_policy"])
    with pytest.raises(ValueError, match="unknown module ids"):
        b.set_weights({"nope": {}})


def test_state_roundtrip_restores_training_exactly():
    a = TargetLearner()
    a.update(index_batch(10), minibatch_size=4, num_epochs=2)
    state = a.get_state()
    b = TargetLearner()
    b.set_state(state)
    assert a.seq_in_hook == (1, 5, 20)  # the after-hook sees this call's counters
    assert b.weights_seq_no == 1 and b.num_env_steps_trained_lifetime == 20 and b.syncs == 1
    assert _params_equal(a.target, b.target)
    ra = peek(a.update(index_batch(10, seed=5), minibatch_size=4, num_epochs=2))
    rb = peek(b.update(index_batch(10, seed=5), minibatch_size=4, num_epochs=2))
    assert _params_equal(a.modules["default_policy"], b.modules["default_policy"])  # optimizer state too
    assert ra["default_policy"]["total_loss"] == rb["default_policy"]["total_loss"]
    assert rb["default_policy"]["num_module_steps_trained_lifetime"] == 40


def test_get_state_is_a_snapshot():
    a = RecordingLearner()
    state = a.get_state()
    a.update(index_batch(4))
    assert not torch.equal(state["modules"]["default_policy"]["weight"], a.modules["default_policy"].weight)


def test_checkpoint_roundtrip_loads_with_weights_only(tmp_path):
    a = TargetLearner()
    a.update(index_batch(10), minibatch_size=4, num_epochs=2)
    path = a.save_to_path(tmp_path / "ckpt")
    state = torch.load(os.path.join(path, "learner_state.pt"), weights_only=True)  # safe loading works
    assert state["counters"]["weights_seq_no"] == 1
    b = TargetLearner()
    b.restore_from_path(path)
    assert _params_equal(a.modules["default_policy"], b.modules["default_policy"])
    assert _params_equal(a.target, b.target) and b.syncs == 1
    assert b.optimizers["default_policy"].state_dict()["state"][0]["step"] == 5


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_restore_refuses_arbitrary_pickles(tmp_path):
    d = tmp_path / "evil"
    d.mkdir()
    torch.save({"modules": {}, "payload": Evil()}, d / "learner_state.pt")
    with pytest.raises(ValueError, match="not a safe learner checkpoint"):
        RecordingLearner().restore_from_path(d)
    with pytest.raises(FileNotFoundError, match="no learner checkpoint"):
        RecordingLearner().restore_from_path(tmp_path / "missing")


def test_unsafe_extra_state_fails_at_save_time(tmp_path):
    class Unsafe(RecordingLearner):
        def get_extra_state(self):
            return {"fn": Evil()}

    with pytest.raises(TypeError, match=r"state\['extra'\]\['fn'\] is a Evil"):
        Unsafe().save_to_path(tmp_path / "u")
    assert not (tmp_path / "u").exists()


def test_checkpoint_of_other_modules_is_rejected(tmp_path):
    path = RecordingLearner(two_modules()).save_to_path(tmp_path / "two")
    with pytest.raises(ValueError, match="unknown module ids"):
        RecordingLearner().restore_from_path(path)


def test_local_learner_group():
    group = LearnerGroup(functools.partial(RecordingLearner, lr=0.01), num_learners=0)
    assert group.is_local
    res = peek(group.update(index_batch(10), minibatch_size=4, num_epochs=2))
    assert res["default_policy"]["num_module_steps_trained"] == 20
    assert group.weights_seq_no == 1
    assert group.foreach_learner(lambda l: l.weights_seq_no) == [1]
    with pytest.raises(ValueError, match="async_update"):
        group.update(index_batch(4), async_update=True)
    other = RecordingLearner()
    assert group.set_weights(other.get_weights(), weights_seq_no=0) is False  # older than 1
    assert group.set_weights(other.get_weights(), weights_seq_no=5) is True
    assert group.weights_seq_no == 5


def test_learner_group_checkpoint(tmp_path):
    g1 = LearnerGroup(RecordingLearner)
    g1.update(index_batch(8), minibatch_size=4)
    g1.save_to_path(tmp_path / "g")
    g2 = LearnerGroup(RecordingLearner)
    g2.restore_from_path(tmp_path / "g")
    assert g2.weights_seq_no == 1
    assert _params_equal(g1.learner.modules["default_policy"], g2.learner.modules["default_policy"])
    assert torch.equal(g2.get_weights()["default_policy"]["weight"], g1.get_state()["modules"]["default_policy"]["weight"])


def test_learner_group_bad_arguments():
    with pytest.raises(ValueError, match="num_learners"):
        LearnerGroup(RecordingLearner, num_learners=-1)
    with pytest.raises(TypeError, match="not a Learner"):
        LearnerGroup(lambda: object())


def test_remote_learners_need_ray(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(ImportError, match=r"pip install rlpipe\[ray\]"):
        LearnerGroup(RecordingLearner, num_learners=2)


def test_plan_shards_splits_rows_and_agrees_on_minibatch_count():
    batch = {"p": index_batch(10), "q": index_batch(3)}
    shards, k = plan_shards(batch, 2, minibatch_size=4, num_epochs=2)
    assert [s["p"]["idx"].tolist() for s in shards] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert [s["q"]["idx"].tolist() for s in shards] == [[0, 1], [2]]
    assert k == 3  # ceil(2 * 5 / 4), the same for every learner
    # each learner runs exactly k minibatches and together they train 2 * 3 * 4 rows per module
    learners = [RecordingLearner(two_modules()) for _ in shards]
    results = [ln.update(s, minibatch_size=4, num_total_minibatches=k) for s, ln in zip(shards, learners)]
    assert all(len(ln.seen["p"]) == k for ln in learners)
    merged = MetricsLogger()
    merged.aggregate(results)
    assert merged.peek(("p", "num_module_steps_trained")) == 24
    with pytest.raises(ValueError, match="non-empty shards"):
        plan_shards({"p": index_batch(1)}, 2)
