"""Issue 28, items 1 and 2: what a connection can make a node hold is small and bounded; issue 45, items 3
and 4: so is what a holder of the key can make it keep of chunked messages.

Real sockets on loopback; hostile peers are raw ZMTP programs in their own processes (``zmtp_raw_peer.py``)
that do what pyzmq never does (declare a huge frame, send a multipart message that never ends), or key
holders that craft signed messages (``_KeyHolder``). The properties checked are bytes (the node's resident
memory, what the peer managed to send before the node closed its connection, the bytes its unfinished chunked
messages hold by its own count), counters and logs, not timings."""
import ctypes
import itertools
import os
import secrets
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
from pipeline.parallel.wire import _AESGCM, CHUNK, K_DATA, WIRE_MAX, _gcm_nonce, _Large
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


#: the counters of a connection the node ended or saw end (each connection is counted in one of them)
ENDED = ("closed_connections", "cut_connections", "refused_connections")


def _sent(p: subprocess.Popen) -> tuple:
    """(MiB the peer sent, whether the node closed its connection before it sent everything)."""
    words = p.stdout.readline().split()
    assert words and words[0] == "queued", words
    return int(words[1]), len(words) > 2 and words[2] == "closed"


class _KeyHolder:
    """A holder of the key that crafts signed messages and sends them to ``node`` over a keyed connection of
    its own. ``joined``: under the identity of a router that joined ``node`` (started, attached to it), with
    sequence numbers reserved from that router's own; else as an invented incarnation (a router never
    started, with a random session) that ``node`` never heard of."""

    def __init__(self, node: ZmqRouter, node_id: int, joined: bool = True) -> None:
        self.node = node
        if joined:
            self.router = ZmqRouter(node_id, "tcp://127.0.0.1:*", key=KEY, attach_to=[node.address],
                                    heartbeat_interval=0.1)
            self.router.start(lambda *m: None)
            assert wait_until(lambda: node_id in node.peers and node.node_id in self.router.peers, 20)
            p = self.router._peers[node.node_id]
            with p.lock:  # the router's own messages (heartbeats) take numbers after these
                self._seq = itertools.count(p.next_seq)
                p.next_seq += 1000  # well within the node's anti-replay window (no gaps counted)
        else:
            self.router = ZmqRouter(node_id, key=KEY)
            self.router.session = secrets.randbits(63) | 1
            self._seq = itertools.count(1)
        self.ctx = zmq.Context()
        self.push = keyed_client(self.ctx.socket(zmq.PUSH), bytes.fromhex(KEY))
        self.push.setsockopt(zmq.LINGER, 0)
        self.push.connect(node.address)

    def seq(self) -> int:
        return next(self._seq)

    def chunked(self, meta: bytes, bufs, seq: int) -> list:
        """The ZeroMQ messages (head, then chunks) of a genuine chunked message of ``meta`` and ``bufs``."""
        r = self.router
        return r._framer.large_messages(r._framer.seal_large(meta, bufs), self.node.node_id, self.node.session, seq)

    def declared(self, sizes, chunks, seq: int) -> list:
        """A head declaring parts of ``sizes`` bytes followed by the signed ``chunks`` given (any number)."""
        nonce = os.urandom(16)
        gmac = _AESGCM(self.router._framer.otk_mac(nonce)).encrypt
        large = _Large(nonce + struct.pack(f"<{len(sizes)}Q", *sizes), len(sizes) - 1,
                       [(d, gmac(_gcm_nonce(i), b"", d)) for i, d in enumerate(chunks)])
        return self.router._framer.large_messages(large, self.node.node_id, self.node.session, seq)

    def send(self, *messages) -> None:
        for m in messages:
            self.push.send_multipart([bytes(x) for x in m])

    def event(self, name: str) -> None:
        """A small data message (delivered in order after everything sent before it on this connection)."""
        self.send(self.router._framer.frames(K_DATA, self.node.node_id, self.node.session, self.seq(),
                                      codec.encode_event(name, (), {})[0], (), b""))

    def close(self) -> None:
        self.push.close(0)
        self.ctx.term()
        if self.router._node.started:
            self.router.stop()


@pytest.mark.multiprocess
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


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode, mib", [("keyed-0", 1000), ("keyed-200", 1200), ("keyed-frame", 6)],
                         ids=["a multipart message that never ends", "6 multipart messages of 200 MiB",
                              "6 frames of 200 MiB"])
def test_a_password_holder_cannot_make_a_node_hold_more_than_max_peer_bytes(mode, mib):
    """Item 2 (a, c): a peer that knows the (sniffable) PLAIN password but not the key passes the handshake,
    then sends what ZeroMQ holds before any message check can run. A frame over WIRE_MAX closes its
    connection at its header: counted once, in ``closed_connections`` (or, when the frame comes before the guard
    tied the handshake to the connection, in ``refused_connections``; when its bytes pile up before ZeroMQ's
    close is seen, in ``cut_connections``). A multipart message is shut down once the connection holds more
    than max_peer_bytes (16 MiB here), counted in ``cut_connections``. The node's memory comes back."""
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
        else:  # closed by ZeroMQ at the frame's header: counted once too (issue 45, item 4), as said above
            assert wait_until(lambda: sum(node.stats[k] for k in ENDED) == 1, 10), node.stats
        time.sleep(1.0)
        grown = peak.stop()
        held = _rss_live() - peak.before
        # 16 MiB plus what arrives between two looks of the guard (every 20 ms) on a loaded machine
        assert sent < 320, f"the peer sent {sent} MiB before its connection was closed"
        assert grown < 320 * MIB, f"the node grew by {grown / MIB:.0f} MiB"
        assert held < 48 * MIB, f"the node still holds {held / MIB:.0f} MiB after the connection was closed"
        assert node.stats["received"] == 0
        assert sum(node.stats[k] for k in ENDED) == 1, node.stats  # counted once: never in two counters
        if mode != "keyed-frame":
            assert node.stats["closed_connections"] == 0, node.stats
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
    holder = None
    try:
        holder = _KeyHolder(node, 9)
        send = holder.send
        payload = os.urandom(2 * CHUNK + 5)
        meta, bufs = codec.encode_event("big", (payload,), {})
        msgs = holder.chunked(meta, bufs, holder.seq())
        assert len(msgs) == 1 + 1 + 3  # head, the meta, three chunks of the payload
        send(msgs[0])
        send(msgs[1])
        bad = list(msgs[2])
        bad[1] = bytes(bad[1][:-1]) + bytes([bad[1][-1] ^ 1])
        send(bad)            # one bit flipped: refused
        send(msgs[2])        # the genuine chunk
        send(msgs[2])        # replayed: refused
        send(msgs[3])
        send(msgs[4])        # the message is complete
        send(*msgs)          # the whole message again: the head is a replay, its chunks belong to nothing
        holder.event("after")
        assert wait_until(lambda: [e for e, a in got if not e.startswith("__")] == ["big", "after"], 20), got
        # a message whose chunks stop coming is dropped when the sender's next one starts
        unfinished = holder.chunked(meta, bufs, holder.seq())
        send(unfinished[0], unfinished[1])
        # a head that declares more than max_message_size: none of its chunks is kept
        send(holder.declared([len(meta), 600 * MIB], [], holder.seq())[0])
        holder.event("last")
        assert wait_until(lambda: [e for e, a in got if not e.startswith("__")] == ["big", "after", "last"], 20)
        time.sleep(0.3)
        assert [a for e, a in got if e == "big"] == [(payload,)]
        assert node.stats["auth_failed"] == 1
        assert node.stats["duplicates"] == 2  # the replayed chunk and the replayed head
        assert node.stats["malformed"] == 4  # the replayed message's chunks
        assert node.stats["unfinished"] == 1 and node.stats["oversize"] == 1, node.stats
        assert node.assembly_bytes == 0 and len(node._assembling) == 0
    finally:
        if holder is not None:
            holder.close()
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


def _upto(holder: _KeyHolder, name: str, got: list, timeout: float = 20) -> bool:
    """Send event ``name`` after what ``holder`` sent so far and wait (bounded) until the node delivered it:
    everything before it on that connection was handled by then."""
    holder.event(name)
    return wait_until(lambda: name in [e for e, a in got], timeout)


def test_heads_of_incarnations_that_have_not_joined_are_dropped(caplog):
    """Issue 45, item 3: a key holder sends, for 4 invented sender incarnations, a head declaring a 200 MiB part
    and a 1 MiB chunk each (before: the node kept 4 x 200 MiB, forever). The heads are dropped, counted and
    logged; the chunks belong to no message; the node's unfinished chunked messages hold nothing."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1)
    node.start(lambda e, a, k: got.append((e, a)))
    holders = []
    try:
        with caplog.at_level("WARNING", logger="rlpipe.parallel"):
            holders = [_KeyHolder(node, 20 + i, joined=False) for i in range(4)]
            for h in holders:
                h.send(*h.declared([64, 200 * MIB], [b"m" * 64, os.urandom(MIB)], h.seq()))
            for i, h in enumerate(holders):
                assert _upto(h, f"mark{i}", got), (got, node.stats)
        assert node.stats["unjoined"] == 4, node.stats
        assert node.stats["malformed"] == 8, node.stats  # their chunks: of no message in progress
        assert node.assembly_bytes == 0 and len(node._assembling) == 0
        assert "has not joined" in caplog.text, caplog.text
    finally:
        for h in holders:
            h.close()
        node.stop()


def test_a_chunked_message_holds_what_arrived_and_all_of_them_are_bounded_together(caplog):
    """Issue 45, item 3: memory follows the chunks received, not the sizes a head declares (a head declaring
    a 200 MiB part and one chunk hold 1 MiB), and the unfinished chunked messages of a node hold at most
    ``max_assembly_bytes`` together: the message whose chunk would pass it is dropped, counted and logged;
    the other one completes, intact."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, max_frame_size=256 * MIB,
                     max_message_size=256 * MIB, max_assembly_bytes=256 * MIB + 3 * MIB)
    node.start(lambda e, a, k: got.append((e, a)))
    a = b = None
    try:
        with caplog.at_level("WARNING", logger="rlpipe.parallel"):
            a, b = _KeyHolder(node, 1), _KeyHolder(node, 2)
            a_msgs = a.declared([64, 200 * MIB], [b"m" * 64] + [os.urandom(MIB) for _ in range(5)], a.seq())
            a.send(*a_msgs[:3])  # the head, the meta, one chunk of the 200 MiB part
            assert _upto(a, "a1", got), (got, node.stats)
            assert node.assembly_bytes == 64 + MIB, node.assembly_bytes
            # b: a genuine message of 255 MiB (meta + payload); a: 4 MiB more of its declared 200 MiB
            payload = os.urandom(255 * MIB)
            meta, bufs = codec.encode_event("big", (payload,), {})
            big = b.chunked(meta, bufs, b.seq())
            b.send(*big[:-1])  # all but the last chunk
            assert _upto(b, "b1", got), (got, node.stats)
            assert node.assembly_bytes == 64 + MIB + len(meta) + 254 * MIB, node.assembly_bytes
            a.send(*a_msgs[3:])  # 4 MiB more of a's message: the bound is passed at the 4th
            assert _upto(a, "a2", got), (got, node.stats)
            assert node.stats["assembly_full"] == 1, node.stats
            assert node.assembly_bytes == len(meta) + 254 * MIB, node.assembly_bytes
            b.send(big[-1])  # b's message completes
            assert wait_until(lambda: any(e == "big" for e, _ in got), 20), node.stats
        assert [x for e, x in got if e == "big"] == [(payload,)]
        assert node.assembly_bytes == 0 and len(node._assembling) == 0
        assert "max_assembly_bytes" in caplog.text, caplog.text
    finally:
        for h in (a, b):
            if h is not None:
                h.close()
        node.stop()


def test_a_stalled_chunked_message_expires(caplog):
    """Issue 45, item 3: a chunked message whose chunks stop coming (its sender keeps quiet) is dropped after
    ``assembly_timeout`` s, counted and logged, its bytes freed; the sender's next message is delivered."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, assembly_timeout=0.5)
    node.start(lambda e, a, k: got.append((e, a)))
    holder = None
    try:
        with caplog.at_level("WARNING", logger="rlpipe.parallel"):
            holder = _KeyHolder(node, 1)
            stalled = holder.declared([64, 200 * MIB], [b"m" * 64, os.urandom(MIB), os.urandom(MIB)], holder.seq())
            holder.send(*stalled[:3])
            assert _upto(holder, "a1", got), (got, node.stats)
            assert wait_until(lambda: node.stats["stalled"] == 1, 20), node.stats
            assert node.assembly_bytes == 0 and len(node._assembling) == 0
            holder.send(stalled[3])  # a chunk after the expiry belongs to no message
            payload = os.urandom(3 * MIB)
            meta, bufs = codec.encode_event("big", (payload,), {})
            holder.send(*holder.chunked(meta, bufs, holder.seq()))
            assert wait_until(lambda: any(e == "big" for e, _ in got), 20), node.stats
        assert [x for e, x in got if e == "big"] == [(payload,)]
        assert node.stats["stalled"] == 1 and node.stats["malformed"] == 1, node.stats
        assert "assembly_timeout" in caplog.text, caplog.text
    finally:
        if holder is not None:
            holder.close()
        node.stop()


def test_the_meta_part_of_a_chunked_message_is_capped_at_max_frame_size():
    """Issue 45, item 4: a head declaring a meta part over ``max_frame_size`` (within ``max_message_size``) is
    dropped as oversize: none of its chunks is kept (before: a 500 MiB meta part from one chunk held 500 MB)."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1)
    node.start(lambda e, a, k: got.append((e, a)))
    holder = None
    try:
        holder = _KeyHolder(node, 1)
        holder.send(*holder.declared([500 * MIB], [os.urandom(MIB)], holder.seq()))
        assert _upto(holder, "a1", got), (got, node.stats)
        assert node.stats["oversize"] == 1 and node.stats["malformed"] == 1, node.stats
        assert node.assembly_bytes == 0 and len(node._assembling) == 0
    finally:
        if holder is not None:
            holder.close()
        node.stop()


def test_a_keyed_connection_closed_for_a_frame_over_the_wire_limit_is_counted_and_logged(caplog):
    """Issue 45, item 4: a connection past the handshake that sends a frame over WIRE_MAX is closed by ZeroMQ
    at its header (ZMQ_MAXMSGSIZE); that is counted (``closed_connections``) and logged, while a connection
    its peer closes is not; the node still talks with a keyed node."""
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1)
    node.start(lambda e, a, k: got.append((e, a)))
    ctx = zmq.Context()
    socks = []
    try:
        with caplog.at_level("WARNING", logger="rlpipe.parallel"):
            polite = keyed_client(ctx.socket(zmq.PUSH), bytes.fromhex(KEY))
            socks.append(polite)
            polite.connect(node.address)
            polite.send(os.urandom(100))  # fails the HMAC (read, counted); then its peer closes it
            assert wait_until(lambda: node.stats["auth_failed"] == 1, 20), node.stats
            polite.close(0)
            assert wait_until(lambda: not node._guard._conns, 20)  # the guard saw it close
            rude = keyed_client(ctx.socket(zmq.PUSH), bytes.fromhex(KEY))
            socks.append(rude)
            rude.connect(node.address)
            rude.send(os.urandom(100))  # past the handshake (read: fails the HMAC), and tied to it by the guard
            assert wait_until(lambda: node.stats["auth_failed"] == 2, 20), node.stats
            assert wait_until(lambda: any(c.authed_at or c.uid for c in list(node._guard._conns.values())), 20)
            rude.send(os.urandom(2 * WIRE_MAX), copy=False)
            assert wait_until(lambda: node.stats["closed_connections"] == 1, 20), node.stats
            # the guard's thread counts, then logs: wait for the line rather than read it at once
            assert wait_until(lambda: "passed the handshake" in caplog.text, 20), caplog.text
        holder = _KeyHolder(node, 1)
        socks.append(holder)
        holder.router.emit("hello", ("x",), {}, to=0)
        assert wait_until(lambda: ("hello", ("x",)) in got, 20), node.stats
        assert node.stats["closed_connections"] == 1 and node.stats["cut_connections"] == 0, node.stats
    finally:
        for s in socks:
            s.close(0) if not isinstance(s, _KeyHolder) else s.close()
        ctx.term()
        node.stop()
