"""One node of the task integration test: python parallel_task_node.py <role a|b> '<group json>'."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from pipeline import task  # noqa: E402
from pipeline.parallel import configure  # noqa: E402


def node_a() -> dict:
    local_data = []
    with task.start():
        assert task.router.is_active
        task.on("data", lambda *a, **k: local_data.append(a))
        got = task.wait_for("ready", timeout=20)
        assert got is not None, "node b never said ready"
        task.emit("data", 42, tag="once", only_remote=True)
        assert task.wait_for("running", timeout=20) is not None, "node b never ran"
        t = time.monotonic()
        task.finish = True
    return {"local_data": local_data, "finish_sent_at": t}


def node_b() -> dict:
    first, second = [], []
    steps = [0]
    with task.start():
        task.on("data", lambda *a, **k: first.append([list(a), k]))
        task.on("data", lambda *a, **k: second.append([list(a), k]))
        end = time.monotonic() + 20
        while not first and time.monotonic() < end:
            task.emit("ready", only_remote=True)  # a may register its listener after our first emission
            time.sleep(0.05)
        time.sleep(0.5)  # a duplicate would arrive meanwhile

        def step(ctx):
            steps[0] += 1
            task.emit("running", only_remote=True)
            time.sleep(0.01)

        task.use(step)
        t0 = time.monotonic()
        task.run(max_step=3000)  # ~30 s unless a's finish stops it
        ran_for = time.monotonic() - t0
        finished = task.finish
    return {"first": first, "second": second, "steps": steps[0], "finished": finished, "ran_for": ran_for}


if __name__ == "__main__":
    role, group = sys.argv[1], {int(k): v for k, v in json.loads(sys.argv[2]).items()}
    me = 0 if role == "a" else 1
    configure(node_id=me, address=group[me], peers=group, heartbeat_interval=0.2, heartbeat_timeout=3.0)
    out = node_a() if role == "a" else node_b()
    print(json.dumps(out), flush=True)
