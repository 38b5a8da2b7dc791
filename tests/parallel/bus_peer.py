"""A bus peer for the fault tests: python bus_peer.py '<json>'.

It sends "tick" events numbered 0, 1, ... to node ``to`` every ``interval`` s and records the numbers
that were sent (not counted undeliverable) and the ticks it receives, until it receives "stop"; then it
prints one JSON line: received ticks, sent ticks, the bus events it saw (__peer_dead__, __peer_joined__),
the stats and its alive peers. ``slow_import``: [module, seconds] makes the first import of that module
sleep that long (a slow first ``import torch`` on a loaded machine).
"""
import importlib.abc
import json
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pipeline.parallel import ZmqRouter  # noqa: E402


class _SlowImport(importlib.abc.MetaPathFinder):
    def __init__(self, module: str, seconds: float) -> None:
        self.module, self.seconds = module, seconds

    def find_spec(self, name, path=None, target=None):
        if name == self.module and self.seconds:
            seconds, self.seconds = self.seconds, 0
            time.sleep(seconds)
        return None  # the normal import goes on


def main() -> None:
    cfg = json.loads(sys.argv[1])
    if cfg.get("slow_import"):
        sys.meta_path.insert(0, _SlowImport(*cfg["slow_import"]))
    router = ZmqRouter(**cfg["router"])
    stop = threading.Event()
    received, bus_events, other = [], [], []

    def on_message(event, args, kwargs):
        if event == "tick":
            received.append(args[0])
        elif event == "stop":
            stop.set()
        elif event.startswith("__"):
            bus_events.append([event, args[0] if args else None])
        else:
            other.append([event, [type(a).__name__ for a in args]])

    router.start(on_message)
    sent, i = [], 0
    while not stop.is_set():
        before = router.stats["undeliverable"]
        router.emit("tick", (i,), {}, to=cfg["to"])
        if router.stats["undeliverable"] == before:
            sent.append(i)
        i += 1
        stop.wait(cfg.get("interval", 0.005))
    time.sleep(0.3)
    print(json.dumps({"received": received, "sent": sent, "events": bus_events, "other": other,
                      "stats": router.stats, "peers": router.peers}), flush=True)
    router.stop()


if __name__ == "__main__":
    main()
