"""A task node for the lifecycle tests: python lifecycle_node.py '<json>'. Prints one JSON line at the end.

Config: ``router`` (ZmqRouter kwargs), ``mode``:
  ``run``     task.run(max_step) with a short sleep per step (ended by a finish from elsewhere);
  ``finish``  waits for ``wait_peers`` peers, runs ``finish_after`` steps, then sets task.finish;
  ``leave``   waits for its peers, runs ``finish_after`` steps with task.run(max_step) and leaves the block;
  ``wait``    task.wait_for("never") without a timeout (released only by a finish or the peerless bound);
  ``finish_when_dead``  sets task.finish once node ``dead`` is declared dead, then stays up ``linger_after`` s.
``announce``: an event it sends once its ``wait_peers`` are connected; ``wait_event``: one it waits for first.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pipeline import task  # noqa: E402
from pipeline.parallel import configure  # noqa: E402


def main() -> None:
    cfg = json.loads(sys.argv[1])
    router = {"heartbeat_interval": 0.2, "heartbeat_timeout": 3.0, "startup_timeout": 30.0}
    router.update(cfg["router"])
    configure(**router)
    mode = cfg["mode"]
    steps = [0]
    out = {"mode": mode}
    t0 = time.monotonic()
    with task.start():
        me = task.router.node_id
        print(json.dumps({"node": me, "ready": True}), flush=True)
        want = set(cfg.get("wait_peers", []))
        end = time.monotonic() + 60
        while not want <= set(task.router.peers) and time.monotonic() < end:
            time.sleep(0.02)
        out["peers_at_start"] = task.router.peers
        if cfg.get("announce"):  # e.g. the middle node: its peers are all connected
            for _ in range(20):
                task.emit(cfg["announce"], only_remote=True)
                time.sleep(0.05)
        if cfg.get("wait_event"):
            out["got_event"] = task.wait_for(cfg["wait_event"], timeout=60) is not None

        def step(ctx):
            steps[0] += 1
            if mode == "finish" and steps[0] >= cfg.get("finish_after", 10):
                task.finish = True
            time.sleep(0.01)

        if mode in ("run", "finish", "leave"):
            task.use(step)
            max_step = cfg.get("finish_after", 10) if mode == "leave" else cfg.get("max_step", 6000)
            task.run(max_step=max_step)
        elif mode == "wait":
            out["wait_result"] = task.wait_for("never")
        elif mode == "finish_when_dead":
            dead = []
            task.on("__peer_dead__", lambda node, *a, **k: dead.append(node))
            while cfg["dead"] not in dead and time.monotonic() < end:
                time.sleep(0.02)
            out["saw_dead"] = cfg["dead"] in dead
            task.finish = True
            print(json.dumps({"node": me, "finish_sent": True}), flush=True)
            time.sleep(cfg.get("linger_after", 0.0))
        out.update(node=me, steps=steps[0], finished=task.finish, ran_for=time.monotonic() - t0,
                   stats=dict(task.router.stats))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
