"""Helpers for the multi-process tests: free ports, starting test nodes, collecting their output."""
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
KEY = secrets.token_hex(32)


def free_ports(n: int) -> List[int]:
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def tcp_group(n: int) -> Dict[int, str]:
    return {i: f"tcp://127.0.0.1:{p}" for i, p in enumerate(free_ports(n))}


def env(key: str = KEY) -> dict:
    e = dict(os.environ)
    e["RLPIPE_KEY"] = key
    e["PYTHONPATH"] = ROOT + os.pathsep + e.get("PYTHONPATH", "")
    return e


def start_node(cfg: dict, key: str = KEY) -> subprocess.Popen:
    router = {"heartbeat_interval": 0.2, "heartbeat_timeout": 2.0, "startup_timeout": 15.0}
    router.update(cfg["router"])
    cfg = dict(cfg, router=router)
    return subprocess.Popen([sys.executable, os.path.join(HERE, "parallel_node.py"), json.dumps(cfg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(key), cwd=ROOT)


def finish(procs, timeout: float = 60.0) -> List[dict]:
    """Wait for the nodes; return the last JSON line of each; kill everything on timeout."""
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            lines = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
            assert p.returncode == 0 and lines, f"node failed (rc {p.returncode}):\n{out}\n{err}"
            outs.append(lines[-1] | {"stderr": err})
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(5)
    return outs


def events(out: dict, name: str) -> List[list]:
    return [args for e, args, kw in out["received"] if e == name]


def wait_until(pred: Callable[[], bool], timeout: float = 10.0, step: float = 0.005) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` s pass; return its last value (bounded, never hangs)."""
    end = time.monotonic() + timeout
    while not pred() and time.monotonic() < end:
        time.sleep(step)
    return pred()
