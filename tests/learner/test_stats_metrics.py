"""Stats reductions and MetricsLogger merging."""
from __future__ import annotations

import math

import pytest
import torch

from pipeline.learner import MetricsLogger, Stats
from pipeline.learner import stats as stats_mod


def test_window_mean_min_max_sum():
    s = Stats(reduce="mean", window=3)
    for v in (1, 2, 3, 4):
        s.push(v)
    assert s.peek() == 3.0
    assert Stats(5.0, reduce="min", window=2).peek() == 5.0
    mn, mx, sm = Stats(reduce="min"), Stats(reduce="max", window=2), Stats(reduce="sum", window=2)
    for v in (3, 1, 2):
        mn.push(v), mx.push(v), sm.push(v)
    assert (mn.peek(), mx.peek(), sm.peek()) == (1.0, 2.0, 3.0)
    for reduce in ("mean", "min", "max", "sum"):  # window 1: the latest value
        one = Stats(5.0, reduce=reduce, window=1)
        one.push(2.0)
        one.push(3.0)
        assert one.peek() == 3.0 and len(one) == 1
        assert one.reduce().peek() == 3.0 and Stats.from_state(one.get_state()).peek() == 3.0


def test_ema_mean_and_tensor_values():
    s = Stats(reduce="mean", ema_coeff=0.5)
    s.push(torch.tensor(2.0))
    s.push(4.0)
    assert s.peek() == 3.0
    assert Stats(reduce="mean").ema_coeff == 0.01
    with pytest.raises(TypeError, match="one-element tensors"):
        s.push(torch.ones(3))


def test_empty_stats():
    assert math.isnan(Stats(reduce="mean", window=2).peek())
    assert Stats(reduce="sum").peek() == 0.0


def test_bad_settings():
    with pytest.raises(ValueError, match="reduce"):
        Stats(reduce="median")
    with pytest.raises(ValueError, match="window"):
        Stats(window=0)
    with pytest.raises(ValueError, match="ema_coeff"):
        Stats(reduce="sum", ema_coeff=0.1)
    with pytest.raises(ValueError, match="throughput"):
        Stats(reduce="mean", throughput=True)


def test_clear_on_reduce_and_lifetime_sum():
    per_iter = Stats(reduce="sum", clear_on_reduce=True)
    lifetime = Stats(reduce="sum")
    for v in (1, 2):
        per_iter.push(v), lifetime.push(v)
    r1, r2 = per_iter.reduce(), lifetime.reduce()
    assert (r1.peek(), r2.peek()) == (3.0, 3.0)
    assert per_iter.peek() == 0.0 and lifetime.peek() == 3.0
    assert lifetime.is_lifetime_sum and not per_iter.is_lifetime_sum


def test_throughput(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(stats_mod, "_now", lambda: clock[0])
    s = Stats(reduce="sum", throughput=True)
    s.push(50)
    clock[0] = 102.0
    assert s.peek(throughput=True) == 25.0
    s.reduce()
    s.push(30)
    clock[0] = 103.0
    assert s.peek(throughput=True) == 30.0
    assert s.peek() == 80.0
    with pytest.raises(ValueError, match="throughput"):
        Stats(1.0).peek(throughput=True)


def test_merge_parallel_means_window_one():
    a, b = Stats(0.1, reduce="mean", window=1), Stats(0.2, reduce="mean", window=1)
    assert Stats.merge_parallel([a, b]).peek() == pytest.approx(0.15)
    assert Stats.merge_parallel([Stats(3.0, reduce="min"), Stats(1.0, reduce="min")]).peek() == 1.0
    assert Stats.merge_parallel([Stats(3.0, reduce="max"), Stats(1.0, reduce="max")]).peek() == 3.0
    assert Stats.merge_parallel([Stats(reduce="mean", window=1), a]).peek() == pytest.approx(0.1)  # empty ignored


def test_logger_aggregate_lifetime_sums_without_double_counting():
    def learner_result(loss, steps, lifetime):
        return {
            "m": {
                "loss": Stats(loss, reduce="mean", window=1),
                "steps": Stats(steps, reduce="sum", clear_on_reduce=True),
                "steps_lifetime": Stats(lifetime, reduce="sum"),
            }
        }

    log = MetricsLogger()
    log.aggregate([learner_result(0.1, 10, 10), learner_result(0.2, 20, 20)])
    assert log.peek(("m", "loss")) == pytest.approx(0.15)
    assert log.peek(("m", "steps")) == 30 and log.peek(("m", "steps_lifetime")) == 30
    red = MetricsLogger.peek_results(log.reduce())
    assert red["m"]["steps"] == 30
    # next iteration: each learner reports its own running total
    log.aggregate([learner_result(0.3, 5, 15), learner_result(0.5, 7, 27)])
    assert log.peek(("m", "steps_lifetime")) == 42  # 15 + 27, not 30 + 42
    assert log.peek(("m", "steps")) == 12  # cleared by the reduce, then this iteration's sum
    assert log.peek(("m", "loss")) == pytest.approx(0.4)


def test_logger_log_value_peek_reduce_delete_state():
    log = MetricsLogger()
    log.log_value("a", 1.0, window=2)
    log.log_value("a", 3.0)
    log.log_value(("grp", "n"), 2, reduce="sum", clear_on_reduce=True)
    log.log_dict({"x": 1.0, "y": {"z": 2.0}}, key="d", window=1)
    assert log.peek("a") == 2.0 and log.peek() == {"a": 2.0, "grp": {"n": 2.0}, "d": {"x": 1.0, "y": {"z": 2.0}}}
    assert log.peek("missing", default=None) is None
    with pytest.raises(KeyError):
        log.peek("missing")
    with pytest.raises(ValueError, match="holds a sub-tree"):
        log.log_value("grp", 1.0)
    restored = MetricsLogger()
    restored.set_state(log.get_state())
    assert restored.peek() == log.peek()
    log.reduce()
    assert log.peek(("grp", "n")) == 0.0
    log.delete("d")
    assert not log.has("d") and log.has("a")
    log.reset()
    assert not log and log.reduce() == {}
