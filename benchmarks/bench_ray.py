"""Ray scale-out, measured in one run on this machine:

1. Learner throughput (samples/s) of ``LearnerGroup.update`` on DQN CartPole batches: in-process
   (``num_learners=0``), 1 Ray learner and 2 Ray learners (gradients all-reduced over gloo). Each
   update is ``--rows`` rows, ``--epochs`` full-batch epochs; samples/s counts rows x epochs.
2. Transport between node actors: a small-event round trip through the rlpipe bus (two ZmqRouters in
   two Ray actors, what ``--backend ray`` uses) next to a Ray actor-call round trip (``ray.get`` of a
   method call), each over ``--pings`` round trips. This is the measurement behind the transport choice
   in ``pipeline/run/ray_launch.py``.
3. The DQN CartPole example as 4 nodes (1 learner, 2 collectors, 1 evaluator), exactly ``--env-steps``
   env steps: ``rlpipe run --backend ray`` next to the ZeroMQ process launcher (``bench_distributed``).

    python benchmarks/bench_ray.py [--env-steps 10000] [--skip-dqn]

Measured 2026-12-01 on this 2-core machine shared with other sessions (load average 9.7 at the start of
each run; two runs back to back, ``python benchmarks/bench_ray.py``, defaults; read ratios, not rates):

| figure | run 1 | run 2 |
|---|---|---|
| learner samples/s, in-process (``num_learners=0``) | 60,281 | 124,883 |
| learner samples/s, 1 Ray learner | 42,371 (0.70x) | 99,384 (0.80x) |
| learner samples/s, 2 Ray learners (gloo all-reduce) | 31,625 (0.52x) | 39,776 (0.32x) |
| round trips/s, Ray actor call | 629 | 998 |
| round trips/s, rlpipe bus between two Ray actors | 2,880 (4.6x) | 4,874 (4.9x) |
| DQN 4 nodes, ZeroMQ process launcher: env steps/s (iters/s) | 373 (88) | 413 (97) |
| DQN 4 nodes, ``--backend ray``: env steps/s (iters/s) | 422 (100) | 600 (142) |
| Ray / ZeroMQ env steps/s | 1.13x | 1.45x |

An earlier run at load 16 gave 21.7k / 15.2k / 10.2k samples/s for 0 / 1 / 2 learners and bus 317 vs
Ray call 436 round trips/s. Two learners on two shared cores are slower than one: each minibatch adds a
gradient all-reduce and the two actors compete for the same cores with everything else; data-parallel
learners pay off with a core (or GPU) per learner and larger networks. The two DQN launchers run the same
unchanged example with the same updates per env step (0.24); the Ray backend was faster in both
runs, by less than this machine's run-to-run spread (run 2's in-process learner was twice run 1's; the
ZeroMQ run always goes first): the Ray backend costs the pipeline nothing measurable once the nodes are
up. Starting the local Ray instance took about 10 s here.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, ROOT)


def dqn_learner(device=None):
    import torch

    torch.set_num_threads(1)
    from pipeline.config import compile_config
    from pipeline.policy.dqn import DQNPolicy

    cfg = compile_config({"policy": {"model": {"obs_shape": 4, "action_shape": 2}}})
    return DQNPolicy(cfg, seed=0, device=device).learn_mode


def dqn_batch(n: int, seed: int = 0) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    return {"obs": torch.randn(n, 4, generator=g), "action": torch.randint(0, 2, (n,), generator=g),
            "reward": torch.randn(n, generator=g), "next_obs": torch.randn(n, 4, generator=g),
            "terminated": torch.rand(n, generator=g) < 0.05}


def learner_throughput(rows: int, epochs: int, updates: int, device=None) -> None:
    import functools

    from pipeline.learner import LearnerGroup

    print(f"\n1. LearnerGroup.update, DQN batches of {rows} rows x {epochs} epochs, {updates} updates")
    batches = [dqn_batch(rows, s) for s in range(updates)]
    base = None
    for n in (0, 1, 2):
        gpus = 1 if n and device and device.startswith("cuda") else 0  # a GPU per Ray learner (NCCL: one rank each)
        group = LearnerGroup(functools.partial(dqn_learner, device if n == 0 else None), num_learners=n,
                             num_cpus_per_learner=1 if n < 2 else 0.5, num_gpus_per_learner=gpus)
        group.update(batch=batches[0], num_epochs=epochs)  # warm-up
        t0 = time.perf_counter()
        for b in batches:
            group.update(batch=b, num_epochs=epochs)
        dt = time.perf_counter() - t0
        group.shutdown()
        rate = rows * epochs * updates / dt
        base = base or rate
        label = "in-process" if n == 0 else f"{n} Ray learner{'s' if n > 1 else ''}"
        print(f"   {label:<16} {rate:>10.0f} samples/s   {rate / base:.2f}x in-process")


class _Echo:
    def ping(self, x):
        return x


class _BusNode:
    def __init__(self, node_id: int, peers: dict, key: str):
        os.environ["RLPIPE_KEY"] = key
        from pipeline.parallel import ZmqRouter

        self.router = ZmqRouter(node_id, peers[node_id], peers=peers, heartbeat_timeout=30.0)
        self.node_id = node_id
        self.got = None

    def start(self):
        import threading

        self.event = threading.Event()
        router, other = self.router, 1 - self.node_id

        def on_message(event, args, kwargs):
            if event == "ping":
                router.emit("pong", args, {}, to=other)
            elif event == "pong":
                self.event.set()

        router.start(on_message)
        return True

    def pingpong(self, n: int) -> float:
        t0 = time.perf_counter()
        for i in range(n):
            self.event.clear()
            self.router.emit("ping", (i,), {}, to=1 - self.node_id)
            if not self.event.wait(30):
                raise TimeoutError("no pong within 30 s")
        return time.perf_counter() - t0

    def stop(self):
        self.router.stop()
        return True


def transport(pings: int) -> None:
    import ray

    print(f"\n2. Round trip between two Ray actors, {pings} small messages")
    echo = ray.remote(num_cpus=0)(_Echo).remote()
    ray.get(echo.ping.remote(0))
    t0 = time.perf_counter()
    for i in range(pings):
        ray.get(echo.ping.remote(i))
    ray_rate = pings / (time.perf_counter() - t0)
    print(f"   Ray actor call        {ray_rate:>8.0f} round trips/s")
    try:
        bus_rate = _bus_rate(pings)
    except Exception as exc:  # the bus API is the router's; report instead of failing the whole benchmark
        print(f"   rlpipe bus            (not measured: {type(exc).__name__}: {exc})")
        return
    print(f"   rlpipe bus (ZmqRouter) {bus_rate:>7.0f} round trips/s   {bus_rate / ray_rate:.1f}x Ray actor calls")


def _bus_rate(pings: int) -> float:
    import socket

    import ray

    from pipeline.parallel.keys import generate_key

    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    peers = {0: f"tcp://127.0.0.1:{ports[0]}", 1: f"tcp://127.0.0.1:{ports[1]}"}
    key = generate_key()
    cls = ray.remote(num_cpus=0)(_BusNode)
    a, b = cls.remote(0, peers, key), cls.remote(1, peers, key)
    ray.get([a.start.remote(), b.start.remote()])
    ray.get(a.pingpong.remote(50))  # connect + warm up
    dt = ray.get(a.pingpong.remote(pings))
    ray.get([a.stop.remote(), b.stop.remote()])
    return pings / dt


def dqn_nodes(env_steps: int, timeout: float) -> None:
    import subprocess

    from benchmarks import bench_distributed as bd

    print(f"\n3. DQN CartPole example as 4 nodes, {env_steps} env steps each run")
    zmq = bd.distributed(env_steps, timeout)
    out = tempfile.mkdtemp(prefix="bench-ray-")
    cmd = [sys.executable, "-m", "pipeline.run.cli", "run", "--backend", "ray", "--package", HERE,
           "--main", "bench_distributed.timed_main", "--parallel-workers", "4", "--learner-cpus", "0.5",
           "--collector-cpus", "0.5", "--evaluator-cpus", "0.5", "--", *bd._example_args(env_steps, out + "/exp")]
    rayr = bd._run(cmd, out, timeout)
    for name, r in (("ZeroMQ processes", zmq), ("Ray actors", rayr)):
        print(f"   {name:<17} {r['env_step']:>7} env steps in {r['seconds']:6.1f} s = "
              f"{r['env_step'] / r['seconds']:7.0f} env steps/s, {r['train_iter'] / r['seconds']:6.0f} iters/s")
    ratio = (rayr["env_step"] / rayr["seconds"]) / (zmq["env_step"] / zmq["seconds"])
    print(f"   Ray / ZeroMQ env steps/s = {ratio:.2f}x")
    del subprocess


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--updates", type=int, default=30)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--env-steps", type=int, default=10_000)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--skip-dqn", action="store_true")
    from pipeline.run import add_device_flags, device_argv  # no torch

    add_device_flags(ap)
    args = ap.parse_args()
    from benchmarks import bench_distributed as bd

    bd.EXTRA_ARGV[:] = device_argv(args)
    import ray

    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
    ray.init(num_cpus=max(2, os.cpu_count() or 1), include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")])}})
    try:
        learner_throughput(args.rows, args.epochs, args.updates, args.device)
        transport(args.pings)
    finally:
        ray.shutdown()
    if not args.skip_dqn:
        dqn_nodes(args.env_steps, args.timeout)


if __name__ == "__main__":
    main()
