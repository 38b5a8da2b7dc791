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
holds under Ray too. ``benchmarks/bench_ray.py`` measures, in one run, a small-event round trip through
the bus between two Ray actors next to a Ray actor-call round trip, and the 4-node DQN run under Ray next
to the ZeroMQ process launcher (figures: docs/benchmarks.md). The pipeline's traffic is one-way streams of
transitions and weights, not round trips. Ray queues would add an actor hop per message.

Restarts and failures: with ``max_restarts=N`` a node whose actor dies (or whose main raises) is started
again, at most N times, on the same Ray node and the same address, so its peers see a node that rejoined
(a new incarnation). The restarted entry script finds ``RLPIPE_RESTARTS`` (the restart count) in its
environment, and every node finds ``RLPIPE_MAX_RESTARTS``: while restarts are possible, collectors and
evaluators wait for a lost learner to come back instead of finishing the task. A restarted learner of a
training example resumes from its newest checkpoint in the launch's run folder, with its counters
(``pipeline.run.prepare_run``, ``pipeline.run.resume``). The nodes of one launch share one run folder
(``RLPIPE_LAUNCH_ID``), written under the driver's current directory on a local Ray.

A node that fails for good (no restart left) is reported (logged, and its slot in the results holds the
exception). When no other node holds one of its roles (the only learner, the only evaluator, a node
without roles), or with ``stop_on_failure``, the launcher ends the job: every remaining node is told to
finish (``task.finish``, relayed over the bus as usual, so a learner still writes ``final.pth.tar``) and
is killed after ``stop_grace`` s if it has not returned. A lost collector among several does not end it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Mapping, Optional, Sequence

from pipeline import task

from ..learner.ray_learners import require_ray
from ..runtime.node import LAUNCH_ID_ENV, MAX_RESTARTS_ENV, RAY_NODE_ENV, RESTARTS_ENV
from ..parallel.keys import KEY_ENV, generate_key
from ..parallel.launch import NODE_ENV, NodeSpec, configure_from_env, plan_nodes
from ..runtime.entry import load_main

log = logging.getLogger("rlpipe.ray")

ROLE_RESOURCES = ("learner", "collector", "evaluator")


def _require_ray() -> Any:

    return require_ray("rlpipe run --backend ray")


class JobControl:
    """A tiny Ray actor (async, no CPU) that every node waits on; the driver sets it to end the job."""

    def __init__(self) -> None:
        self._why: Optional[str] = None
        self._event: object = None

    def _ev(self) -> Any:

        if self._event is None:
            self._event = asyncio.Event()
        return self._event

    async def wait(self) -> str:
        await self._ev().wait()
        return self._why or "the launcher ends the job"

    async def end(self, why: str) -> None:
        self._why = why
        self._ev().set()


def _finish_when_told(control: Any, node_id: int) -> None:
    """Node side of :class:`JobControl` (a daemon thread): when the driver ends the job, finish this node's
    run (``task.finish``, which the bus relays to every peer)."""
    import ray  # optional extra: ray

    try:
        why = ray.get(control.wait.remote())
    except Exception:  # noqa: BLE001 - the driver or the control actor is gone: nothing to do
        return

    for _ in range(600):  # the node's task may not have started yet (then it is told when it has)
        if task.running:
            log.error("node %d: %s; finishing the run", node_id, why)
            task.finish = True
            return
        time.sleep(0.1)


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
            import ray  # optional extra: ray

            host = ray.util.get_node_ip_address()
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        return f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"

    def summary(self) -> List[str]:
        """The end-of-run lines the node's main printed with ``node_print`` (kept, not printed, in an actor)."""
        from .console import take_summary  # lazy: the run tooling is loaded by the node's main, not here

        return take_summary()

    def ray_node_id(self) -> str:
        import ray  # optional extra: ray

        return ray.get_runtime_context().get_node_id()

    def run(self, spec_json: str, main: str, package: str, main_args: Sequence[str], restarts: int,
            workdir: Optional[str] = None, control: object = None) -> object:
        """Configure the router from the spec and call the entry script's main; returns what it returns.
        ``control``: a :class:`JobControl` actor; when the driver ends the job through it, the node finishes."""
        os.environ[NODE_ENV] = spec_json
        os.environ[RESTARTS_ENV] = str(restarts)
        package = os.path.abspath(package)
        if package not in sys.path:
            sys.path.insert(0, package)
        if workdir and os.path.isdir(workdir):
            os.chdir(workdir)
        spec = configure_from_env()
        if spec is None:  # cannot happen: NODE_ENV was set just above
            raise RuntimeError(f"ray node: ${NODE_ENV} names no node")
        if not logging.getLogger().handlers:
            logging.basicConfig(level=os.environ.get("RLPIPE_LOG_LEVEL", "INFO"),
                                format=f"[node {spec.node_id}] %(asctime)s %(levelname)s %(name)s: %(message)s")
        if control is not None:
            threading.Thread(target=_finish_when_told, args=(control, spec.node_id), daemon=True,
                             name="rlpipe-job-control").start()
        sys.argv = [main, *main_args]
        return load_main(main)()


def _print_summary(ray: Any, actor: Any, node_id: int) -> None:
    """Print on this console the end-of-run lines (run folder, best policy, "watch it") of a finished node."""
    try:
        lines = ray.get(actor.summary.remote(), timeout=30)
    except Exception as e:  # noqa: BLE001 - the actor is gone: its lines are in Ray's worker log
        log.warning("node %d: its summary could not be fetched (%s)", node_id, type(e).__name__)
        return
    for line in lines:
        print(line, flush=True)


def _role_of(spec: NodeSpec) -> str:
    for r in ROLE_RESOURCES:
        if r in spec.roles:
            return r
    return "other"


def _orphaned_roles(i: int, specs: Mapping[int, NodeSpec], left: Sequence[int]) -> List[str]:
    """The roles of node ``i`` that none of the nodes ``left`` holds (a node without roles holds every role)."""
    others = [specs[j] for j in left if j != i]
    if any(not s.roles for s in others):
        return []
    if not specs[i].roles:
        return ["all (a node without roles)"]
    held = {r for s in others for r in s.roles}
    return [r for r in specs[i].roles if r not in held]


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
    stop_grace: float = 30.0,
    start_timeout: float = 120.0,
    env: Optional[Mapping[str, str]] = None,
    **router_options: Any,
) -> Dict[int, object]:
    """Start ``num_nodes`` nodes of ``main`` (``"package.module.function"``) as Ray actors and wait.

    Args:
        address: a running Ray cluster (``"auto"`` or ``"HOST:PORT"``); None starts a local Ray.
        cpus, gpus: Ray resources per role, e.g. ``{"learner": 1, "collector": 1}`` (default 1 CPU,
            0 GPU; roles not named, and nodes without a role, get the ``"other"`` entry or the default).
        max_restarts: restarts per node after its actor died or its main raised.
        stop_on_failure: end the job when any node fails for good (default: only when the failed node held a
            role no other node holds, e.g. the only learner).
        stop_grace: seconds the nodes get to return after the job was ended, before they are killed.
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
    env = {**dict(env or {}), KEY_ENV: os.environ.get(KEY_ENV) or generate_key(), RAY_NODE_ENV: "1",
           MAX_RESTARTS_ENV: str(max_restarts),
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
        opts: Dict[str, object] = dict(num_cpus=c, num_gpus=g)
        if ray_node is not None:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # optional extra: ray

            opts["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=ray_node, soft=False)
        return actor_cls.options(**opts).remote(node_env, loopback)

    actors = {i: new_actor(i) for i in by_id}
    control = ray.remote(num_cpus=0)(JobControl).remote()
    results: Dict[int, object] = {}
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

        def start(i: int) -> object:
            s = by_id[i]
            log.info("node %d (roles %s) on Ray node %s at %s%s", i, ",".join(s.roles) or "all", homes[i][:8],
                     s.address, f", restart {restarts[i]}" if restarts[i] else "")
            return actors[i].run.remote(s.to_json(), main, package, list(main_args), restarts[i], workdir, control)

        running = {start(i): i for i in by_id}
        ending_since: Optional[float] = None

        def end_job(why: str) -> None:
            nonlocal ending_since
            if ending_since is None and running:
                log.error("ending the job: %s", why)
                control.end.remote(why)
                ending_since = time.monotonic()

        while running:
            done, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in done:
                i = running.pop(ref)
                try:
                    results[i] = ray.get(ref)
                    log.info("node %d finished", i)
                    _print_summary(ray, actors[i], i)
                    continue
                except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as exc:
                    died = isinstance(exc, ray.exceptions.RayActorError)
                    log.error("node %d %s: %s", i, "actor died" if died else "main raised",
                              str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__)
                    if restarts[i] < max_restarts and ending_since is None:
                        restarts[i] += 1
                        ray.kill(actors[i])
                        actors[i] = new_actor(i, homes[i])
                        log.warning("restarting node %d (%d of %d)", i, restarts[i], max_restarts)
                        running[start(i)] = i
                        continue
                    results[i] = exc
                    orphaned = _orphaned_roles(i, by_id, list(running.values()))
                    if max_restarts:
                        log.error("node %d failed for good (%d restarts used)", i, restarts[i])
                    if stop_on_failure:
                        end_job(f"node {i} failed (stop_on_failure)")
                    elif orphaned:
                        end_job(f"node {i} failed and no other node has its role {', '.join(orphaned)}")
                    elif running:
                        log.warning("node %d is lost; the other nodes go on", i)
            if ending_since is not None and running and time.monotonic() - ending_since > stop_grace:
                for ref, i in list(running.items()):
                    log.error("node %d did not return within %g s after the job was ended; killing it", i,
                              stop_grace)
                    results[i] = RuntimeError(f"node {i} was killed: it did not stop within {stop_grace:g} s "
                                              f"after the job was ended")
                    ray.kill(actors[i])
                running.clear()
        return results
    finally:
        for a in [*actors.values(), control]:
            try:
                ray.kill(a)
            except Exception:  # already dead
                pass
        if started_ray:
            ray.shutdown()


__all__: List[str] = ["run_on_ray", "NodeActor", "JobControl", "RESTARTS_ENV", "MAX_RESTARTS_ENV"]
