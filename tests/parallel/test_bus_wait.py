"""router.wait: the waiting thread reads and delivers the peers' messages itself (no thread switch), while
the receiver thread steps aside; arrival order and exactly-once delivery hold across the hand-overs; a wait
is bounded by its timeout and released by wake() and stop(); heartbeats are still read while a thread waits."""
import threading
import time

import pytest

from pipeline.parallel import ZmqRouter
from parallel_helpers import wait_until

KEY = b"w" * 32


@pytest.fixture
def pair():
    got = []  # (event, args, ident of the delivering thread)
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, heartbeat_timeout=2.0)
    a.start(lambda e, ar, kw: got.append((e, ar, threading.get_ident())))
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], heartbeat_interval=0.1,
                  heartbeat_timeout=2.0)
    b.start(lambda *m: None)
    assert wait_until(lambda: a.peers == [1])
    yield a, b, got
    b.stop()
    a.stop()


def _when_reading(router, ident, fn):
    """Run fn on a helper thread as soon as thread ``ident`` has become the router's reader."""
    def run():
        if wait_until(lambda: router._reader.owner == ident):
            fn()
    t = threading.Thread(target=run)
    t.start()
    return t


def test_the_waiting_thread_receives_the_reply_itself(pair):
    a, b, got = pair
    me = threading.get_ident()
    helper = _when_reading(a, me, lambda: b.emit("reply", (7,), {}, to=0))
    assert a.wait(lambda: any(e == "reply" for e, _, _ in got), 20)
    helper.join(10)
    (hit,) = [g for g in got if g[0] == "reply"]
    assert hit[1] == (7,) and hit[2] == me  # delivered on the waiting thread, not the receiver thread


def test_order_and_exactly_once_across_hand_overs(pair):
    a, b, got = pair
    me = threading.get_ident()
    nums = lambda: [ar[0] for e, ar, _ in got if e == "n"]  # noqa: E731

    # 1. nobody waits: the receiver thread delivers
    for i in range(100):
        b.emit("n", (i,), {}, to=0)
    assert wait_until(lambda: len(nums()) == 100)
    # 2. this thread waits and reads while b sends
    helper = _when_reading(a, me, lambda: [b.emit("n", (i,), {}, to=0) for i in range(100, 200)])
    assert a.wait(lambda: len(nums()) >= 200, 20)
    helper.join(10)
    # 3. b keeps sending while this thread alternates between waiting and doing something else
    sender = threading.Thread(target=lambda: [b.emit("n", (i,), {}, to=0) or (i % 20 or time.sleep(0.003))
                                              for i in range(200, 600)])
    sender.start()
    k = 200
    while k < 600:
        k = min(600, k + 37)
        assert a.wait(lambda: len(nums()) >= k, 20)
        time.sleep(0.004)  # longer than the hand-back delay: the receiver thread may read meanwhile
    sender.join(10)
    assert nums() == list(range(600))  # arrival order, nothing lost, nothing twice
    phase1 = {t for e, ar, t in got if e == "n" and ar[0] < 100}
    phase2 = {t for e, ar, t in got if e == "n" and 100 <= ar[0] < 200}
    assert me not in phase1 and phase2 == {me}
    assert a.stats["duplicates"] == a.stats["gaps"] == a.stats["malformed"] == 0


def test_wait_times_out_and_wake_makes_it_look_again(pair):
    a, b, got = pair
    t0 = time.monotonic()
    assert a.wait(lambda: False, 0.2) is False
    assert time.monotonic() - t0 < 5  # bounded (not a speed check)
    flag = []

    def later():
        time.sleep(0.1)
        flag.append(1)
        a.wake()

    threading.Thread(target=later).start()
    assert a.wait(lambda: bool(flag), 30) is True
    assert a.stats["malformed"] == 0  # wake-ups are not mistaken for (malformed) messages


def test_stop_releases_a_waiting_thread(pair):
    a, b, got = pair
    result = []
    t = threading.Thread(target=lambda: result.append(a.wait(lambda: False, 60)))
    t.start()
    assert wait_until(lambda: a._reader.owner == t.ident)
    a.stop()
    t.join(10)
    assert not t.is_alive() and result == [False]


def test_two_waiting_threads_both_get_their_events(pair):
    a, b, got = pair
    has = lambda name: any(e == name for e, _, _ in got)  # noqa: E731
    result = {}
    t = threading.Thread(target=lambda: result.update(p=a.wait(lambda: has("p"), 20)))
    t.start()
    helper = _when_reading(a, t.ident, lambda: None)
    helper.join(10)
    b.emit("q", (), {}, to=0)
    b.emit("p", (), {}, to=0)
    result["q"] = a.wait(lambda: has("q"), 20)
    t.join(20)
    assert result == {"p": True, "q": True}
    assert [e for e, _, _ in got if e in "pq"] == ["q", "p"]


def test_a_wait_inside_a_listener_does_not_read_and_ends_at_its_timeout():
    got, inner = [], []
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1)

    def on_message(e, ar, kw):
        got.append(e)
        if e == "outer":  # runs on the reading thread: it cannot read the "inner" event meanwhile
            inner.append(a.wait(lambda: "inner" in got, 0.3))

    a.start(on_message)
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], heartbeat_interval=0.1)
    b.start(lambda *m: None)
    try:
        assert wait_until(lambda: a.peers == [1])
        b.emit("outer", (), {}, to=0)
        b.emit("inner", (), {}, to=0)
        assert wait_until(lambda: got[-2:] == ["outer", "inner"])
        assert inner == [False]
    finally:
        b.stop()
        a.stop()


def test_heartbeats_are_read_while_a_thread_waits():
    got = []
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.05, heartbeat_timeout=0.5)
    a.start(lambda e, ar, kw: got.append((e, threading.get_ident())))
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], heartbeat_interval=0.05,
                  heartbeat_timeout=0.5)
    b.start(lambda *m: None)
    try:
        assert wait_until(lambda: a.peers == [1] and b.peers == [0])
        assert a.wait(lambda: False, 1.5) is False  # three heartbeat timeouts long
        assert "__peer_dead__" not in [e for e, _ in got] and a.peers == [1]
        # afterwards the receiver thread reads again
        b.emit("later", (), {}, to=0)
        assert wait_until(lambda: any(e == "later" for e, _ in got))
        assert [t for e, t in got if e == "later"] != [threading.get_ident()]
    finally:
        b.stop()
        a.stop()


def test_task_wait_for_reads_on_its_own_thread_and_finish_releases_it():
    from pipeline.runtime.task import Task
    tk = Task()
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, expected_peers=0)
    with tk.start(router=a):
        b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], heartbeat_interval=0.1)
        b.start(lambda *m: None)
        try:
            assert wait_until(lambda: a.peers == [1])
            me = threading.get_ident()
            seen = []
            tk.on("hi", lambda *x, **k: seen.append(threading.get_ident()))
            helper = _when_reading(a, me, lambda: b.emit("hi", (5,), {"k": 1}, to=0))
            assert tk.wait_for("hi", timeout=20) == ((5,), {"k": 1})
            helper.join(10)
            assert seen == [me]  # the listeners ran on the waiting thread
            # task.finish set by another thread releases a wait for an event that never comes
            threading.Timer(0.2, lambda: setattr(tk, "finish", True)).start()
            t0 = time.monotonic()
            assert tk.wait_for("never", timeout=60) is None
            assert time.monotonic() - t0 < 30  # released, not timed out
        finally:
            b.stop()


def test_a_listener_that_blocks_the_reader_is_reported(caplog):
    """A listener stuck on a lock the waiting thread holds must not hang silently: it is logged by name."""
    release = threading.Event()
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.05, heartbeat_timeout=2.0,
                  slow_listener_warning=0.3)
    a.start(lambda e, ar, kw: release.wait(10) if e == "stuck" else None)
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], heartbeat_interval=0.05,
                  heartbeat_timeout=2.0)
    b.start(lambda *m: None)
    try:
        assert wait_until(lambda: a.peers == [1])
        with caplog.at_level("WARNING", logger="rlpipe.parallel"):
            b.emit("stuck", (), {}, to=0)
            found = wait_until(lambda: any("'stuck'" in r.getMessage() and "has run for" in r.getMessage()
                                           for r in caplog.records), 10)
            release.set()
        assert found
        assert sum("has run for" in r.getMessage() for r in caplog.records) == 1  # once per delivery
    finally:
        release.set()
        b.stop()
        a.stop()
