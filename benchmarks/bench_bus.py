"""Message-bus throughput between two local processes (ZmqRouter over tcp and ipc).

Prints, for 1 KiB and 1 MiB payloads: ping-pong round trips/s, and one-way messages/s and MB/s for an
unpaced burst (20,000 messages of 1 KiB, 1,000 of 1 MiB), with the number delivered. The baseline is a bare
pyzmq PAIR ping-pong (no auth, no codec) served by the same two processes; its segments alternate with the
router's, so both see the same machine load. Two router rows: the caller waits for the reply with
``router.wait`` (it reads the reply itself; how ``task.wait_for`` waits), and "via receiver thread" (a
listener on the receiver thread releases a semaphore the caller waits on: one more thread switch per round
trip; how waits built on ``task.on`` behave). A second baseline, bare pyzmq PUSH/PULL, uses the router's
socket layout (one PUSH per direction, so two TCP connections per pair of nodes instead of PAIR's one) with
no auth and no codec either: the limit of that layout, which the router cannot beat. Per size the table
shows the best and the median segment rate, the median ratio to bare PAIR over adjacent segments (and, for
the router, to bare PUSH/PULL), and the CPU time per round trip of both processes together (the most
load-independent figure on a shared machine). DI-engine's figure on a similar
2-core machine: ~3k round trips/s, burst delivery 3-25 % (see /work/shared/anchors.md).

``--same-core`` pins both processes (and so all their threads) to CPU 0: no cross-core wake-ups, which are
expensive on a VM. That shows the ceiling of this machine for the same code, not a normal setting.

``--tensor``: the 1 MiB router rows carry a float32 torch tensor (how model weights travel: a snapshot at
``emit``, received into the frame's memory) instead of bytes; the bare rows send its bytes.

    python benchmarks/bench_bus.py [--protocol tcp|ipc] [--quick] [--segments N] [--same-core] [--bus-auth curve]
                                   [--tensor]
"""
from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
_CPU = struct.Struct("<d")


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


def child(peers: dict, raw_address: str, same_core: bool, pushpull: tuple) -> None:
    """Node 1: echo 'ping' back as 'pong'; count 'burst' messages and report the count on 'burst_end'.
    Its main thread echoes the bare PAIR baseline at the same time (b"cpu" answers this process's CPU time),
    another thread the bare PUSH/PULL baseline (``pushpull``: the addresses to bind and connect to)."""
    if same_core:
        os.sched_setaffinity(0, {0})
    import zmq
    from pipeline.parallel import ZmqRouter
    count = [0, 0]
    router = ZmqRouter(1, peers[1], peers=peers, heartbeat_timeout=30.0, send_timeout=120.0)

    def on_message(event, args, kwargs):
        if event == "ping":
            router.emit("pong", args, {}, to=0)
        elif event == "burst":
            count[0] += 1
            count[1] += len(args[0])
        elif event == "burst_end":
            router.emit("burst_count", (count[0], count[1]), {}, to=0)
            count[0] = count[1] = 0

    router.start(on_message)
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    pull.bind(pushpull[0])
    push.connect(pushpull[1])

    def echo_pushpull() -> None:
        while True:
            msg = pull.recv()
            if msg == b"end":
                break
            push.send(msg)

    echo = threading.Thread(target=echo_pushpull, daemon=True)
    echo.start()
    pair = ctx.socket(zmq.PAIR)
    pair.connect(raw_address)
    while True:
        msg = pair.recv()
        if msg == b"end":
            break
        pair.send(_CPU.pack(time.process_time()) if msg == b"cpu" else msg)
    echo.join(5)
    for sock in (pair, pull, push):
        sock.close(0)
    ctx.term()
    router.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=["tcp", "ipc"], default="tcp")
    ap.add_argument("--quick", action="store_true", help="fewer messages (smoke run)")
    ap.add_argument("--segments", type=int, default=5, help="alternating bare/router segments per size")
    ap.add_argument("--same-core", action="store_true",
                    help="pin both processes to CPU 0 (shows the machine's ceiling without cross-core wake-ups)")
    ap.add_argument("--bus-auth", choices=["plain", "curve"], default=None,
                    help="the router's connection authentication (default plain; see transport_auth)")
    ap.add_argument("--tensor", action="store_true",
                    help="the 1 MiB router rows carry a float32 torch tensor instead of bytes")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import json
        cfg = json.loads(args.child)
        child({int(k): v for k, v in cfg["peers"].items()}, cfg["raw"], cfg["same_core"], tuple(cfg["pushpull"]))
        return
    if args.same_core:
        os.sched_setaffinity(0, {0})
    if args.bus_auth:
        os.environ["RLPIPE_BUS_AUTH"] = args.bus_auth  # the child inherits it

    import json
    import zmq
    from pipeline.parallel import ZmqRouter
    os.environ.setdefault("RLPIPE_KEY", secrets.token_hex(32))
    tmp = tempfile.mkdtemp(prefix="rlpipe-bench-")
    peers = _addresses(args.protocol, tmp)
    raw = f"ipc://{tmp}/raw.sock" if args.protocol == "ipc" else peers[0].rsplit(":", 1)[0] + ":*"
    ctx = zmq.Context()
    pair = ctx.socket(zmq.PAIR)
    pair.bind(raw)
    raw = pair.getsockopt_string(zmq.LAST_ENDPOINT)
    # The PUSH/PULL baseline: this process binds a PULL, the child another; each PUSHes to the other's.
    pp_pull = ctx.socket(zmq.PULL)
    pp_pull.bind(f"ipc://{tmp}/pp0.sock" if args.protocol == "ipc" else raw.rsplit(":", 1)[0] + ":*")
    pp_here = pp_pull.getsockopt_string(zmq.LAST_ENDPOINT)
    pp_there = f"ipc://{tmp}/pp1.sock" if args.protocol == "ipc" else _addresses("tcp", tmp)[0]
    pp_push = ctx.socket(zmq.PUSH)
    pp_push.connect(pp_there)
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child",
                             json.dumps({"peers": peers, "raw": raw, "same_core": args.same_core,
                                         "pushpull": [pp_there, pp_here]})], cwd=ROOT)
    n_pp = 2000 if args.quick else 20000
    burst = {1024: 2000 if args.quick else 20000, 1 << 20: 100 if args.quick else 1000}
    pongs = threading.Semaphore(0)
    n_pongs = [0]
    burst_reply: list = []
    got_reply = threading.Event()

    def on_message(event, a, kw):
        if event == "pong":
            n_pongs[0] += 1
            if via_thread:
                pongs.release()
        elif event == "burst_count":
            burst_reply.append(a)
            got_reply.set()

    def child_cpu() -> float:
        pair.send(b"cpu")
        return _CPU.unpack(pair.recv())[0]

    def bare(payload: bytes, n: int) -> None:
        for _ in range(n):
            pair.send(payload)
            pair.recv()

    def bare_pushpull(payload: bytes, n: int) -> None:
        for _ in range(n):
            pp_push.send(payload)
            pp_pull.recv()

    via_thread = False

    def routed(payload: object, n: int) -> None:
        emit, wait = router.emit, router.wait
        for i in range(n_pongs[0] + 1, n_pongs[0] + n + 1):
            emit("ping", (payload,), {}, to=1)
            if not wait(lambda: n_pongs[0] >= i, 30):
                raise SystemExit("ping-pong stalled (30 s without reply)")

    def routed_via_thread(payload: object, n: int) -> None:
        nonlocal via_thread
        via_thread = True
        try:
            for _ in range(n):
                router.emit("ping", (payload,), {}, to=1)
                if not pongs.acquire(timeout=30):
                    raise SystemExit("ping-pong stalled (30 s without reply)")
        finally:
            via_thread = False

    def segment(fn, payload: object, n: int):
        c0, t0 = time.process_time() + child_cpu(), time.perf_counter()
        fn(payload, n)
        dt = time.perf_counter() - t0
        cpu = time.process_time() + child_cpu() - c0
        return n / dt, cpu / n * 1e6

    router = ZmqRouter(0, peers[0], peers=peers, heartbeat_timeout=30.0, send_timeout=120.0)
    try:
        router.start(on_message)
        bare(b"w", 300)  # warm up (and wait for the child to connect)
        bare_pushpull(b"w", 300)
        routed(b"w", 300)
        print(f"# protocol {args.protocol}; bus auth {router.bus_auth}; load average {os.getloadavg()[0]:.1f}; 2 processes on this machine; {os.cpu_count()} CPUs; "
              f"{args.segments} alternating segments per size"
              + ("; --same-core: BOTH PROCESSES PINNED TO CPU 0 (ceiling, not a normal setting)"
                 if args.same_core else ""))
        print(f"{'ping-pong':38s} {'best':>8s} {'median':>8s}  round trips/s   {'CPU us/rt':>9s}")
        for size in (1024, 1 << 20):
            payload = b"x" * size
            sent: object = payload  # what the router rows carry
            if args.tensor and size > 1024:
                import torch
                sent = torch.ones(size // 4)
            n = max(50, n_pp // (1 if size == 1024 else 50)) // args.segments
            rows: dict = {"bare": [], "pushpull": [], "router": [], "thread": []}
            for _ in range(args.segments):
                rows["bare"].append(segment(bare, payload, n))
                rows["pushpull"].append(segment(bare_pushpull, payload, n))
                rows["router"].append(segment(routed, sent, n))
                rows["thread"].append(segment(routed_via_thread, sent, n))
            for name, label in (("bare", "bare pyzmq PAIR"), ("pushpull", "bare pyzmq PUSH/PULL"),
                                ("router", "rlpipe ZmqRouter"), ("thread", "  via receiver thread")):
                rates = [r for r, _ in rows[name]]
                cpu = statistics.median(c for _, c in rows[name])
                extra = ""
                if name != "bare":
                    ratio = statistics.median(r[0] / b[0] for r, b in zip(rows[name], rows["bare"]))
                    extra = f"   {ratio:.2f}x bare pyzmq (median of pairs)"
                    if name != "pushpull":
                        ratio = statistics.median(r[0] / b[0] for r, b in zip(rows[name], rows["pushpull"]))
                        extra += f", {ratio:.2f}x PUSH/PULL"
                    if size == 1024 and name == "router":
                        extra += f"; {max(rates) / 3000:.1f}x (best) / {statistics.median(rates) / 3000:.1f}x " \
                                 "(median) DI-engine's ~3k"
                kind = " tensor" if sent is not payload and name in ("router", "thread") else ""
                print(f"{label + ', ' + str(size // 1024) + ' KiB' + kind:38s} {max(rates):8.0f} "
                      f"{statistics.median(rates):8.0f}                  {cpu:9.1f}{extra}")
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
            print(f"{'one-way burst, ' + str(size // 1024) + ' KiB x ' + str(n):34s} {count / dt:8.0f} msg/s "
                  f"{nbytes / dt / 1e6:8.1f} MB/s   delivered {count}/{n} ({100 * count / n:.1f} %)")
        pp_push.send(b"end")
        pair.send(b"end")
        router.stop()
        proc.wait(30)
    finally:
        router.stop()
        if proc.poll() is None:
            proc.kill()
        for sock in (pair, pp_pull, pp_push):
            sock.close(0)
        ctx.term()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
