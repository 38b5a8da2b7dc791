"""A main for launcher tests: every node starts the task with the launcher's router, exchanges events and
writes what it saw to $RLPIPE_TEST_OUT/node-<id>.json."""
import json
import os
import sys
import time

from pipeline import task
from pipeline.parallel.launch import NODE_ENV


def main() -> None:
    spec = json.loads(os.environ[NODE_ENV])
    out_dir = os.environ["RLPIPE_TEST_OUT"]
    seen = []
    fail_marker = os.environ.get("RLPIPE_TEST_FAIL_ONCE")
    if fail_marker and spec["node_id"] == 1 and not os.path.exists(fail_marker):
        open(fail_marker, "w").close()
        raise RuntimeError("simulated crash")  # crash once; the launcher restarts us
    with task.start():
        me = task.router.node_id
        n_peers = int(os.environ.get("RLPIPE_TEST_PEERS", len(spec["peers"]) - 1))
        task.on("hello", lambda sender: seen.append(sender))
        # Peers may register their listener after our first emission, so say hello until we heard everyone,
        # and a bit longer so that everyone hears us.
        end = time.monotonic() + 15
        while len(set(seen)) < n_peers and time.monotonic() < end:
            task.emit("hello", me, only_remote=True)
            time.sleep(0.05)
        for _ in range(8):
            task.emit("hello", me, only_remote=True)
            time.sleep(0.05)
        result = {"node": me, "seen": sorted(set(seen)), "roles": sorted(task.router.roles), "argv": sys.argv[1:],
                  "active": task.router.is_active, "pid": os.getpid(),
                  "cwd": os.getcwd(), "launch_id": os.environ.get("RLPIPE_LAUNCH_ID")}
        with open(os.path.join(out_dir, f"node-{me}.json"), "w") as f:
            json.dump(result, f)
        if os.environ.get("RLPIPE_TEST_HANG"):
            open(os.path.join(out_dir, f"hanging-{me}"), "w").close()
            time.sleep(120)
        task.wait_for("never", timeout=0.5)
