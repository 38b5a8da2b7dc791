"""Declared context fields and the wiring check at task.run start (issue 13)."""
import warnings

import pytest

from contexts import OnlineRLContext
from middleware import OffPolicyLearner, StepCollector, data_pusher, offpolicy_data_fetcher, trainer
from pipeline import Role, for_all_roles, for_roles, task
from pipeline.runtime.contracts import Fields, WiringError, WiringWarning, check_chain, fields_of
from pipeline.data import DequeBuffer

CFG = {"policy": {"learn": {"batch_size": 4, "update_per_collect": 1}, "collect": {"n_sample": 4}}}


class _Learner:
    def update(self, batch, timesteps=None):
        return {"total_loss": 0.0}


def _ran(log):
    def mark(ctx):
        log.append(ctx.total_step)
    return mark


def test_every_library_middleware_declares_its_fields():
    buf = DequeBuffer(8)
    assert fields_of(data_pusher(CFG, buf)).writes == ("@buffer",)
    fetch = fields_of(offpolicy_data_fetcher(CFG, buf))
    assert "@buffer" in fetch.reads and fetch.writes == ("train_data",)
    assert fields_of(trainer(CFG, _Learner())).required() == [("train_data",)]
    assert "transitions" in fields_of(StepCollector).writes


def test_fetcher_with_no_pusher_before_it_is_reported_before_the_first_step():
    buf = DequeBuffer(8)
    ran = []
    with task.start(ctx=OnlineRLContext()):
        task.use(offpolicy_data_fetcher(CFG, buf))
        task.use(trainer(CFG, _Learner()))
        task.use(_ran(ran))
        with pytest.warns(WiringWarning, match=r"offpolicy_data_fetcher reads the data in the buffer"):
            task.run(1)
    with task.start(ctx=OnlineRLContext(), fields_check="error"):
        task.use(offpolicy_data_fetcher(CFG, buf))
        task.use(_ran(ran))
        with pytest.raises(WiringError, match="offpolicy_data_fetcher"):
            task.run(1)
    assert ran == [0]  # the strict run stopped before its first step


def test_pusher_registered_after_the_fetcher_is_named():
    buf = DequeBuffer(8)
    with task.start(ctx=OnlineRLContext(), fields_check="error"):
        task.use(offpolicy_data_fetcher(CFG, buf))
        task.use(data_pusher(CFG, buf))
        with pytest.raises(WiringError, match="data_pusher writes it but runs after it"):
            task.run(1)


def test_learner_node_whose_roles_leave_its_inputs_unwritten():
    buf = DequeBuffer(8)

    @for_roles(Role.FETCHER, writes=["train_data"])
    def remote_fetcher(ctx):
        ctx.train_data = None

    with task.start(ctx=OnlineRLContext(), roles=[Role.LEARNER], fields_check="error"):
        task.use(StepCollector(CFG, lambda obs, **kw: obs, env=None))
        task.use(data_pusher(CFG, buf))
        task.use(OffPolicyLearner(CFG, _Learner(), buf))
        with pytest.raises(WiringError) as info:
            task.run(1)
    text = str(info.value)
    assert "data_pusher reads ctx.transitions or ctx.episodes" in text
    assert "roles learner" in text and "skips StepCollector (roles collector)" in text

    with task.start(ctx=OnlineRLContext(), roles=[Role.LEARNER], fields_check="error"):
        task.use(remote_fetcher)
        task.use(trainer(CFG, _Learner()))
        with pytest.raises(WiringError, match=r"trainer reads ctx.train_data.*skips .*remote_fetcher \(roles fetcher\)"):
            task.run(1)


def test_a_well_wired_chain_is_silent_and_checked_once_per_registration(monkeypatch):
    import pipeline.runtime.task as task_module  # noqa: F401
    import sys

    calls = []
    real = sys.modules["pipeline.runtime.task"].check_chain
    monkeypatch.setattr(sys.modules["pipeline.runtime.task"], "check_chain", lambda *a, **k: calls.append(1) or real(*a, **k))

    @for_roles(Role.COLLECTOR, writes=["transitions"])
    def collect(ctx):
        ctx.transitions = [{"obs": 0}]

    buf = DequeBuffer(8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", WiringWarning)
        with task.start(ctx=OnlineRLContext()):
            task.use(collect)
            task.use(data_pusher(CFG, buf))
            task.use(lambda ctx: None)  # undeclared: trusted
            task.run(3)
            task.run(2)
            assert len(calls) == 1
            task.use(lambda ctx: None)
            task.run(1)
            assert len(calls) == 2


def test_parallel_branches_do_not_see_each_others_writes_serial_ones_do():
    @for_all_roles(writes=["a"])
    def writer(ctx):
        ctx.a = 1

    @for_all_roles(reads=["a"])
    def reader(ctx):
        return ctx.a

    assert check_chain([task.serial(writer, reader)], provided=()) == []
    with task.start():
        problems = check_chain([task.parallel(writer, reader)], provided=())
    assert len(problems) == 1 and problems[0].startswith("test_parallel_branches")


def test_declarations_are_validated():
    with pytest.raises(ValueError, match="not a context field name"):
        for_all_roles(reads=["not a name"])
    with pytest.raises(ValueError, match="plain field name"):
        Fields.of(writes=["a|b"])
    with pytest.raises(ValueError, match="fields_check must be one of"):
        task.start(fields_check="loud")


def test_a_buffer_filled_before_the_run_needs_no_pusher():
    buf = DequeBuffer(8)
    for i in range(6):
        buf.push({"obs": float(i)})
    with warnings.catch_warnings():
        warnings.simplefilter("error", WiringWarning)
        with task.start(ctx=OnlineRLContext(), fields_check="error"):
            task.use(offpolicy_data_fetcher(CFG, buf), lock=True)
            task.use(lambda ctx: None)
            task.run(1)
