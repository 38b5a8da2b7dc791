"""Authentication and malformed input: forged, garbage, truncated, replayed and misrouted messages are
dropped and counted, never delivered; a good message after them still arrives."""
import hashlib
import hmac
import threading
import time

import pytest
import zmq

from pipeline.parallel import codec
from pipeline.parallel.transport_auth import client as keyed_client
from pipeline.parallel.keys import MissingKeyError
from pipeline.parallel.wire import _HEADER, _VERSION, K_DATA, K_HEARTBEAT, K_HELLO
from pipeline.parallel.zmq_router import ZmqRouter
from parallel_helpers import wait_until

KEY = b"k" * 32


@pytest.fixture
def node():
    got = []
    r = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, heartbeat_timeout=2.0)
    r.start(lambda e, a, k: got.append((e, a, k)))
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    keyed_client(push, KEY)  # passes the connection handshake; each test then sends raw frames
    push.setsockopt(zmq.LINGER, 0)
    push.connect(r.address)
    yield r, push, got
    push.close(0)
    ctx.term()
    r.stop()


def _message(key, node, event="ev", args=(1,), sender=9, seq=1, dest=None, dest_session=None, payload=None):
    meta = payload if payload is not None else codec.encode((event, args, {}))[0]
    head = _HEADER.pack(b"RP", _VERSION, K_DATA, sender, 12345, node.node_id if dest is None else dest,
                        node.session if dest_session is None else dest_session, seq, 0)
    mac = hmac.new(key, head + meta, hashlib.sha256).digest()
    return mac + head + meta


def test_forged_garbage_and_malformed_are_dropped_and_counted(node):
    r, push, got = node
    push.send(_message(b"x" * 32, r, "forged"))                      # wrong key
    push.send(b"")                                                    # empty
    push.send(b"\x00" * 10)                                           # too short
    push.send(b"\xff" * 500)                                          # garbage of plausible length
    good = _message(KEY, r, "tampered")
    push.send(good[:-1] + bytes([good[-1] ^ 1]))                      # one bit flipped
    push.send_multipart([_message(KEY, r, "extra"), b"frame"])        # an unauthenticated extra frame
    push.send(_message(KEY, r, payload=b"\x07garbage", seq=2))       # right key, undecodable body
    push.send(_message(KEY, r, payload=codec.encode([1, 2])[0], seq=3))  # right key, not (event, args, kw)
    push.send(_message(KEY, r, "misrouted", dest=5, seq=4))          # for another node
    push.send(_message(KEY, r, "old-session", dest_session=1, seq=5))  # for an earlier incarnation
    push.send(_message(KEY, r, "ok", seq=6))
    push.send(_message(KEY, r, "ok", seq=6))                          # replay
    push.send(_message(KEY, r, "ok2", seq=7))
    assert wait_until(lambda: len(got) >= 2 and r.stats["duplicates"] >= 1)
    time.sleep(0.2)
    assert [e for e, a, k in got] == ["ok", "ok2"]
    assert r.stats["auth_failed"] == 4  # forged, garbage, bit flip, extra frame
    assert r.stats["malformed"] == 4    # empty, short, bad body, wrong shape
    assert r.stats["misrouted"] == 2
    assert r.stats["duplicates"] == 1


def test_the_codec_is_not_reached_before_the_mac_check(node, monkeypatch):
    r, push, got = node
    from pipeline.parallel import delivery
    calls = []
    for module, name in ((codec, "decode"), (codec, "decode_event"), (delivery, "_decode_small_event")):
        real = getattr(module, name)  # the delivery decodes the common small event itself
        monkeypatch.setattr(module, name, lambda *a, _real=real, **kw: calls.append(1) or _real(*a, **kw))
    push.send(_message(b"y" * 32, r, "forged"))
    assert wait_until(lambda: r.stats["auth_failed"] == 1)
    assert calls == [] and got == []
    push.send(_message(KEY, r, "genuine"))  # the same path with the right key does reach the codec
    assert wait_until(lambda: len(got) == 1)
    assert calls and got[0][0] == "genuine"


def test_missing_or_short_key_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("RLPIPE_KEY", raising=False)
    monkeypatch.delenv("RLPIPE_KEY_FILE", raising=False)
    with pytest.raises(MissingKeyError, match="RLPIPE_KEY"):
        ZmqRouter(0, attach_to=["tcp://10.1.2.3:50515"])
    with pytest.raises(MissingKeyError, match="at least 16"):
        ZmqRouter(0, key="short")


def test_key_from_file(monkeypatch, tmp_path):
    f = tmp_path / "key"
    f.write_text("ab" * 32 + "\n")
    monkeypatch.delenv("RLPIPE_KEY", raising=False)
    monkeypatch.setenv("RLPIPE_KEY_FILE", str(f))
    assert ZmqRouter(0)._key == bytes.fromhex("ab" * 32)


@pytest.mark.parametrize("bus_auth", ["plain", "curve"])
def test_two_routers_with_different_keys_do_not_talk(bus_auth):
    """Nothing from the other key is delivered; after the startup timeout both sides name the other and give
    up: the connecting side's start raises, the other ends its run (a local "__finish__") and its stop
    raises."""
    from pipeline.parallel.zmq_router import KeyMismatchError
    got_a, got_b = [], []
    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=b"a" * 32, startup_timeout=0.5, heartbeat_interval=0.1,
                  bus_auth=bus_auth)
    a.start(lambda *m: got_a.append(m))
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=b"b" * 32, attach_to=[a.address], startup_timeout=0.5,
                  heartbeat_interval=0.1, bus_auth=bus_auth)
    try:
        with pytest.raises(KeyMismatchError, match=f"peer at {a.address} signs with a different key"):
            b.start(lambda *m: got_b.append(m))
        assert a.peers == [] and b.peers == []
        assert wait_until(lambda: a.stats["refused_connections"] > 0)  # refused at the connection (transport_auth)
        assert wait_until(lambda: got_a == [("__finish__", (), {})], timeout=30)  # nothing else came through
        assert all(m[0] == "__finish__" for m in got_b)
    finally:
        b.stop()
        # Under CURVE a refused handshake names no connection: the address is looked up from the socket, which
        # the peer may have closed already (then "an unknown address").
        where = "127.0.0.1" if bus_auth == "plain" else "(127.0.0.1|an unknown address)"
        with pytest.raises(KeyMismatchError, match=f"peer at {where} signs with a different key"):
            a.stop()


def test_backpressure_blocks_instead_of_dropping_and_is_bounded():
    """A receiver that does not read: the sender fills the queues, then blocks and finally gets a
    BackpressureTimeout naming the peer; nothing was counted as sent that was dropped."""
    from pipeline.parallel import BackpressureTimeout
    release = threading.Event()
    got = []

    def slow(e, a, k):
        if e == "x":
            release.wait(20)
            got.append(e)

    a = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, hwm=4, heartbeat_interval=0.1)
    a.start(slow)
    b = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[a.address], hwm=4, send_timeout=0.5,
                  heartbeat_interval=0.1)
    b.start(lambda *m: None)
    try:
        payload = b"p" * (1 << 20)  # big messages fill the kernel buffers quickly too
        with pytest.raises(BackpressureTimeout, match="node 0"):
            for _ in range(10000):
                b.emit("x", (payload,), {}, to=0)
        n_sent = b.stats["sent"]
        assert 0 < n_sent < 10000
        release.set()
        assert wait_until(lambda: len(got) == n_sent, 20)  # everything accepted was delivered
    finally:
        release.set()
        b.stop()
        a.stop()


def _router(node_id, **kw):
    return ZmqRouter(node_id, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, heartbeat_timeout=3.0, **kw)


def _send_raw(address, frames):
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    keyed_client(push, KEY)  # passes the connection handshake; each test then sends raw frames
    push.setsockopt(zmq.LINGER, 1000)
    push.connect(address)
    push.send_multipart(frames)
    push.close()
    ctx.term()


def _still_talking(a, b2, got_a, got_b):
    a.emit("to_b", (), {}, to=1)
    b2.emit("to_a", (), {}, to=0)
    return wait_until(lambda: "to_a" in got_a and "to_b" in got_b)


@pytest.mark.parametrize("who_connects", ["restarted node attaches", "we attach to the restarted node"])
def test_replayed_hello_of_an_earlier_incarnation_is_refused(who_connects):
    """A HELLO carries no sequence number. One captured from an earlier incarnation of node 1 and replayed
    after node 1 restarted must not make node 0 drop its connection to the live node 1 (whether node 0
    learnt the new incarnation from its HELLO or from its ACK)."""
    got_a, got_b = [], []
    a = b1 = b2 = None
    try:
        if who_connects == "restarted node attaches":
            a = _router(0)
            a.start(lambda e, ar, kw: got_a.append(e))
            b1 = _router(1, attach_to=[a.address])
            b1.start(lambda *m: None)
            captured = b1._handshake.hello_frames(token=99)  # what an eavesdropper could have recorded
            b1.stop()
            b2 = _router(1, attach_to=[a.address])
            b2.start(lambda e, ar, kw: got_b.append(e))
        else:
            b1 = _router(1)
            b1.start(lambda *m: None)
            captured = b1._handshake.hello_frames(token=99)
            b1.stop()
            b2 = _router(1)
            b2.start(lambda e, ar, kw: got_b.append(e))
            a = _router(0, attach_to=[b2.address])
            a.start(lambda e, ar, kw: got_a.append(e))
        assert wait_until(lambda: 1 in a.peers and a._peers[1].session == b2.session)
        _send_raw(a.address, captured)
        assert wait_until(lambda: a.stats["stale_hello"] == 1)
        time.sleep(0.3)
        assert a._peers[1].session == b2.session and a.peers == [1]  # the live connection was kept
        assert _still_talking(a, b2, got_a, got_b)
    finally:
        for r in (b2, a):
            if r is not None:
                r.stop()


def test_a_replayed_hello_of_a_connected_or_departed_incarnation_is_refused():
    """Issue 28, item 2: someone with the connection credential replays HELLOs node 1 really sent (they carry
    no sequence number). One replayed while node 1 is connected is refused (not newer than the last one
    accepted from that incarnation); one replayed after node 1 left does not make it show as joined again."""
    events = []
    a = _router(0)
    a.start(lambda e, ar, kw: events.append((e, ar)))
    b = _router(1, attach_to=[a.address])
    sent = []
    real = b._handshake.hello_frames
    b._handshake.hello_frames = lambda token: sent.append(real(token)) or sent[-1]  # what an eavesdropper records
    try:
        b.start(lambda *m: None)
        assert wait_until(lambda: a.peers == [1])
        assert sent, "node 1 sent no HELLO"
        stale = a.stats["stale_hello"]
        _send_raw(a.address, sent[-1])  # node 0 accepted this very HELLO
        assert wait_until(lambda: a.stats["stale_hello"] == stale + 1), a.stats
        b.stop()
        assert wait_until(lambda: a.peers == [] and ("__peer_left__", (1,)) in events)
        left_at = len(events)
        for frames in (sent[0], sent[-1]):
            _send_raw(a.address, frames)
        assert wait_until(lambda: a.stats["stale_hello"] == stale + 3), a.stats
        time.sleep(0.5)
        assert a.peers == [] and not a.peer_info(1)["alive"]
        assert ("__peer_joined__", (1,)) not in events[left_at:], events[left_at:]
    finally:
        b.stop()
        a.stop()


def test_a_replayed_hello_does_not_revive_a_dead_incarnation():
    """Issue 28, item 2: node 1 goes silent (its heartbeats to node 0 are held back: a partition) and is
    declared dead; a HELLO it really sent before, replayed, does not make it show as joined again."""
    events = []
    a = _router(0)
    a.start(lambda e, ar, kw: events.append((e, ar)))
    b = _router(1, attach_to=[a.address])
    sent = []
    real_hello, real_send = b._handshake.hello_frames, b._sender.send_to
    b._handshake.hello_frames = lambda token: sent.append(real_hello(token)) or sent[-1]
    silent = threading.Event()
    b._sender.send_to = lambda p, kind, *args, **kw: (False if silent.is_set() and kind == K_HEARTBEAT
                                                      else real_send(p, kind, *args, **kw))
    try:
        b.start(lambda *m: None)
        assert wait_until(lambda: a.peers == [1]) and sent
        silent.set()
        assert wait_until(lambda: ("__peer_dead__", (1,)) in events, 10), events
        dead_at = len(events)
        stale = a.stats["stale_hello"]
        _send_raw(a.address, sent[-1])
        assert wait_until(lambda: a.stats["stale_hello"] == stale + 1), a.stats
        time.sleep(0.5)
        assert a.peers == [] and ("__peer_joined__", (1,)) not in events[dead_at:], events[dead_at:]
        silent.clear()  # its heartbeats (sequence-numbered) revive it, as before
        assert wait_until(lambda: a.peers == [1], 10)
    finally:
        b.stop()
        a.stop()


def test_hello_outside_the_clock_window_or_without_time_is_refused():
    got = []
    a = _router(0, hello_max_skew=30.0)
    a.start(lambda e, ar, kw: got.append(e))
    b = _router(1)  # never started: only builds messages with the real key
    b.address = "tcp://127.0.0.1:9"
    try:
        for shift in (-1000.0, 1000.0, None):  # an old capture, a clock far ahead, an older rlpipe
            msg = b._handshake.announce()
            if shift is None:
                del msg["time"]
            else:
                msg["time"] += shift
            msg["token"] = 7
            _send_raw(a.address, b._framer.frames(K_HELLO, -1, 0, 0, codec.encode(msg)[0], (), b""))
        assert wait_until(lambda: a.stats["stale_hello"] == 3)
        time.sleep(0.2)
        assert a.peers == [] and got == []
        assert a.stats["malformed"] == 0
    finally:
        a.stop()


def test_extra_frames_are_authenticated_frame_by_frame(node):
    """Large payloads travel as extra frames covered by per-frame tags in the first frame's MAC: a flipped
    bit, a swapped or a dropped frame is refused; the genuine message passes."""
    r, push, got = node
    sender = ZmqRouter(9, key=KEY)  # only its framing is used (never started)
    sender.session = 12345
    bufs = [b"a" * 70000, b"b" * 70000]
    meta = codec.encode(("big", (bufs[0], bufs[1]), {}))[0]
    def frames(seq, payload=bufs):
        return sender._framer.frames(K_DATA, r.node_id, r.session, seq, meta, payload, sender._framer.seal(payload))
    good = frames(1)
    push.send_multipart([good[0], good[1], good[2][:-1] + b"c"])  # one byte changed
    push.send_multipart([good[0], good[2], good[1]])               # frames swapped
    push.send_multipart([good[0], good[1]])                        # a frame dropped
    push.send_multipart(frames(2))
    assert wait_until(lambda: len(got) == 1)
    assert r.stats["auth_failed"] == 3
    assert got[0][0] == "big" and got[0][1] == (bufs[0], bufs[1])
