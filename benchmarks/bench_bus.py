"""Message-bus throughput between two local processes (ZmqRouter over tcp and ipc).

Prints, for 1 KiB and 1 MiB payloads: ping-pong round trips/s, and one-way messages/s and MB/s for an
unpaced burst (20,000 messages of 1 KiB, 1,000 of 1 MiB), with the number delivered. The baseline line is
a bare pyzmq PAIR ping-pong run in the same processes (no auth, no codec), so the ratio shows the cost of
rlpipe's layer on this machine. DI-engine's figure on a similar 2-core machine: ~3k round trips/s,
burst delivery 3-25 % (see /work/shared/anchors.md).

    python benchmarks/bench_bus.py [--protocol tcp|ipc] [--quick]
"""
from __future__ import annotations

import argparse
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def _addresses(protocol: str, tmp: str):
    if protocol == "ipc":
        return {0: f"ipc://{tmp}/n0.sock", 1: f"ipc://{tmp}/n1.sock"}
    import socket
    ports = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        ports.append(s.getsockname()[1])
        s.close()
    return {0: f"tcp://127.0.0.1:{ports[0]}", 1: f"tcp://127.0.0.1:{ports[1]}"}


def child(peers: dict, raw_address: str) -> None:
    """Node 1: echo 'ping' back as 'pong'; count 'burst' messages and report the count on 'burst_end'."""
    import zmq
    from pipeline.parallel import ZmqRouter
    count = [0, 0]
    router = ZmqRouter(1, peers[1], peers=peers, heartbeat_timeout=30.0, send_timeout=120.0)
    done = threading.Event()

    def on_message(event, args, kwargs):
        if event == "ping":
            router.emit("pong", args, {}, to=0)
        elif event == "burst":
            count[0] += 1
            count[1] += len(args[0])
        elif event == "burst_end":
            router.emit("burst_count", (count[0], count[1]), {}, to=0)
            count[0] = count[1] = 0
        elif event == "quit":
            done.set()

    # Bare pyzmq baseline: a PAIR echo.
    ctx = zmq.Context()
    pair = ctx.socket(zmq.PAIR)
    pair.connect(raw_address)
    while True:
        msg = pair.recv()
        if msg == b"end":
            break
        pair.send(msg)
    pair.close(0)
    ctx.term()
    router.start(on_message)
    done.wait(600)
    router.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=["tcp", "ipc"], default="tcp")
    ap.add_argument("--quick", action="store_true", help="fewer messages (smoke run)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import json
        cfg = json.loads(args.child)
        child({int(k): v for k, v in cfg["peers"].items()}, cfg["raw"])
        return

    import json
    import zmq
    os.environ.setdefault("RLPIPE_KEY", secrets.token_hex(32))
    tmp = tempfile.mkdtemp(prefix="rlpipe-bench-")
    peers = _addresses(args.protocol, tmp)
    raw = f"ipc://{tmp}/raw.sock" if args.protocol == "ipc" else peers[0].rsplit(":", 1)[0] + ":*"
    ctx = zmq.Context()
    pair = ctx.socket(zmq.PAIR)
    pair.bind(raw)
    raw = pair.getsockopt_string(zmq.LAST_ENDPOINT)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child",
                             json.dumps({"peers": peers, "raw": raw})], cwd=ROOT)
    n_pp = 2000 if args.quick else 20000
    burst = {1024: 2000 if args.quick else 20000, 1 << 20: 100 if args.quick else 1000}
    try:
        results = []
        for _ in range(200):  # warm up (and wait for the child to connect)
            pair.send(b"w")
            pair.recv()
        for size in (1024, 1 << 20):
            payload = b"x" * size
            n = max(50, n_pp // (1 if size == 1024 else 50))
            t = time.perf_counter()
            for _ in range(n):
                pair.send(payload)
                pair.recv()
            results.append((f"bare pyzmq PAIR ping-pong, {size // 1024} KiB", n / (time.perf_counter() - t)))
        pair.send(b"end")

        from pipeline.parallel import ZmqRouter
        pongs = threading.Semaphore(0)
        burst_reply: list = []
        got_reply = threading.Event()

        def on_message(event, a, kw):
            if event == "pong":
                pongs.release()
            elif event == "burst_count":
                burst_reply.append(a)
                got_reply.set()

        router = ZmqRouter(0, peers[0], peers=peers, heartbeat_timeout=30.0, send_timeout=120.0)
        router.start(on_message)
        print(f"# protocol {args.protocol}; 2 processes on this machine; {os.cpu_count()} CPUs")
        for name, rate in results:
            print(f"{name:45s} {rate:10.0f} round trips/s")
        for _ in range(200):  # warm up
            router.emit("ping", (b"w",), {}, to=1)
            pongs.acquire(timeout=30)
        for size in (1024, 1 << 20):
            payload = b"x" * size
            n = max(50, n_pp // (1 if size == 1024 else 50))
            t = time.perf_counter()
            for _ in range(n):
                router.emit("ping", (payload,), {}, to=1)
                if not pongs.acquire(timeout=30):
                    raise SystemExit("ping-pong stalled (30 s without reply)")
            rate = n / (time.perf_counter() - t)
            base = dict(results)[f"bare pyzmq PAIR ping-pong, {size // 1024} KiB"]
            vs_di = f"; {rate / 3000:.1f}x DI-engine's ~3k (1 KiB)" if size == 1024 else ""
            print(f"{'rlpipe ZmqRouter ping-pong, ' + str(size // 1024) + ' KiB':45s} {rate:10.0f} round trips/s"
                  f"   ({rate / base:.2f}x bare pyzmq{vs_di})")
        for size, n in burst.items():
            payload = b"x" * size
            got_reply.clear()
            burst_reply.clear()
            t = time.perf_counter()
            for _ in range(n):
                router.emit("burst", (payload,), {}, to=1)
            router.emit("burst_end", (), {}, to=1)
            if not got_reply.wait(300):
                raise SystemExit("burst count never came back")
            dt = time.perf_counter() - t
            count, nbytes = burst_reply[0]
            print(f"{'one-way burst, ' + str(size // 1024) + ' KiB x ' + str(n):45s} {count / dt:10.0f} msg/s "
                  f"{nbytes / dt / 1e6:8.1f} MB/s   delivered {count}/{n} ({100 * count / n:.1f} %)")
        router.emit("quit", (), {}, to=1)
        router.stop()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
        pair.close(0)
        ctx.term()


if __name__ == "__main__":
    main()
