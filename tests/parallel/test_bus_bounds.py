"""Issue 28, items 1 and 2: what a connection can make a node hold is small and bounded.

Real sockets on loopback; hostile peers are raw ZMTP programs in their own processes (``zmtp_raw_peer.py``)
that do what pyzmq never does (declare a huge frame, send a multipart message that never ends). The
properties checked are bytes (the node's resident memory, what the peer managed to send before the node
closed its connection) and counters, not timings."""
import ctypes
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest
import zmq

from pipeline.parallel import codec
from pipeline.parallel.transport_auth import client as keyed_client
from pipeline.parallel.transport_auth import MAX_PENDING
from pipeline.parallel.wire import CHUNK, K_DATA, WIRE_MAX, _Large
from pipeline.parallel.zmq_router import ZmqRouter
from parallel_helpers import HERE, KEY, ROOT, env, wait_until

MIB = 1 << 20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_live() -> int:
    """Resident memory after the C allocator gave back what it keeps of freed blocks (bytes still in use)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return _rss()


class _Peak:
    """The largest growth of this process's resident memory while it runs (sampled every 5 ms)."""

    def __init__(self) -> None:
        self.before = _rss()
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss() - self.before)
            time.sleep(0.005)

    def stop(self) -> int:
        self._stop.set()
        self._t.join(5)
        return self.peak


def _raw_peer(address: str, mib: int, mode: str, key: bool) -> subprocess.Popen:
    e = env()
    if not key:
        del e["RLPIPE_KEY"]
    return subprocess.Popen([sys.executable, os.path.join(HERE, "zmtp_raw_peer.py"), address, str(mib), mode],
                            stdout=subprocess.PIPE, text=True, env=e, cwd=ROOT)


def _sent(p: subprocess.Popen) -> tuple:
    """(MiB the peer sent, whether the node closed its connection before it sent everything)."""
    words = p.stdout.readline().split()
    assert words and words[0] == "queued", words
    return int(words[1]), len(words) > 2 and words[2] == "closed"


@pytest.mark.parametrize("bus_auth", ["plain", "curve"])
def test_a_frame_declared_before_the_handshake_is_refused_at_its_header(bus_auth):
    """Item 1: four clients without key or password greet (PLAIN or CURVE) and declare a 256 MiB frame,
    then send 200 MiB of it. The node reads none of it (any frame over WIRE_MAX closes the connection at
    its header), counts the four refusals, and still talks with a keyed node (a 3 MiB message, chunked)."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, bus_auth=bus_auth)
    node.start(lambda *m: got.append(m))
    peers = []
    try:
        peak = _Peak()
        peers = [_raw_peer(node.address, 200, f"declare-{bus_auth}", key=False) for _ in range(4)]
        sent = [_sent(p)[0] for p in peers]
        assert wait_until(lambda: node.stats["refused_connections"] >= 4, 10), node.stats
        time.sleep(0.5)
        grown = peak.stop()
        assert grown < 24 * MIB, f"the node grew by {grown / MIB:.0f} MiB (the peers sent {sent} MiB)"
        assert max(sent) < 32, f"the node kept reading declared frames: the peers sent {sent} MiB"
        assert node.stats["received"] == node.stats["auth_failed"] == 0
        keyed = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[node.address], heartbeat_interval=0.1,
                          bus_auth=bus_auth)
        keyed.start(lambda *m: None)
        try:
            payload = os.urandom(3 * MIB)
            keyed.emit("big", (payload,), {}, to=0)
            assert wait_until(lambda: any(m[0] == "big" for m in got), 20)
            assert [m[1] for m in got if m[0] == "big"] == [(payload,)]
        finally:
            keyed.stop()
    finally:
        for p in peers:
            p.kill()
            p.wait(10)
        node.stop()


def test_connections_in_their_handshake_are_bounded_in_time_and_number():
    """Item 1: connections that greet and then stall (no credential) are closed after handshake_timeout;
    beyond MAX_PENDING of them at once, the newest are closed at once; each is counted once."""
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, handshake_timeout=1.0)
    node.start(lambda *m: None)
    host, port = node.address[len("tcp://"):].rsplit(":", 1)
    n = MAX_PENDING + 16
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection((host, int(port)), timeout=5)
            s.sendall(b"\xff" + b"\0" * 8 + b"\x7f\x03\x00" + b"PLAIN".ljust(20, b"\0") + b"\0" * 32)
            socks.append(s)

        def closed(s):
            s.settimeout(0.05)
            try:
                while True:
                    data = s.recv(4096)
                    if not data:
                        return True
            except socket.timeout:
                return False
            except OSError:
                return True

        assert wait_until(lambda: sum(map(closed, socks[MAX_PENDING:])) == n - MAX_PENDING, 1.0), \
            "connections beyond MAX_PENDING were not closed at once"
        assert wait_until(lambda: all(map(closed, socks)), 10), "stalled handshakes were not closed"
        assert wait_until(lambda: node.stats["refused_connections"] == n, 10), node.stats
        time.sleep(0.5)
        assert node.stats["refused_connections"] == n  # each once
    finally:
        for s in socks:
            s.close()
        node.stop()


@pytest.mark.parametrize("mode, mib", [("keyed-0", 1000), ("keyed-200", 1200), ("keyed-frame", 6)],
                         ids=["a multipart message that never ends", "6 multipart messages of 200 MiB",
                              "6 frames of 200 MiB"])
def test_a_password_holder_cannot_make_a_node_hold_more_than_max_peer_bytes(mode, mib):
    """Item 2 (a, c): a peer that knows the (sniffable) PLAIN password but not the key passes the handshake,
    then sends what ZeroMQ holds before any message check can run. A frame over WIRE_MAX closes its
    connection at its header; a multipart message is shut down once the connection holds more than
    max_peer_bytes (16 MiB here), counted in ``cut_connections``. The node's memory comes back."""
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, max_peer_bytes=16 * MIB)
    node.start(lambda *m: None)
    peer = None
    try:
        peak = _Peak()
        peer = _raw_peer(node.address, mib, mode, key=True)
        sent, closed = _sent(peer)
        assert closed, f"the node never closed the connection: the peer sent all {sent} MiB"
        if mode != "keyed-frame":
            assert wait_until(lambda: node.stats["cut_connections"] == 1, 10), node.stats
        time.sleep(1.0)
        grown = peak.stop()
        held = _rss_live() - peak.before
        # 16 MiB plus what arrives between two looks of the guard (every 20 ms) on a loaded machine
        assert sent < 320, f"the peer sent {sent} MiB before its connection was closed"
        assert grown < 320 * MIB, f"the node grew by {grown / MIB:.0f} MiB"
        assert held < 48 * MIB, f"the node still holds {held / MIB:.0f} MiB after the connection was closed"
        assert node.stats["received"] == 0
    finally:
        if peer is not None:
            peer.kill()
            peer.wait(10)
        node.stop()


@pytest.mark.parametrize("bus_auth", ["plain", "curve"])
def test_genuine_traffic_stays_under_max_peer_bytes_and_is_never_cut(bus_auth):
    """The bound costs genuine peers nothing: with the smallest max_peer_bytes (8 x WIRE_MAX) and a listener
    too slow for the sender, 12 messages of 5 MiB (chunked) and 3000 small ones all arrive; what ZeroMQ
    holds per connection, as the guard counts it, never exceeds the bound and comes back to (nearly) zero
    (the per-frame wire sizes it adds up are exact, also under CURVE)."""
    got = []
    slow = threading.Event()

    def on_message(e, a, k):
        if e == "big" and not slow.is_set():
            time.sleep(0.2)  # the reader falls behind: the receive queue fills up to its high-water mark
        got.append(e)

    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, max_peer_bytes=8 * WIRE_MAX,
                     bus_auth=bus_auth)
    node.start(on_message)
    sender = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[node.address], heartbeat_interval=0.1,
                       bus_auth=bus_auth)
    sender.start(lambda *m: None)
    worst = [0]
    watching = threading.Event()

    def watch():
        while not watching.is_set():
            worst[0] = max([worst[0], *node._guard.held().values()])
            time.sleep(0.005)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        assert wait_until(lambda: node.peers == [1])
        payload = os.urandom(5 * MIB)
        for i in range(12):
            sender.emit("big", (payload, i), {}, to=0)
        assert wait_until(lambda: got.count("big") == 12, 60), (got.count("big"), node.stats)
        slow.set()
        for i in range(3000):
            sender.emit("small", (i, "x" * (i % 700)), {}, to=0)
        assert wait_until(lambda: got.count("small") == 3000, 60), (got.count("small"), node.stats)
        time.sleep(0.3)
        watching.set()
        t.join(5)
        assert node.stats["cut_connections"] == 0 and node.stats["unfinished"] == 0, node.stats
        assert 0 < worst[0] <= 8 * WIRE_MAX, f"a genuine connection held {worst[0]} bytes"
        now = node._guard.held()
        assert now and all(abs(v) < 64 << 10 for v in now.values()), now  # no drift in the accounting
    finally:
        watching.set()
        sender.stop()
        node.stop()


def test_chunks_are_authenticated_one_by_one():
    """A chunked message is kept only chunk by chunk after each chunk's MAC check: a tampered chunk is
    refused (and the genuine one after it still completes the message), a replayed chunk or head is
    refused, chunks of no message in progress are dropped; the message is delivered once, intact."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1)
    node.start(lambda e, a, k: got.append((e, a)))
    sender = ZmqRouter(9, key=KEY)  # only its framing is used (never started)
    sender.session = 12345
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    keyed_client(push, bytes.fromhex(KEY))
    push.setsockopt(zmq.LINGER, 0)
    push.connect(node.address)
    try:
        payload = os.urandom(2 * CHUNK + 5)
        meta, bufs = codec.encode_event("big", (payload,), {})
        msgs = sender._large_messages(sender._seal_large(meta, bufs), node.node_id, node.session, 1)
        assert len(msgs) == 1 + 1 + 3  # head, the meta, three chunks of the payload

        def send(m):
            push.send_multipart([bytes(x) for x in m])

        send(msgs[0])
        send(msgs[1])
        bad = list(msgs[2])
        bad[1] = bytes(bad[1][:-1]) + bytes([bad[1][-1] ^ 1])
        send(bad)            # one bit flipped: refused
        send(msgs[2])        # the genuine chunk
        send(msgs[2])        # replayed: refused
        send(msgs[3])
        send(msgs[4])        # the message is complete
        for m in msgs:       # the whole message again: the head is a replay, its chunks belong to nothing
            send(m)
        send(sender._frames(K_DATA, node.node_id, node.session, 2, codec.encode_event("after", (), {})[0],
                            (), b""))
        assert wait_until(lambda: [e for e, a in got if not e.startswith("__")] == ["big", "after"], 20), got
        # a message whose chunks stop coming is dropped when the sender's next one starts
        unfinished = sender._large_messages(sender._seal_large(meta, bufs), node.node_id, node.session, 3)
        send(unfinished[0])
        send(unfinished[1])
        # a head that declares more than max_message_size: none of its chunks is kept
        huge = _Large(os.urandom(16) + struct.pack("<2Q", len(meta), 600 * MIB), 1, [])
        send(sender._large_messages(huge, node.node_id, node.session, 4)[0])
        send(sender._frames(K_DATA, node.node_id, node.session, 5, codec.encode_event("last", (), {})[0],
                            (), b""))
        assert wait_until(lambda: [e for e, a in got if not e.startswith("__")] == ["big", "after", "last"], 20)
        time.sleep(0.3)
        assert [a for e, a in got if e == "big"] == [(payload,)]
        assert node.stats["auth_failed"] == 1
        assert node.stats["duplicates"] == 2  # the replayed chunk and the replayed head
        assert node.stats["malformed"] == 4  # the replayed message's chunks
        assert node.stats["unfinished"] == 1 and node.stats["oversize"] == 1, node.stats
        assert node._assembling == {}
    finally:
        push.close(0)
        ctx.term()
        node.stop()


@pytest.mark.parametrize("order", ["refusal first", "close first", "close alone, then a refusal"])
def test_a_refused_connection_is_counted_once_whichever_the_guard_sees_first(order, monkeypatch):
    """The monitor's refusal event and the guard's look at the descriptor race; a refusal and the close of
    its connection count once in either order, and a close that no refusal follows (within _PAIR_WAIT) stays
    a refusal of its own."""
    from pipeline.parallel import transport_guard

    ctx = zmq.Context()
    guard = transport_guard.TransportGuard(ctx, KEY.encode(), "plain", lambda *a: None)
    try:
        if order == "refusal first":
            guard._refused("127.0.0.1", "its handshake did not finish", False)
            guard._closed_unseen("127.0.0.1")
            expected = 1
        elif order == "close first":
            guard._closed_unseen("127.0.0.1")
            guard._refused("127.0.0.1", "its handshake did not finish", False)
            expected = 1
        else:
            monkeypatch.setattr(transport_guard, "_PAIR_WAIT", 0.05)
            guard._closed_unseen("127.0.0.1")      # e.g. it declared an oversized frame: no refusal event
            time.sleep(0.1)
            guard._refused("127.0.0.1", "its handshake did not finish", False)   # another connection's
            guard._closed_unseen("127.0.0.1")      # ... and that connection's close
            expected = 2
        assert guard.stats["refused_connections"] == expected
        guard._closed_unseen("127.0.0.1")          # one more connection closing alone counts
        assert guard.stats["refused_connections"] == expected + 1
    finally:
        guard._zap.close()
        ctx.term()
