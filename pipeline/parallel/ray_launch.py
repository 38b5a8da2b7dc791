"""Run a pipeline's nodes as Ray actors: ``rlpipe run --backend ray`` (or :func:`run_on_ray`).

Each node is one Ray actor (one process) that runs the unchanged entry script, exactly as a process
started by ``rlpipe run`` does: the same role gating, the same ``task`` API. Ray places the actors
(resources per role), starts them, reports their deaths and restarts them.

Transport between the nodes: the rlpipe ZeroMQ bus, with the addresses exchanged through Ray. Each
actor picks a free port on its host and reports ``tcp://HOST:PORT``; the driver hands every actor the
full address map before the entry script starts. Why not Ray actor calls or Ray queues: the bus
already gives the event semantics the pipeline relies on (every remote listener gets each event
exactly once, ``finish`` reaches every node, peer loss is reported, HMAC-checked frames, no pickle
from the wire), with the same code path as every other launcher, so a fix or a guarantee of the bus
holds under Ray too. Speed did not decide it: ``benchmarks/bench_ray.py`` measures, in one run, a
small-event round trip through the bus between two Ray actors next to a Ray actor-call round trip;
on this 2-core machine under heavy load (load average 16) they were of the same order (bus 317,
Ray call 436 round trips/s), and the pipeline's traffic is one-way streams of transitions and
weights, not round trips. Ray queues would add an actor hop per message.

Restarts: with ``max_restarts=N`` a node whose actor dies (or whose main raises) is started again,
at most N times, on the same Ray node and the same address, so its peers see a node that rejoined.
The restarted entry script finds ``RLPIPE_RESTARTS`` (the restart count) in its environment; resuming
from its own checkpoints is up to the script (the examples do not do it by themselves yet: a learner
restarted this way starts from fresh weights). The nodes of one launch share one run folder
(``RLPIPE_LAUNCH_ID``), written under the driver's current directory on a local Ray.
"""
from __future__ import annotations

import logging
import os
import socket
import sys
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from .keys import KEY_ENV, generate_key
from .launch import NODE_ENV, NodeSpec, plan_nodes

log = logging.getLogger("rlpipe.ray")

RESTARTS_ENV = "RLPIPE_RESTARTS"
ROLE_RESOURCES = ("learner", "collector", "evaluator")


def _require_ray() -> Any:
    from ..learner.ray_learners import require_ray

    return require_ray("rlpipe run --backend ray")


class NodeActor:
    """One pipeline node inside a Ray actor (used as ``ray.remote(NodeActor)``)."""

    def __init__(self, env: Mapping[str, str], loopback: bool) -> None:
        os.environ.update(env)
        self.loopback = loopback

    def bind_address(self) -> str:
        """A free tcp address on this actor's host for the node's router."""
        if self.loopback:
            host = "127.0.0.1"
        else:
            import ray

            host = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    def ray_node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def run(self, spec_json: str, main: str, package: str, main_args: Sequence[str], restarts: int,
            workdir: Optional[str] = None) -> Any:
        """Configure the router from the spec and call the entry script's main; returns what it returns."""
        from .launch import configure_from_env
        from .worker import load_main

        os.environ[NODE_ENV] = spec_json
        os.environ[RESTARTS_ENV] = str(restarts)
        package = os.path.abspath(package)
        if package not in sys.path:
            sys.path.insert(0, package)
        if workdir and os.path.isdir(workdir):
            os.chdir(workdir)
        spec = configure_from_env()
        if not logging.getLogger().handlers:
            logging.basicConfig(level=os.environ.get("RLPIPE_LOG_LEVEL", "INFO"),
                                format=f"[node {spec.node_id}] %(asctime)s %(levelname)s %(name)s: %(message)s")
        sys.argv = [main, *main_args]
        return load_main(main)()


def _role_of(spec: NodeSpec) -> str:
    for r in ROLE_RESOURCES:
        if r in spec.roles:
            return r
    return "other"


def run_on_ray(
    main: str,
    num_nodes: int,
    *,
    package: str = ".",
    main_args: Sequence[str] = (),
    roles: Optional[str] = None,
    labels: Optional[str] = None,
    topology: str = "mesh",
    address: Optional[str] = None,
    cpus: Optional[Mapping[str, float]] = None,
    gpus: Optional[Mapping[str, float]] = None,
    max_restarts: int = 0,
    stop_on_failure: bool = False,
    start_timeout: float = 120.0,
    env: Optional[Mapping[str, str]] = None,
    **router_options: Any,
) -> Dict[int, Any]:
    """Start ``num_nodes`` nodes of ``main`` (``"package.module.function"``) as Ray actors and wait.

    Args:
        address: a running Ray cluster (``"auto"`` or ``"HOST:PORT"``); None starts a local Ray.
        cpus, gpus: Ray resources per role, e.g. ``{"learner": 1, "collector": 1}`` (default 1 CPU,
            0 GPU; roles not named, and nodes without a role, get the ``"other"`` entry or the default).
        max_restarts: restarts per node after its actor died or its main raised.
        stop_on_failure: stop every node when one fails for good (default: the others go on).
        env: extra environment variables for every node.
        roles, labels, topology, router_options: as for ``rlpipe run`` (see ``plan_nodes``).

    Returns node id -> what the node's main returned (an exception object for a node that failed).
    """
    ray = _require_ray()
    if type(max_restarts) is not int or max_restarts < 0:
        raise ValueError(f"max_restarts must be an int >= 0, got {max_restarts!r}")
    specs = plan_nodes(num_nodes, topology=topology, protocol="tcp", ports="1", roles=roles, labels=labels,
                       **router_options)
    cpus = dict(cpus or {})
    gpus = dict(gpus or {})
    want = {s.node_id: (float(cpus.get(_role_of(s), cpus.get("other", 1.0))),
                        float(gpus.get(_role_of(s), gpus.get("other", 0.0)))) for s in specs}
    started_ray = False
    if not ray.is_initialized():
        package_abs = os.path.abspath(package)
        pp = os.pathsep.join(p for p in [package_abs, os.environ.get("PYTHONPATH", "")] if p)
        if address is None:
            need = sum(c for c, _ in want.values())
            ray.init(num_cpus=max(os.cpu_count() or 1, int(need + 0.999)), include_dashboard=False,
                     runtime_env={"env_vars": {"PYTHONPATH": pp}})
        else:  # a cluster: ship the package directory to every node (rlpipe itself must be installed there)
            ray.init(address=address, runtime_env={"working_dir": package_abs,
                                                   "excludes": [".git", "runs", "exp", "*.pth.tar"]})
        started_ray = True
    loopback = address is None
    total = ray.cluster_resources()
    need_cpu, need_gpu = sum(c for c, _ in want.values()), sum(g for _, g in want.values())
    if need_cpu > total.get("CPU", 0) + 1e-9 or need_gpu > total.get("GPU", 0) + 1e-9:
        raise ValueError(f"the nodes ask for {need_cpu:g} CPUs and {need_gpu:g} GPUs but the Ray cluster has "
                         f"{total.get('CPU', 0):g} and {total.get('GPU', 0):g}: lower the per-role resources")
    from ..experiment import LAUNCH_ID_ENV

    env = {**dict(env or {}), KEY_ENV: os.environ.get(KEY_ENV) or generate_key(),
           "RLPIPE_LOG_LEVEL": os.environ.get("RLPIPE_LOG_LEVEL", "INFO"),
           LAUNCH_ID_ENV: os.environ.get(LAUNCH_ID_ENV) or f"ray-{os.getpid()}-{time.time_ns()}"}
    if os.environ.get("RLPIPE_BUS_AUTH"):  # --bus-auth: the actors run on other machines, with their own env
        env["RLPIPE_BUS_AUTH"] = os.environ["RLPIPE_BUS_AUTH"]
    workdir = os.getcwd() if address is None else None  # outputs under the user's directory
    actor_cls = ray.remote(NodeActor)
    by_id = {s.node_id: s for s in specs}

    node_env = env

    def new_actor(node_id: int, ray_node: Optional[str] = None) -> Any:
        c, g = want[node_id]
        opts: Dict[str, Any] = dict(num_cpus=c, num_gpus=g)
        if ray_node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=ray_node, soft=False)
        return actor_cls.options(**opts).remote(node_env, loopback)

    actors = {i: new_actor(i) for i in by_id}
    results: Dict[int, Any] = {}
    try:
        addr_refs = {i: a.bind_address.remote() for i, a in actors.items()}
        ready, pending = ray.wait(list(addr_refs.values()), num_returns=len(addr_refs), timeout=start_timeout)
        if pending:
            raise TimeoutError(f"{len(pending)} of {len(addr_refs)} node actors did not start within "
                               f"{start_timeout:g} s: is the Ray cluster short of the resources asked for?")
        addrs = {i: ray.get(r) for i, r in addr_refs.items()}
        homes = {i: ray.get(a.ray_node_id.remote()) for i, a in actors.items()}
        for s in specs:
            s.address, s.peers = addrs[s.node_id], dict(addrs)
        restarts = {i: 0 for i in by_id}

        def start(i: int) -> Any:
            s = by_id[i]
            log.info("node %d (roles %s) on Ray node %s at %s%s", i, ",".join(s.roles) or "all", homes[i][:8],
                     s.address, f", restart {restarts[i]}" if restarts[i] else "")
            return actors[i].run.remote(s.to_json(), main, package, list(main_args), restarts[i], workdir)

        running = {start(i): i for i in by_id}
        while running:
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                i = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                    log.info("node %d finished", i)
                    continue
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                    died = isinstance(exc, ray.exceptions.RayActorError)
                    log.error("node %d %s: %s", i, "actor died" if died else "main raised",
                              str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__)
                    if restarts[i] < max_restarts:
                        restarts[i] += 1
                        ray.kill(actors[i])
                        actors[i] = new_actor(i, homes[i])
                        log.warning("restarting node %d (%d of %d)", i, restarts[i], max_restarts)
                        running[start(i)] = i
                        continue
                    results[i] = exc
                    if stop_on_failure:
                        log.error("stopping every node (stop_on_failure)")
                        for r in list(running):
                            results[running.pop(r)] = RuntimeError("stopped after another node failed")
        return results
    finally:
        for a in actors.values():
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass
        if started_ray:
            ray.shutdown()


__all__: List[str] = ["run_on_ray", "NodeActor", "RESTARTS_ENV"]
