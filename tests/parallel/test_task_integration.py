"""The task runtime over the ZeroMQ router in two processes: a remote event reaches each listener of the
other node exactly once, and task.finish on one node stops task.run on the other."""
import json
import os
import subprocess
import sys

import pytest

from parallel_helpers import ROOT, env, tcp_group

pytestmark = pytest.mark.multiprocess

HERE = os.path.dirname(os.path.abspath(__file__))


def test_remote_event_once_per_listener_and_finish_propagates():
    group = tcp_group(2)
    procs = {r: subprocess.Popen([sys.executable, os.path.join(HERE, "parallel_task_node.py"), r,
                                  json.dumps(group)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env(), cwd=ROOT) for r in ("a", "b")}
    outs = {}
    try:
        for r, p in procs.items():
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, f"node {r} failed:\n{out}\n{err}"
            outs[r] = json.loads(out.strip().splitlines()[-1])
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(5)
    a, b = outs["a"], outs["b"]
    assert b["first"] == [[[42], {"tag": "once"}]]   # exactly once for the first listener ...
    assert b["second"] == [[[42], {"tag": "once"}]]  # ... and exactly once for the second
    assert a["local_data"] == []                     # only_remote: not delivered locally
    assert b["finished"] and b["steps"] < 3000       # a's finish stopped b's run
    assert b["ran_for"] < 25
