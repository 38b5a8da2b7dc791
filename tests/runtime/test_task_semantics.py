"""task.ctx after run, parallel branches, automatic labels, task.use before start (issues 12 and 17)."""
import threading

import pytest

from contexts import Context, OnlineRLContext
from pipeline import task
from pipeline.runtime.router import LocalRouter


def test_ctx_after_run_is_the_last_steps_context_and_the_next_run_starts_from_its_renewal():
    seen = []

    def learner(ctx):
        seen.append(ctx.total_step)
        ctx.train_iter += 1
        ctx.train_output = {"loss": float(ctx.total_step)}

    with task.start(ctx=OnlineRLContext()):
        task.use(learner)
        task.run(3)
        last = task.ctx
        assert last.total_step == 2 and last.train_output == {"loss": 2.0} and last.train_iter == 3
        task.run(2)
        assert seen == [0, 1, 2, 3, 4]  # renewed from the last step: total_step goes on, no step repeats
        assert task.ctx.train_output == {"loss": 4.0} and task.ctx.train_iter == 5
        assert last.train_output == {"loss": 2.0}  # the earlier step's context is not reused


def test_ctx_after_a_finishing_step_and_a_replaced_context():
    def stopper(ctx):
        ctx.result = "done"
        task.finish = True

    with task.start():
        task.use(stopper)
        task.run()
        assert task.ctx.result == "done" and task.ctx.total_step == 0
    fresh = Context()
    with task.start(ctx=fresh):  # a context that has not run yet is the first step's context
        task.use(lambda ctx: setattr(ctx, "seen", True))
        task.run(1)
        assert task.ctx is fresh and fresh.seen
        task.ctx = Context()  # replaced by hand: the next run starts from it, not from its renewal
        mine = task.ctx
        task.run(1)
        assert task.ctx is mine and mine.total_step == 0


def test_parallel_runs_branches_concurrently_without_async_mode():
    barrier = threading.Barrier(3, timeout=5)
    threads = []

    def branch(name):
        def mw(ctx):
            barrier.wait()  # passes only when all three branches run at the same time
            threads.append(threading.get_ident())
            setattr(ctx, name, True)
            yield
            barrier.wait()  # backward parts run concurrently too
        return mw

    with task.start():
        task.use(task.parallel(branch("a"), branch("b"), branch("c")))
        task.run(2)
        assert task.ctx.a and task.ctx.b and task.ctx.c
    assert len(set(threads)) == 3


def test_parallel_reports_a_failing_branch_after_all_branches_ended():
    ended = []

    def slow(ctx):
        threading.Event().wait(0.2)
        ended.append("slow")

    def broken(ctx):
        raise ValueError("bad branch")

    with task.start():
        task.use(task.parallel(slow, broken))
        with pytest.raises(ValueError, match="bad branch") as info:
            task.run(1)
    assert ended == ["slow"]
    assert any("broken" in n for n in info.value.__notes__)


def test_serial_keeps_order_in_one_thread():
    order = []

    def mw(name):
        def f(ctx):
            order.append((name, threading.get_ident()))
        return f

    with task.start(async_mode=True):
        task.use(task.serial(mw("x"), mw("y"), mw("z")))
        task.run(1)
    assert [n for n, _ in order] == ["x", "y", "z"] and len({t for _, t in order}) == 1


def test_automatic_labels():
    with task.start():
        assert {"node.0", "standalone"} <= task.labels and "async" not in task.labels
        assert task.match_labels("node.0") and not task.match_labels("distributed")
    with task.start(async_mode=True, labels=["mine"]):
        assert {"mine", "node.0", "standalone", "async"} <= task.labels

    class Peered(LocalRouter):  # a router with peers, as under `rlpipe run`
        is_active = True

    with task.start(router=Peered(node_id=3, labels=["gpu"])):
        assert {"gpu", "node.3", "distributed"} <= task.labels and "standalone" not in task.labels
        assert task.match_labels("node.3") and task.match_labels("node.*")


def test_use_before_start_is_a_clear_error_not_a_silent_drop():
    task.stop()
    with pytest.raises(RuntimeError, match=r"task.start"):
        task.use(lambda ctx: None)
    with task.start():
        task.use(lambda ctx: None)  # fine once started
        task.run(1)


def test_serial_and_parallel_skip_branches_of_other_roles():
    from pipeline import Role, for_roles

    ran = []

    @for_roles(Role.LEARNER)
    def learn(ctx):
        ran.append("learn")

    @for_roles(Role.COLLECTOR)
    def collect(ctx):
        ran.append("collect")

    with task.start(roles=[Role.COLLECTOR]):
        task.use(task.serial(learn, collect))
        task.use(task.parallel(learn, collect))
        task.run(1)
    assert ran == ["collect", "collect"]
    ran.clear()
    with task.start():  # no roles: every branch runs
        task.use(task.serial(learn, collect))
        task.run(1)
    assert ran == ["learn", "collect"]
