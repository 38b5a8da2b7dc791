"""Connection-level authentication (issue 11, defect 4): a peer without the key cannot make a node buffer an
unfinished multipart message (ZeroMQ holds one until its last frame, before any per-message check could
run); the attempt is counted and logged; a keyed peer still talks. Real sockets, a raw peer in its own
process."""
import os
import re
import subprocess
import sys
import time

import pytest

from pipeline.parallel.zmq_router import ZmqRouter
from parallel_helpers import HERE, KEY, ROOT, env, wait_until

MIB = 1 << 20


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _raw_peer(address: str, n: int, mode: str) -> subprocess.Popen:
    e = env()
    del e["RLPIPE_KEY"]
    return subprocess.Popen([sys.executable, os.path.join(HERE, "zmtp_raw_peer.py"), address, str(n), mode],
                            stdout=subprocess.PIPE, text=True, env=e, cwd=ROOT)


@pytest.mark.multiprocess
@pytest.mark.parametrize("bus_auth", ["plain", "curve"])
def test_a_peer_without_the_key_gets_no_unfinished_message_buffered(bus_auth, caplog):
    got = []
    node = ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, heartbeat_interval=0.1, bus_auth=bus_auth)
    node.start(lambda *m: got.append(m))
    peers = []
    try:
        with caplog.at_level("WARNING", logger="rlpipe.parallel"):
            before = _rss()
            peers = [_raw_peer(node.address, 96, mode) for mode in ("null", "plain")]
            for p in peers:
                assert p.stdout.readline().startswith("queued")
            time.sleep(2.0)  # the peers have written what the node's kernel accepted: it arrived, or was refused
            grown = _rss() - before
            assert grown < 48 * MIB, f"the node buffered {grown / MIB:.0f} MiB from peers without the key"
            assert wait_until(lambda: node.stats["refused_connections"] >= 2, 10), node.stats
        assert node.stats["received"] == node.stats["auth_failed"] == 0
        # libzmq's handshake-failure event names no connection: a refused peer whose socket closed before it
        # was looked up is logged as "an unknown address" (seen under CURVE on a loaded machine)
        assert re.search(r"refused a connection from (127\.0\.0\.1|an unknown address) before reading anything",
                         caplog.text), caplog.text
        if bus_auth == "plain":  # the PLAIN peer's credential was checked (under CURVE: a mechanism mismatch)
            assert "peer at 127.0.0.1 signs with a different key" in caplog.text
        keyed = ZmqRouter(1, "tcp://127.0.0.1:*", key=KEY, attach_to=[node.address], heartbeat_interval=0.1,
                          bus_auth=bus_auth)
        keyed.start(lambda *m: None)
        try:
            keyed.emit("hello", (b"w" * MIB,), {}, to=0)
            assert wait_until(lambda: any(m[0] == "hello" for m in got), 10)
        finally:
            keyed.stop()
    finally:
        for p in peers:
            p.kill()
            p.wait(10)
        node.stop()


def test_an_unknown_bus_auth_is_a_clear_error():
    with pytest.raises(ValueError, match="plain, curve"):
        ZmqRouter(0, key=KEY, bus_auth="none")


def test_curve_is_the_default_for_a_node_whose_traffic_may_cross_a_network(monkeypatch):
    """Issue 28: ``plain`` sends its password and every message in clear, so it stays the default only where
    nothing leaves the machine (loopback, ipc); a node with any other address uses ``curve`` unless told."""
    monkeypatch.delenv("RLPIPE_BUS_AUTH", raising=False)
    assert ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY).bus_auth == "plain"
    assert ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, attach_to=["tcp://10.1.2.3:50515"]).bus_auth == "curve"
    assert ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, attach_to=["tcp://10.1.2.3:50515"],
                     bus_auth="plain").bus_auth == "plain"
    monkeypatch.setenv("RLPIPE_BUS_AUTH", "plain")
    assert ZmqRouter(0, "tcp://127.0.0.1:*", key=KEY, attach_to=["tcp://10.1.2.3:50515"]).bus_auth == "plain"
