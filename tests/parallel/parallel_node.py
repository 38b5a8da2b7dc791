"""A test node: python node_script.py '<json>'. Prints one JSON line with what it received.

Config keys: ``router`` (ZmqRouter kwargs), ``expect_from`` (ids whose broadcast "hello" we wait for),
``direct`` (id to send one "direct" event to), ``done_from`` (ids whose "done" we wait for before
stopping), ``burst`` ([to, n, size]: send n messages of size bytes), ``expect_burst`` (n to receive),
``sleep_before_start``, ``serve`` (seconds to just stay up, answering nothing).
"""
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pipeline.parallel import ZmqRouter  # noqa: E402

TIMEOUT = 15.0


def main() -> None:
    cfg = json.loads(sys.argv[1])
    time.sleep(cfg.get("sleep_before_start", 0))
    router = ZmqRouter(**cfg["router"])
    me = router.node_id
    lock = threading.Condition()
    received = []
    burst = [0, 0]

    def on_message(event, args, kwargs):
        with lock:
            if event == "burst":
                burst[0] += 1
                burst[1] += len(args[0])
            else:
                received.append([event, list(args), kwargs])
            lock.notify_all()

    def wait_until(pred, timeout=TIMEOUT):
        end = time.monotonic() + timeout
        with lock:
            while not pred() and time.monotonic() < end:
                lock.wait(0.05)
            return pred()

    router.start(on_message)
    print(json.dumps({"node": me, "ready": True, "peers": router.peers}), flush=True)
    if cfg.get("serve"):
        time.sleep(cfg["serve"])
    want = set(cfg.get("wait_peers", []))
    wait_until(lambda: want <= set(router.peers))
    dead = set(cfg.get("expect_dead", []))
    wait_until(lambda: dead <= {a[0] for e, a, k in received if e == "__peer_dead__"})
    router.emit("hello", (me,), {"k": "v"})
    if "direct" in cfg:
        router.emit("direct", (me,), {}, to=cfg["direct"])
    if "burst" in cfg:
        to, n, size = cfg["burst"]
        payload = os.urandom(size)
        for _ in range(n):
            router.emit("burst", (payload,), {}, to=to)
    expect = set(cfg.get("expect_from", []))
    wait_until(lambda: expect <= {a[0] for e, a, k in received if e == "hello"})
    if "expect_burst" in cfg:
        wait_until(lambda: burst[0] >= cfg["expect_burst"], 60)
    time.sleep(0.2)  # catch duplicates, if any
    router.emit("done", (me,), {})
    done_from = set(cfg.get("done_from", expect))
    wait_until(lambda: done_from <= {a[0] for e, a, k in received if e == "done"})
    time.sleep(cfg.get("linger_after", 0.0))
    router.stop()
    print(json.dumps({"node": me, "received": received, "burst": burst, "stats": router.stats,
                      "peers_at_end": sorted(router._peers)}), flush=True)


if __name__ == "__main__":
    main()
