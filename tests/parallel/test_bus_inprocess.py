"""Router behaviour that needs no second process: large tensors, stop releasing a blocked sender,
sends to unknown peers counted, clear errors."""
import threading
import time

import numpy as np
import pytest
import torch

from pipeline.parallel import ZmqRouter
from pipeline.parallel.codec import EncodeError
from parallel_helpers import wait_until

KEY = b"q" * 32


@pytest.fixture
def pair():
    got = []
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, hwm=4)
    a.start(lambda e, ar, kw: got.append((e, ar, kw)))
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], heartbeat_interval=0.1, hwm=4,
                  labels=["gpu"], roles=["collector"])
    b.start(lambda *m: None)
    assert a.peers == [1] or wait_until(lambda: a.peers == [1])
    yield a, b, got
    b.stop()
    a.stop()


def test_large_tensors_arrive_intact_even_if_changed_after_emit(pair):
    a, b, got = pair
    w = torch.randn(512, 512)  # 1 MiB
    sent = w.clone()
    b.emit("model", (), {"w": w, "step": np.int64(3), "obs": np.ones((2, 3), np.float32)}, to=0)
    w.mul_(0)  # an optimizer updating in place right after the emit must not change what was sent
    assert wait_until(lambda: any(e == "model" for e, _, _ in got))
    (kw,) = [kw for e, _, kw in got if e == "model"]
    assert torch.equal(kw["w"], sent) and kw["step"] == 3 and kw["obs"].shape == (2, 3)
    assert a.stats["auth_failed"] == 0


def test_peer_info_and_join_event(pair):
    a, b, got = pair
    info = a.peer_info(1)
    assert info["labels"] == {"gpu"} and info["roles"] == {"collector"} and info["alive"]
    assert wait_until(lambda: ("__peer_joined__", (1,), {}) in got)


def test_unencodable_payload_is_a_clear_error(pair):
    a, b, got = pair
    with pytest.raises(EncodeError, match="pickle is never used"):
        b.emit("bad", (object(),), {})


def test_send_to_unknown_node_is_counted_not_silent(pair, caplog):
    a, b, got = pair
    b.emit("x", (), {}, to=42)
    assert b.stats["undeliverable"] == 1
    assert "not connected" in caplog.text


def test_stop_releases_a_sender_blocked_by_backpressure():
    release = threading.Event()
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, hwm=2, heartbeat_interval=0.1, linger=0.3)
    a.start(lambda e, ar, kw: release.wait(10) if e == "x" else None)
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], hwm=2, send_timeout=30,
                  heartbeat_interval=0.1, linger=0.3)
    b.start(lambda *m: None)
    outcome = []

    def flood():
        try:
            for _ in range(10000):
                b.emit("x", (b"z" * (1 << 20),), {}, to=0)
            outcome.append("all sent")
        except Exception as e:  # emit after stop: a clear RuntimeError
            outcome.append(type(e).__name__)

    t = threading.Thread(target=flood)
    t.start()
    try:
        assert wait_until(lambda: b.stats["sent"] > 0)
        time.sleep(0.3)  # now blocked
        t0 = time.monotonic()
        b.stop()
        t.join(10)
        assert not t.is_alive() and time.monotonic() - t0 < 5  # linger 0.3 s, not send_timeout 30 s
        assert outcome == ["RuntimeError"]
        assert b.stats["undeliverable"] >= 1  # the message it gave up on is counted
    finally:
        release.set()
        t.join(5)
        a.stop()


def test_emit_before_start_and_bad_topology_are_clear_errors():
    r = ZmqRouter(0, key=KEY)
    with pytest.raises(RuntimeError, match="not running"):
        r.emit("x", (), {})
    with pytest.raises(ValueError, match="unknown topology"):
        ZmqRouter(0, key=KEY, topology="ring")


def test_finish_releases_a_sender_blocked_by_backpressure():
    """After "__finish__" arrived, a send stuck behind a stalled peer gives up instead of waiting for its
    send_timeout, and the message it could not send is counted. The finish is sent only once the sender is
    seen blocked inside emit (no timing assumption about when that happens)."""
    release = threading.Event()
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, hwm=2, heartbeat_interval=0.1, linger=0.3)
    a.start(lambda e, ar, kw: release.wait(120) if e == "x" else None)
    got = []
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], hwm=2, send_timeout=600,
                  heartbeat_interval=0.1, heartbeat_timeout=60, linger=0.3)
    b.start(lambda e, ar, kw: got.append(e))
    c = ZmqRouter(2, "tcp://127.0.0.1:*", key=KEY, attach_to=[b.address], heartbeat_interval=0.1, linger=0.3)
    c.start(lambda *m: None)
    done = threading.Event()
    in_emit = [None]  # when the flood's current emit began (None: between two emits)

    def flood():
        for _ in range(10000):
            in_emit[0] = time.monotonic()
            b.emit("x", (b"z" * (1 << 20),), {}, to=0)
            in_emit[0] = None
            if "__finish__" in got:
                break
        done.set()

    t = threading.Thread(target=flood)
    t.start()
    try:
        assert wait_until(lambda: in_emit[0] is not None and time.monotonic() - in_emit[0] > 1.0, timeout=120)
        undeliverable = b.stats["undeliverable"]
        c.emit("__finish__", (), {}, to=1)
        assert done.wait(120)  # released by the finish (send_timeout is 600 s, a still blocks)
        assert b.stats["undeliverable"] > undeliverable  # the blocked message is counted, not lost silently
    finally:
        release.set()
        t.join(10)
        for r in (c, b, a):
            r.stop()
