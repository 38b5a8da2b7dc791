"""Start rlpipe nodes as local processes and configure the router of each process.

``Launcher`` builds one ``NodeSpec`` per node (id, listen address, group, topology, roles, labels) and runs
``python -m pipeline.parallel.worker`` for each, passing the spec as JSON in ``RLPIPE_NODE`` and the shared
key in ``RLPIPE_KEY``. The worker installs a ``ZmqRouter`` factory (``configure``) and calls the user's
main. The launcher stops every node on Ctrl-C/SIGTERM (SIGTERM, then SIGKILL after a grace period),
restarts crashed nodes (main raised, or killed by a signal) with ``auto_recover``, and its children die
with it (``PR_SET_PDEATHSIG`` on Linux plus a parent-watch thread). As under the Ray launcher, a restarted
node finds ``RLPIPE_RESTARTS`` (1, 2, ...) in its environment, so a restarted learner of a training
example resumes the launch's run from its newest checkpoint (:mod:`pipeline.run.resume`), and with
``auto_recover`` every node finds ``RLPIPE_MAX_RESTARTS`` (collectors and evaluators wait for a lost
learner to come back instead of finishing).
"""
from __future__ import annotations

import json
import logging
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..runtime.node import LAUNCH_ID_ENV, MAX_RESTARTS_ENV, NODE_ENV, QUIET_NODE_ENV, RESTARTS_ENV  # light: no torch
from ..runtime.roles import Role
from ..runtime.router import set_default_router_factory
from .cluster import layout
from .keys import KEY_ENV, KEY_FILE_ENV, generate_key, resolve_key

log = logging.getLogger("rlpipe.launcher")

PARENT_ENV = "RLPIPE_PARENT_PID"
DEFAULT_PORT = 50515
CRASH_EXIT_CODE = 70  # a node whose main raised; with a signal death, what auto_recover restarts


def configure(**router_kwargs: Any) -> None:
    """Make ``task.start()`` in this process use ``ZmqRouter(**router_kwargs)`` (see its arguments).

    For a node started by hand, e.g. on another machine::

        from pipeline.parallel import configure
        configure(node_id=1, address="tcp://10.0.0.2:50516", attach_to=["tcp://10.0.0.1:50515"],
                  roles=["collector"])
    """
    from .zmq_router import ZmqRouter  # lazy: planning nodes needs no zmq

    def factory() -> ZmqRouter:
        return ZmqRouter(**router_kwargs)

    set_default_router_factory(factory)


@dataclass
class NodeSpec:
    """Everything one node needs to build its router; travels to the worker as JSON."""
    node_id: int
    address: str
    peers: Dict[int, str]
    topology: str = "mesh"
    attach_to: List[str] = field(default_factory=list)
    labels: List[str] = field(default_factory=list)
    roles: List[str] = field(default_factory=list)
    expected_peers: Optional[int] = None
    heartbeat_interval: float = 0.5
    heartbeat_timeout: float = 5.0
    startup_timeout: float = 30.0
    stop_on_peer_failure: bool = False
    peerless_timeout: float = 15.0
    advertise: Optional[str] = None
    ipc_dir: Optional[str] = None  # a folder the launcher made for ipc sockets: removed by whoever stops last

    def to_json(self) -> str:
        d = asdict(self)
        d["peers"] = {str(k): v for k, v in self.peers.items()}
        return json.dumps(d)

    @classmethod
    def from_json(cls, text: str) -> "NodeSpec":
        d = json.loads(text)
        d["peers"] = {int(k): v for k, v in d["peers"].items()}
        return cls(**d)

    def router_kwargs(self) -> Dict[str, object]:
        kwargs = asdict(self) | {"peers": dict(self.peers)}
        del kwargs["ipc_dir"]
        return kwargs


def configure_from_env() -> Optional[NodeSpec]:
    """Configure the router from ``RLPIPE_NODE`` (set by the launcher); None if it is not set."""
    text = os.environ.get(NODE_ENV)
    if not text:
        return None
    spec = NodeSpec.from_json(text)
    configure(**spec.router_kwargs())
    return spec


def default_roles(n: int) -> List[List[str]]:
    """Roles when the user names none: 1 node runs everything; 2 nodes: learner+evaluator and collector;
    n >= 3: node 0 learner, the last node evaluator, the others collectors."""
    if n == 1:
        return [[]]
    if n == 2:
        return [["learner", "evaluator"], ["collector"]]
    return [["learner"]] + [["collector"]] * (n - 2) + [["evaluator"]]


def _split_groups(text: Optional[str], n: int, what: str) -> List[List[str]]:
    """``"a,b:c"`` -> per-node lists (``:``/``;`` separate nodes, ``,``/``+`` items); one group = all nodes."""
    if text is None:
        return [[] for _ in range(n)]
    groups = [[x.strip() for x in g.replace("+", ",").split(",") if x.strip()]
              for g in text.replace(";", ":").split(":")]
    if len(groups) == 1:
        return [list(groups[0]) for _ in range(n)]
    if len(groups) != n:
        raise ValueError(f"--{what} lists {len(groups)} node groups ({text!r}) but {n} nodes are started: give "
                         f"one group for all nodes or one per node, separated by ':'")
    return groups


def _role_groups(roles: Optional[str], n: int) -> List[List[str]]:
    """Per-node roles from ``--roles`` (default roles when None); an unknown role is refused here, at start,
    with the valid ones, instead of crashing that node later while the others go on."""
    if roles is None:
        return default_roles(n)
    if roles.strip().lower() == "none":
        return [[] for _ in range(n)]
    groups = _split_groups(roles, n, "roles")
    valid = [r.value for r in Role]
    for k, group in enumerate(groups):
        for name in group:
            if name.lower() not in valid:
                where = f" (node {k} of {n})" if ":" in roles or ";" in roles else ""
                raise ValueError(f"--roles {roles!r}: unknown role {name!r}{where}; valid roles: "
                                 f"{', '.join(valid)} (or 'none')")
    return [[name.lower() for name in group] for group in groups]


def _ints(text: Optional[str], n: int, default_start: int, what: str) -> List[int]:
    if text is None or text == "":
        return list(range(default_start, default_start + n))
    try:
        vals = [int(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--{what} must be an integer or a comma-separated list of integers, got {text!r}") \
            from None
    if len(vals) == 1:
        return list(range(vals[0], vals[0] + n))
    if len(vals) != n:
        raise ValueError(f"--{what} lists {len(vals)} values but {n} nodes are started")
    return vals


def plan_nodes(n: int, topology: str = "mesh", protocol: str = "tcp", address: str = "127.0.0.1",
               ports: Optional[str] = None, node_ids: Optional[str] = None, attach_to: Sequence[str] = (),
               labels: Optional[str] = None, roles: Optional[str] = None, ipc_dir: Optional[str] = None,
               **router_options: Any) -> List[NodeSpec]:
    """Build the specs of ``n`` local nodes (see ``rlpipe run --help`` for the meaning of the options)."""
    if n < 1:
        raise ValueError(f"--parallel-workers must be at least 1, got {n}")
    if protocol not in ("tcp", "ipc"):
        raise ValueError(f"--protocol must be tcp or ipc, got {protocol!r}")
    ids = _ints(node_ids, n, 0, "node-ids")
    if len(set(ids)) != n:
        raise ValueError(f"--node-ids must be unique, got {ids}")
    advertise = router_options.get("advertise")
    if advertise is not None:
        from .zmq_router import announced_address  # lazy: planning nodes needs no zmq
        if protocol != "tcp":
            raise ValueError("--advertise names a host for tcp; with --protocol ipc there is nothing to announce")
        full = announced_address(advertise, "tcp://0.0.0.0:1") != announced_address(advertise, "tcp://0.0.0.0:2")
        if not full and n > 1:
            raise ValueError(f"--advertise {advertise!r} names a port, but {n} nodes are started here: give the "
                             "host only (each node announces it with its own port)")
    if protocol == "tcp":
        port_list = _ints(ports, n, DEFAULT_PORT, "ports")
        host = f"[{address}]" if ":" in address else address
        addrs = {i: f"tcp://{host}:{p}" for i, p in zip(ids, port_list)}
    else:
        d = ipc_dir or tempfile.mkdtemp(prefix="rlpipe-")
        addrs = {i: f"ipc://{os.path.join(d, f'node-{i}.sock')}" for i in ids}
        if ipc_dir is None:
            router_options = dict(router_options, ipc_dir=d)
    role_groups = _role_groups(roles, n)
    label_groups = _split_groups(labels, n, "labels")
    centre = min(ids)
    specs = []
    for k, i in enumerate(ids):
        expected = None
        if topology == "star" and i == centre:
            expected = n - 1 + len(attach_to)
        specs.append(NodeSpec(node_id=i, address=addrs[i], peers=dict(addrs), topology=topology,
                              attach_to=list(attach_to), labels=label_groups[k], roles=role_groups[k],
                              expected_peers=expected, **router_options))
    return specs


def plan_cluster_node(platform: str, env: Optional[Dict[str, str]] = None, ports: Optional[str] = None,
                      topology: str = "mesh", attach_to: Sequence[str] = (), labels: Optional[str] = None,
                      roles: Optional[str] = None, **router_options: Any) -> List[NodeSpec]:
    """The spec of this cluster task's node (``--platform slurm|k8s``; see ``pipeline.parallel.cluster``)."""
    base_port = int(ports.split(",")[0]) if ports else DEFAULT_PORT
    rank, peers, listen = layout(platform, os.environ if env is None else env, base_port)
    n = len(peers)
    role_groups = _role_groups(roles, n)
    order = sorted(peers)
    k = order.index(rank)
    expected = n - 1 + len(attach_to) if topology == "star" and rank == min(order) else None
    return [NodeSpec(node_id=rank, address=listen, peers=peers, topology=topology, attach_to=list(attach_to),
                     labels=_split_groups(labels, n, "labels")[k], roles=role_groups[k], expected_peers=expected,
                     advertise=peers[rank], **router_options)]


def _is_multi_machine(specs: Sequence[NodeSpec]) -> bool:
    from .zmq_router import is_local_address  # lazy: planning nodes needs no zmq
    return not all(is_local_address(a) for s in specs for a in [s.address, *s.attach_to])


class Launcher:
    """Run ``main`` (``"package.module.function"``) once per node spec, as child processes."""

    def __init__(self, specs: Sequence[NodeSpec], main: str, package: str = ".", startup_interval: float = 0.0,
                 auto_recover: bool = False, max_retries: int = 3, stop_grace: float = 10.0,
                 stop_on_failure: bool = False, key_file: Optional[str] = None,
                 extra_env: Optional[Dict[str, str]] = None, main_args: Sequence[str] = (),
                 verbose: bool = False) -> None:
        self.specs = list(specs)
        # nodes on this console: one reports the run (progress, run folder, summary), the learner if there is
        # one; the others print only their log lines, unless verbose
        reporter = next((s for s in self.specs if "learner" in s.roles), self.specs[0] if self.specs else None)
        self.quiet = set() if verbose else {s.node_id for s in self.specs if s is not reporter}
        self.main_args = list(main_args)
        self.main = main
        self.package = os.path.abspath(package)
        self.startup_interval = startup_interval
        self.auto_recover = auto_recover
        self.max_retries = max_retries
        self.stop_grace = stop_grace
        self.stop_on_failure = stop_on_failure
        self.env = dict(os.environ)
        self.env.update(extra_env or {})
        if key_file:
            self.env[KEY_FILE_ENV] = os.path.abspath(key_file)
            self.env.pop(KEY_ENV, None)
        self.multi_machine = _is_multi_machine(self.specs)
        if self.env.get(KEY_ENV) or self.env.get(KEY_FILE_ENV):
            saved = dict(os.environ)
            try:  # validate now, with a clear message, instead of failing in every child
                os.environ.update({k: v for k, v in self.env.items() if k in (KEY_ENV, KEY_FILE_ENV)})
                resolve_key(None, self.multi_machine)
            finally:
                os.environ.clear()
                os.environ.update(saved)
        elif self.multi_machine or any(s.attach_to for s in self.specs):
            resolve_key(None, True)  # raises MissingKeyError with instructions
        else:
            self.env[KEY_ENV] = generate_key()  # a local run: a fresh key known only to our children
            if len(self.specs) == 1:
                log.warning("generated a random key for this run: nodes started by another `rlpipe run` can "
                            "join only if you set the same RLPIPE_KEY (or --key-file) for both")
        self.env[PARENT_ENV] = str(os.getpid())
        # the nodes of one launch share one run folder (pipeline.run.folders.new_run_dir) and write it under
        # the directory the user started from, not under --package
        self.env.setdefault(LAUNCH_ID_ENV, f"{os.getpid()}-{time.time_ns()}")
        self.cwd = os.getcwd()
        pp = self.env.get("PYTHONPATH")
        self.env["PYTHONPATH"] = os.pathsep.join([self.package] + ([pp] if pp else []))
        self.procs: Dict[int, subprocess.Popen] = {}
        self.retries: Dict[int, int] = {s.node_id: 0 for s in self.specs}
        self.returncodes: Dict[int, int] = {}
        self._stop_requested = False

    def _spawn(self, spec: NodeSpec) -> subprocess.Popen:
        if spec.ipc_dir:
            os.makedirs(spec.ipc_dir, exist_ok=True)  # the last node to stop removed it; a restart needs it
        env = dict(self.env)
        env[NODE_ENV] = spec.to_json()
        if spec.node_id in self.quiet:
            env[QUIET_NODE_ENV] = "1"
        # as under the Ray launcher: a restarted node knows it (a learner then resumes from its newest
        # checkpoint, pipeline.run.resume), and every node knows that lost nodes come back (collectors wait)
        env[RESTARTS_ENV] = str(self.retries.get(spec.node_id, 0))
        env[MAX_RESTARTS_ENV] = str(self.max_retries if self.auto_recover else 0)
        cmd = [sys.executable, "-m", "pipeline.parallel.worker", "--main", self.main, "--package", self.package,
               "--", *self.main_args]
        log.info("starting node %d (%s, roles %s) at %s", spec.node_id, spec.topology,
                 ",".join(spec.roles) or "all", spec.address)
        return subprocess.Popen(cmd, env=env, cwd=self.cwd)

    def _on_signal(self, signum: int, frame: object) -> None:
        if not self._stop_requested:
            log.warning("received %s: stopping all nodes", signal.Signals(signum).name)
        self._stop_requested = True

    def run(self) -> int:
        """Start the nodes and wait for them; returns the worst exit code (0 if all succeeded)."""
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            for k, spec in enumerate(self.specs):
                if self._stop_requested:
                    break
                if k and self.startup_interval > 0:
                    self._sleep(self.startup_interval)
                self.procs[spec.node_id] = self._spawn(spec)
            while not self._stop_requested and self.procs:
                self._reap()
                self._sleep(0.1)
            self.stop_all()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.remove_ipc_files()
        codes = list(self.returncodes.values())
        return max((abs(c) for c in codes), default=0) if any(codes) else 0

    def _sleep(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while not self._stop_requested and time.monotonic() < end:
            time.sleep(min(0.05, end - time.monotonic()) if end > time.monotonic() else 0)

    def _reap(self) -> None:
        for node_id, proc in list(self.procs.items()):
            rc = proc.poll()
            if rc is None:
                continue
            del self.procs[node_id]
            self.returncodes[node_id] = rc
            if rc == 0:
                log.debug("node %d finished", node_id)
                continue
            spec = next(s for s in self.specs if s.node_id == node_id)
            crashed = rc < 0 or rc == CRASH_EXIT_CODE  # killed by a signal, or main raised
            if not crashed:
                log.warning("node %d exited with code %d (returned by its main)", node_id, rc)
                continue
            if self.auto_recover and self.retries[node_id] < self.max_retries:
                self.retries[node_id] += 1
                log.warning("node %d exited with code %d; restarting it (attempt %d of %d)", node_id, rc,
                            self.retries[node_id], self.max_retries)
                self.procs[node_id] = self._spawn(spec)
                continue
            log.error("node %d crashed (exit code %d)%s", node_id, rc,
                      "; stopping the others (--stop-on-failure)" if self.stop_on_failure else
                      "; the other nodes go on")
            if self.stop_on_failure:
                self._stop_requested = True

    def stop_all(self) -> None:
        """SIGTERM every running node, wait ``stop_grace`` s, then SIGKILL the rest."""
        alive = {i: p for i, p in self.procs.items() if p.poll() is None}
        for p in alive.values():
            try:
                p.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + self.stop_grace
        for i, p in alive.items():
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("node %d did not stop within %.0f s; killing it", i, self.stop_grace)
                p.kill()
                p.wait(timeout=5)
        for i, p in self.procs.items():
            if p.returncode is not None:
                self.returncodes.setdefault(i, p.returncode)
        self.procs.clear()

    def remove_ipc_files(self) -> None:
        """Remove the ipc socket files of nodes that could not (killed) and the folders this launcher made."""
        remove_ipc_files(self.specs)


def remove_ipc_files(specs: Sequence[NodeSpec]) -> None:
    """Remove the ipc socket files of ``specs`` that are still there (only sockets) and the folders the
    launcher made for them once they are empty. A node calls it for itself when it stops."""
    for spec in specs:
        if spec.address.startswith("ipc://"):
            path = spec.address[len("ipc://"):]
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
            except OSError:
                pass
    for d in {spec.ipc_dir for spec in specs if spec.ipc_dir}:
        try:
            os.rmdir(d)  # only when empty: the other nodes' sockets keep it
        except OSError:
            pass
