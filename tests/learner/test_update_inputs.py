"""Learner.update: input kinds, Ray refs, and clear errors for bad input."""
from __future__ import annotations

import sys
import types

import pytest
import torch

from learner_helpers import RecordingLearner, index_batch, two_modules
from pipeline.learner import MetricsLogger, TrainingData

peek = MetricsLogger.peek_results


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({}, "none was given"),
        ({"batch": index_batch(2), "batches": [index_batch(2)]}, "batch, batches"),
        ({"episodes": [[{"idx": 0}]], "data_iterators": iter([])}, "episodes, data_iterators"),
        ({"batch": index_batch(2), "training_data": TrainingData(batch=index_batch(2))}, "training_data and batch"),
    ],
)
def test_exactly_one_input_kind(kwargs, names):
    lrn = RecordingLearner()
    with pytest.raises(ValueError, match="exactly one input") as err:
        lrn.update(**kwargs)
    assert names in str(err.value)
    assert lrn.events == []  # no hook ran


def test_zero_row_module_batch_raises_instead_of_looping():
    lrn = RecordingLearner(two_modules())
    with pytest.raises(ValueError, match="'q' batch has zero rows"):
        lrn.update({"p": index_batch(4), "q": index_batch(0)}, minibatch_size=2, num_epochs=3)
    assert lrn.events == []


def test_unknown_module_id_raises():
    lrn = RecordingLearner(two_modules())
    with pytest.raises(ValueError, match=r"unknown module ids \['zz'\]"):
        lrn.update({"p": index_batch(4), "zz": index_batch(4)})
    single = RecordingLearner()
    with pytest.raises(ValueError, match="unknown module ids"):
        single.update({"default_policy": index_batch(2), "other": index_batch(2)})


def test_multi_module_learner_rejects_plain_batch():
    lrn = RecordingLearner(two_modules())
    with pytest.raises(ValueError, match="not module ids"):
        lrn.update(index_batch(4))


def test_empty_or_inconsistent_batches_raise():
    lrn = RecordingLearner()
    with pytest.raises(ValueError, match="empty"):
        lrn.update({})
    bad = index_batch(4)
    bad["y"] = torch.zeros(3)
    with pytest.raises(ValueError, match="disagree on the batch axis: 4 vs 3"):
        lrn.update(bad)
    with pytest.raises(ValueError, match="no module batches"):
        RecordingLearner(two_modules()).update(batches=[{}])


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"num_epochs": 0}, "num_epochs"),
        ({"minibatch_size": 0}, "minibatch_size"),
        ({"minibatch_size": 2.5}, "minibatch_size"),
        ({"num_total_minibatches": -1}, "num_total_minibatches"),
        ({"num_iters": 3}, "num_iters only applies"),
    ],
)
def test_bad_loop_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        RecordingLearner().update(index_batch(4), **kwargs)


def test_unknown_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="minibatchsize"):
        RecordingLearner().update(index_batch(4), minibatchsize=2)


def test_batches_are_concatenated_per_module():
    lrn = RecordingLearner(two_modules())
    b1 = {"p": index_batch(3)}
    b2 = {"p": index_batch(2), "q": index_batch(2)}
    res = lrn.update(batches=[b1, b2], minibatch_size=5, num_epochs=1)
    assert lrn.seen["p"] == [[0, 1, 2, 0, 1]]
    assert lrn.seen["q"] == [[0, 1, 0, 1, 0]]
    assert peek(res)["p"]["num_module_steps_trained"] == 5


def test_episodes_become_a_batch():
    lrn = RecordingLearner()
    ep1 = [{"idx": torch.tensor(i), "x": torch.ones(3), "y": 1.0} for i in range(3)]
    ep2 = [{"idx": torch.tensor(i), "x": torch.ones(3), "y": 2.0} for i in (10, 11)]
    res = lrn.update(episodes=[ep1, ep2])
    assert lrn.seen["default_policy"] == [[0, 1, 2, 10, 11]]
    assert peek(res)["default_policy"]["num_module_steps_trained"] == 5
    as_batch = lrn.episodes_to_batch([ep1, ep2])["default_policy"]
    assert as_batch["y"].dtype == torch.float32 and as_batch["y"].tolist() == [1, 1, 1, 2, 2]
    assert as_batch["x"].shape == (5, 3)
    with pytest.raises(ValueError, match="cannot become a tensor"):
        lrn.episodes_to_batch([[{"idx": "a"}]])
    multi = RecordingLearner(two_modules())
    multi.update(episodes=[{"p": ep1, "q": ep2}])
    assert multi.seen == {"p": [[0, 1, 2]], "q": [[10, 11]]}
    with pytest.raises(ValueError, match="several modules"):
        multi.update(episodes=[ep1])


def test_data_iterators_need_num_iters_and_stop_when_exhausted():
    lrn = RecordingLearner()
    with pytest.raises(ValueError, match="num_iters"):
        lrn.update(data_iterators=iter([index_batch(2)]))
    with pytest.raises(ValueError, match="one minibatch"):
        lrn.update(data_iterators=iter([index_batch(2)]), num_iters=1, minibatch_size=2)
    with pytest.raises(TypeError, match="not an iterator"):
        lrn.update(data_iterators=[index_batch(2)], num_iters=1)
    stream = (index_batch(2 + i) for i in range(3))
    res = lrn.update(data_iterators=stream, num_iters=10)
    assert lrn.seen["default_policy"] == [[0, 1], [0, 1, 2], [0, 1, 2, 3]]
    assert peek(res)["__all_modules__"]["num_minibatch_updates"] == 3
    two = RecordingLearner()
    two.update(data_iterators=[iter([index_batch(1)] * 5), iter([index_batch(2)] * 5)], num_iters=2)
    assert two.seen["default_policy"] == [[0, 0, 1], [0, 0, 1]]


def test_refs_without_ray_give_a_clear_import_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # makes `import ray` fail even if installed
    lrn = RecordingLearner()
    with pytest.raises(ImportError, match=r"pip install rlpipe\[ray\]") as err:
        lrn.update(batch_refs=["ref"])
    assert "batch_refs" in str(err.value)
    with pytest.raises(ImportError, match="episodes_refs"):
        lrn.update(episodes_refs=["ref"])
    assert lrn.events == []


def test_refs_are_resolved_with_ray_get(monkeypatch):
    store = {"b1": index_batch(2), "b2": index_batch(3),
             "e1": [[{"idx": torch.tensor(7), "x": torch.ones(3), "y": 0.0}]]}
    fake = types.ModuleType("ray")
    fake.get = lambda refs: [store[r] for r in refs]
    monkeypatch.setitem(sys.modules, "ray", fake)
    lrn = RecordingLearner()
    lrn.update(batch_refs=["b1", "b2"])
    assert lrn.seen["default_policy"] == [[0, 1, 0, 1, 2]]
    lrn.update(episodes_refs=["e1"])
    assert lrn.seen["default_policy"][-1] == [7]


def test_training_data_object():
    lrn = RecordingLearner()
    td = TrainingData(batches=[index_batch(2), index_batch(1)])
    assert td.kind == "batches"
    lrn.update(training_data=td)
    assert lrn.seen["default_policy"] == [[0, 1, 0]]
    with pytest.raises(ValueError, match="got 2: batch, episodes"):
        TrainingData(batch=1, episodes=[]).validate()
