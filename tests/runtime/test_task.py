import threading
import time

import pytest

from contexts import Context, OnlineRLContext
from pipeline import Role, StepTimer, Task, for_roles, task


def recorder():
    log = []

    def gen(name):
        def mw(ctx):
            log.append(name + ">")
            yield
            log.append("<" + name)
        mw.__name__ = name
        return mw

    def plain(name):
        def mw(ctx):
            log.append(name)
        mw.__name__ = name
        return mw

    return log, gen, plain


def test_forward_in_order_backward_lifo_and_renew():
    log, gen, plain = recorder()
    seen = []
    with task.start(ctx=OnlineRLContext()):
        task.use(gen("a"))
        task.use(plain("b"))
        task.use(gen("c"))
        task.use(lambda ctx: seen.append(ctx.total_step))
        task.run(max_step=2)
        assert task.ctx.total_step == 1  # the last step's context (issue 12 item 6)
    assert log == ["a>", "b", "c>", "<c", "<a"] * 2
    assert seen == [0, 1]


def test_start_defaults_to_plain_context_and_resets_state():
    with task.start():
        assert type(task.ctx) is Context
        task.use(lambda ctx: None)
        task.on("x", lambda: None)
        task.finish = True
    with task.start():
        assert task._middleware == [] and not task.finish
        assert task._listeners == {}


def test_context_returns_task_ctx_typed_or_says_what_it_found():
    with task.start(ctx=OnlineRLContext()):
        task.use(lambda ctx: setattr(ctx, "env_step", ctx.env_step + 3))
        task.run(2)
        ctx = task.context(OnlineRLContext)
        assert ctx is task.ctx and ctx.env_step == 6
        assert task.context(Context) is task.ctx  # a base class is fine
    with task.start():
        with pytest.raises(TypeError, match=r"task.ctx is a Context, not a OnlineRLContext; start the task with"):
            task.context(OnlineRLContext)


def test_generator_returning_before_yield_has_no_backward():
    log = []

    def early(ctx):
        log.append("fwd")
        return
        yield  # noqa: unreachable: makes this a generator

    def late(ctx):
        yield
        log.append("back")

    with task.start():
        task.use(late)
        task.use(early)
        task.run(1)
    assert log == ["fwd", "back"]


def test_generator_yielding_twice_is_an_error():
    def twice(ctx):
        yield
        yield

    with task.start():
        task.use(twice)
        with pytest.raises(RuntimeError, match="yielded more than once"):
            task.run(1)


def test_finish_completes_the_step_then_stops():
    log, gen, plain = recorder()

    def finisher(ctx):
        if ctx.total_step == 1:
            task.finish = True

    with task.start():
        task.use(gen("a"))
        task.use(finisher)
        task.use(plain("after"))
        task.run(100)
        assert task.ctx.total_step == 1  # the finishing step's context
    assert log == ["a>", "after", "<a"] * 2


def test_run_without_start_or_middleware_is_a_clear_error():
    t = Task()
    with pytest.raises(RuntimeError, match="not started"):
        t.run(1)
    with t.start():
        with pytest.raises(RuntimeError, match="no middleware"):
            t.run(1)


def test_middleware_error_propagates_with_name_and_task_is_reusable():
    closed = []

    def holder(ctx):
        try:
            yield
        finally:
            closed.append(True)

    def broken_collector(ctx):
        raise ValueError("boom")

    with task.start():
        task.use(holder)
        task.use(broken_collector)
        with pytest.raises(ValueError, match="boom") as info:
            task.run(5)
        assert any("broken_collector" in n for n in info.value.__notes__)
        assert not task.running
        assert closed == [True]  # the pending generator was closed, its finally ran
    with task.start():
        task.use(lambda ctx: None)
        task.run(3)
        assert task.ctx.total_step == 2


def test_backward_error_names_the_middleware():
    def bad_backward(ctx):
        yield
        raise KeyError("late")

    with task.start():
        task.use(bad_backward)
        with pytest.raises(KeyError) as info:
            task.run(1)
    assert any("bad_backward" in n for n in info.value.__notes__)


def test_void_is_skipped_and_use_rejects_non_callables():
    with task.start():
        task.use(task.void())
        assert task._middleware == []
        with pytest.raises(TypeError, match="middleware"):
            task.use(42)


def test_wrap_returns_backward_closure():
    log = []

    def inner(ctx):
        log.append("inner>")
        yield
        log.append("<inner")

    def outer(ctx):
        wrapped = task.wrap(inner)
        back = wrapped(ctx)
        log.append("between")
        back()
        back()  # idempotent
        log.append("outer-end")

    with task.start():
        task.use(outer)
        task.run(1)
    assert log == ["inner>", "between", "<inner", "outer-end"]


def test_wrap_uncalled_backward_runs_in_global_backward_phase():
    log = []

    def inner(ctx):
        log.append("inner>")
        yield
        log.append("<inner")

    wrapped = None

    def outer(ctx):
        wrapped(ctx)
        log.append("outer")
        yield
        log.append("<outer")

    def last(ctx):
        log.append("last")

    with task.start():
        wrapped = task.wrap(inner)
        task.use(outer)
        task.use(last)
        task.run(1)
    # inner's backward was pushed after outer's forward began, so it runs before outer's backward
    assert log == ["inner>", "outer", "last", "<inner", "<outer"]


def test_wrap_of_plain_function_returns_noop():
    calls = []
    with task.start():
        w = task.wrap(lambda ctx: calls.append(1))
        back = w(task.ctx)
        back()
    assert calls == [1]


def test_serial_and_parallel_compose():
    log, gen, plain = recorder()
    with task.start():
        task.use(task.serial(gen("a"), plain("b"), gen("c"), task.void()))
        task.use(task.parallel(gen("p"), plain("q")))
        task.run(1)
    # the parallel branches p and q run concurrently: their relative order is free
    assert log[:3] == ["a>", "b", "c>"] and sorted(log[3:5]) == ["p>", "q"] and log[5:] == ["<p", "<c", "<a"]


def test_parallel_runs_concurrently_in_async_mode():
    barrier = threading.Barrier(2, timeout=5)
    hits = []

    def waiter(name):
        def mw(ctx):
            barrier.wait()  # only passes if both run at the same time
            hits.append(name)
        return mw

    with task.start(async_mode=True, n_async_workers=2):
        task.use(task.parallel(waiter("x"), waiter("y")))
        task.run(1)
    assert sorted(hits) == ["x", "y"]


def test_async_mode_keeps_step_order_and_waits_for_executor():
    order = []

    def producer(ctx):
        ctx.transitions = [1, 2, 3]
        task.async_executor(lambda: (time.sleep(0.05), order.append("bg")))

    def pusher(ctx):
        order.append(("push", ctx.transitions))

    def end(ctx):
        yield
        order.append("backward")

    with task.start(async_mode=True, ctx=OnlineRLContext()):
        task.use(end)
        task.use(producer)
        task.use(pusher)
        task.run(1)
    assert order == [("push", [1, 2, 3]), "bg", "backward"]


def test_async_executor_error_surfaces_in_the_pipeline():
    def bad():
        raise RuntimeError("in background")

    with task.start(async_mode=True):
        task.use(lambda ctx: task.async_executor(bad))
        with pytest.raises(RuntimeError, match="in background"):
            task.run(3)


def test_lock_true_and_custom_lock():
    lock = threading.Lock()
    observed = []

    def needs_lock(ctx):
        observed.append(lock.locked())
        yield
        observed.append(lock.locked())

    with task.start():
        task.use(needs_lock, lock=lock)
        task.use(lambda ctx: observed.append(lock.locked()))
        task.use(lambda ctx: observed.append(task._lock.locked()), lock=True)
        task.run(1)
    assert observed == [True, False, True, True]


def test_use_wrapper_applies_to_earlier_middleware_and_step_timer():
    calls = []

    def wrapper(fn):
        def wrapped(ctx):
            calls.append(fn.__name__)
            return fn(ctx)
        wrapped.__name__ = fn.__name__
        return wrapped

    def first(ctx):
        time.sleep(0.002)

    def second(ctx):
        yield
        time.sleep(0.002)

    timer = StepTimer()
    with task.start():
        task.use(first)
        task.use(second)
        task.use_wrapper(wrapper)
        task.use_wrapper(timer)
        task.run(3)
    assert calls == ["first", "second"] * 3
    summary = timer.summary()
    assert summary["first"]["count"] == 3 and summary["second"]["count"] == 3
    assert summary["second"]["mean"] >= 0.002  # its backward part is timed too


def test_events_on_once_off_emit():
    got = []
    with task.start():
        def listener(*a, **k):
            got.append(("on", a, k))
        task.on("e", listener)
        task.once("e", lambda *a, **k: got.append(("once", a, k)))
        task.emit("e", 1, x=2)
        task.emit("e", 3)
        task.off("e", listener)
        task.emit("e", 4)
        task.emit("nobody-listens")
    assert got == [("on", (1,), {"x": 2}), ("once", (1,), {"x": 2}), ("on", (3,), {})]


def test_emit_only_remote_skips_local_and_flags_conflict():
    got = []
    with task.start():
        task.on("e", lambda: got.append(1))
        task.emit("e", only_remote=True)
        assert got == []
        with pytest.raises(ValueError):
            task.emit("e", only_remote=True, only_local=True)


def test_listener_exception_is_not_swallowed():
    def bad_listener():
        raise ZeroDivisionError("listener")

    with task.start():
        task.on("tick", bad_listener)
        task.use(lambda ctx: task.emit("tick"))
        with pytest.raises(ZeroDivisionError):
            task.run(1)


def test_remote_listener_exception_surfaces_at_end_of_step():
    def bad_listener():
        raise ZeroDivisionError("remote listener")

    ran = []
    with task.start():
        task.on("remote", bad_listener)

        def mw(ctx):
            task._on_remote("remote", (), {})  # as the router's thread would
            ran.append(ctx.total_step)

        task.use(mw)
        with pytest.raises(ZeroDivisionError):
            task.run(5)
    assert ran == [0]


def test_wait_for_returns_args_times_out_and_is_released_by_finish():
    with task.start():
        threading.Timer(0.05, lambda: task.emit("ready", 7, k="v")).start()
        assert task.wait_for("ready", timeout=5) == ((7,), {"k": "v"})
        t0 = time.monotonic()
        assert task.wait_for("never", timeout=0.1) is None
        assert time.monotonic() - t0 < 2
        with pytest.raises(TimeoutError, match="never"):
            task.wait_for("never", timeout=0.05, ignore_timeout_exception=False)
        threading.Timer(0.05, lambda: setattr(task, "finish", True)).start()
        t0 = time.monotonic()
        assert task.wait_for("never", timeout=30) is None
        assert time.monotonic() - t0 < 5


def test_remote_finish_event_sets_finish():
    with task.start():
        task._on_remote("__finish__", (), {})
        assert task.finish


def test_roles_and_gating():
    log = []

    @for_roles(Role.LEARNER)
    def trainer_factory():
        def trainer(ctx):
            log.append("train")
        return trainer

    @for_roles("collector")
    class Collector:
        def __call__(self, ctx):
            log.append("collect")

    @for_roles(Role.EVALUATOR)
    def evaluator(ctx):
        log.append("eval")

    def everywhere(ctx):
        log.append("any")

    # no roles: everything runs
    with task.start():
        assert task.has_role(Role.LEARNER) and task.roles == set()
        for m in (trainer_factory(), Collector(), evaluator, everywhere):
            task.use(m)
        task.run(1)
    assert log == ["train", "collect", "eval", "any"]

    # roles given at start
    log.clear()
    with task.start(roles=["learner"]):
        assert task.has_role("learner") and not task.has_role(Role.COLLECTOR)
        for m in (trainer_factory(), Collector(), evaluator, everywhere):
            task.use(m)
        task.run(1)
    assert log == ["train", "any"]

    # roles added after construction and registration: decided when the chain runs
    log.clear()
    with task.start():
        for m in (trainer_factory(), Collector(), evaluator, everywhere):
            task.use(m)
        task.add_role(Role.COLLECTOR)
        task.run(1)
    assert log == ["collect", "any"]


def test_gating_survives_lock_and_wrappers():
    log = []

    @for_roles(Role.LEARNER)
    def trainer(ctx):
        log.append("train")

    with task.start(roles=[Role.COLLECTOR]):
        task.use(trainer, lock=True)
        task.use_wrapper(StepTimer())
        task.use(lambda ctx: log.append("other"))
        task.run(1)
    assert log == ["other"]


def test_unknown_role_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown role 'learnr'"):
        task.start(roles=["learnr"])


def test_ding_style_new_returns_void_idiom():
    class Learnerish:
        def __new__(cls, *args):
            if task.router.is_active and not task.has_role(task.role.LEARNER):
                return task.void()
            return super().__new__(cls)

        def __call__(self, ctx):
            ctx.hit = True

    with task.start():
        assert task.role is Role
        assert not task.router.is_active and task.router.node_id == 0
        task.use(Learnerish())
        assert len(task._middleware) == 1


def test_labels_match():
    with task.start(labels=["collector-0", "gpu"]):
        assert task.match_labels("collector-*")
        assert task.match_labels(["x", "gpu"])
        assert not task.match_labels("learner*")
        assert task.labels == {"collector-0", "gpu", "node.0", "standalone"}


def test_forward_backward_renew_by_hand():
    log, gen, plain = recorder()
    with task.start():
        task.forward(gen("a"))
        task.forward(plain("b"))
        task.backward()
        ctx = task.renew()
        assert ctx.total_step == 1 and task.ctx is ctx
    assert log == ["a>", "b", "<a"]


def test_remote_events_before_any_listener_are_replayed_to_the_first():
    got = []
    with task.start():
        task._on_remote("traj", (1,), {})
        task._on_remote("traj", (2,), {"k": 3})
        task.once("traj", lambda *a, **k: got.append(("once", a, k)))
        task.on("traj", lambda *a, **k: got.append(("on", a, k)))
        task._on_remote("traj", (4,), {})
    assert got == [("once", (1,), {}), ("on", (2,), {"k": 3}), ("on", (4,), {})]


def test_roles_come_from_the_router_when_start_gets_none():
    from pipeline.runtime.router import LocalRouter

    router = LocalRouter()
    router.roles = {"collector"}
    with task.start(router=router):
        assert task.roles == {Role.COLLECTOR}
    with task.start(router=router, roles=["learner"]):
        assert task.roles == {Role.LEARNER}


def test_emit_to_in_a_single_process_is_a_clear_error():
    with task.start():
        with pytest.raises(RuntimeError, match="no peers"):
            task.emit_to(1, "x")


def test_wrap_called_from_plain_middleware_and_from_serial():
    log = []

    def inner(ctx):
        log.append("inner>")
        yield
        log.append("<inner")

    def plain_caller(ctx):
        wrapped(ctx)
        log.append("plain")

    def gen_last(ctx):
        log.append("last>")
        yield
        log.append("<last")

    with task.start():
        wrapped = task.wrap(inner)
        task.use(plain_caller)
        task.use(gen_last)
        task.run(1)
    assert log == ["inner>", "plain", "last>", "<last", "<inner"]

    log.clear()
    with task.start():
        wrapped = task.wrap(inner)
        task.use(task.serial(plain_caller, gen_last))
        task.run(1)
    assert log == ["inner>", "plain", "last>", "<inner", "<last"]
