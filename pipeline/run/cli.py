"""The ``rlpipe`` console script.

    rlpipe run --package . --main examples.dqn_cartpole.main --parallel-workers 4 --topology mesh -- --seed 3

starts 4 nodes of the pipeline as local processes (node 0 learner, nodes 1-2 collectors, node 3 evaluator
unless ``--roles`` says otherwise). A node on another machine joins a running group with, e.g.::

    # machine A (10.0.0.1)
    export RLPIPE_KEY=...   # the same secret on every machine
    rlpipe run --main examples.dqn_cartpole.main --roles learner --node-ids 0 --ports 50515 --address 10.0.0.1
    # machine B (10.0.0.2)
    rlpipe run --main examples.dqn_cartpole.main --roles collector --node-ids 1 --ports 50516 \\
        --address 10.0.0.2 --attach-to tcp://10.0.0.1:50515
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="rlpipe", description="rlpipe command line",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a pipeline as one or several nodes",
                         formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("--package", default=".", help="directory to import --main from (put on sys.path)")
    run.add_argument("--main", required=True, help="function to run in every node: package.module.function")
    run.add_argument("--parallel-workers", type=int, default=1, help="number of local node processes")
    run.add_argument("--topology", choices=["mesh", "star", "alone"], default="mesh",
                     help="mesh: all to all; star: all to the smallest node id; alone: only --attach-to")
    run.add_argument("--protocol", choices=["tcp", "ipc"], default="tcp")
    run.add_argument("--address", default=None,
                     help="interface to listen on (tcp); loopback (127.0.0.1) by default, name another one on "
                          "purpose. A single node given --address waits for nodes of another `rlpipe run`: "
                          "it needs RLPIPE_KEY (or --key-file), the same for both")
    run.add_argument("--advertise", default=None,
                     help="address announced to peers if it differs from the listen address (NAT, 0.0.0.0)")
    run.add_argument("--ports", default=None,
                     help="tcp ports: one start port (nodes get consecutive ports) or a comma list "
                          "[default: 50515...]")
    run.add_argument("--node-ids", default=None, help="node ids: a start id or a comma list [default: 0...]")
    run.add_argument("--attach-to", default="",
                     help="comma list of addresses of running nodes to join, e.g. tcp://10.0.0.1:50515")
    run.add_argument("--labels", default=None,
                     help="node labels: 'a,b' for every node, or per node separated by ':' ('a:b:b')")
    run.add_argument("--roles", default=None,
                     help="node roles (learner, collector, evaluator, fetcher): 'learner' for every node or "
                          "per node separated by ':' ('learner:collector:collector:evaluator'; several roles of "
                          "one node with ',' or '+'); 'none' for no roles. Default with N>1 workers: node 0 "
                          "learner, the last evaluator, the others collectors")
    run.add_argument("--platform", choices=["local", "slurm", "k8s"], default="local",
                     help="slurm/k8s: start this cluster task's node, with its id and the peers' addresses read "
                          "from the environment (SLURM_*; or RLPIPE_NODES=host:port,... and RLPIPE_RANK)")
    run.add_argument("--startup-interval", type=float, default=0.0,
                     help="seconds between starting nodes (0: all at once; they find each other by their seed "
                          "addresses)")
    run.add_argument("--auto-recover", action="store_true",
                     help="restart a node that crashes (its main raises, or a signal kills it); a node whose "
                          "main returns an exit code is not restarted. The restarted node gets RLPIPE_RESTARTS "
                          "in its environment: a restarted learner of a training example resumes from its "
                          "newest checkpoint")
    run.add_argument("--max-retries", type=int, default=3, help="restarts per node with --auto-recover")
    run.add_argument("--stop-on-failure", action="store_true",
                     help="stop every node when one fails for good (and finish the task when a peer is "
                          "declared dead); default: the others go on")
    run.add_argument("--heartbeat-interval", type=float, default=0.5, help="seconds between heartbeats")
    run.add_argument("--heartbeat-timeout", type=float, default=5.0,
                     help="seconds of silence after which a peer is declared dead")
    run.add_argument("--startup-timeout", type=float, default=30.0,
                     help="longest wait in task.start() for the expected peers")
    run.add_argument("--peerless-timeout", type=float, default=15.0,
                     help="a node whose every peer is gone (dead or left) this long finishes its run "
                          "(at least 120 s with --auto-recover: a restarted node gets time to rejoin)")
    run.add_argument("--stop-grace", type=float, default=10.0,
                     help="seconds nodes get to stop after SIGTERM before SIGKILL")
    run.add_argument("--key-file", default=None,
                     help="file with the shared key (default: $RLPIPE_KEY, $RLPIPE_KEY_FILE, or a random key "
                          "for runs on this machine only)")
    run.add_argument("--bus-auth", choices=["plain", "curve"], default=None,
                     help="how connections between nodes prove they know the key: plain (a derived credential "
                          "sent in clear, no cost per message) or curve (CurveZMQ: encrypted, nothing sniffable; "
                          "slower for large messages); the same on every node [default: $RLPIPE_BUS_AUTH, else curve "
                          "for a node with a non-loopback address, plain when all its addresses are loopback/ipc]")
    run.add_argument("--log-level", default="INFO")
    run.add_argument("-v", "--verbose", action="store_true",
                     help="details on the console: connections, per-node progress and summaries, counters at "
                          "the end (log level DEBUG)")
    ray_opts = run.add_argument_group("Ray backend (--backend ray; pip install rlpipe[ray])")
    ray_opts.add_argument("--backend", choices=["processes", "ray"], default="processes",
                          help="processes: local child processes (or this cluster task's node with --platform); "
                               "ray: every node as a Ray actor, on the Ray cluster at --address (auto|HOST:PORT) "
                               "or on a local Ray when --address is not given")
    for role in ("learner", "collector", "evaluator"):
        ray_opts.add_argument(f"--{role}-cpus", type=float, default=1.0, help=f"Ray CPUs per {role} node")
        ray_opts.add_argument(f"--{role}-gpus", type=float, default=0.0, help=f"Ray GPUs per {role} node")
    ray_opts.add_argument("--max-restarts", type=int, default=0,
                          help="restarts per node whose actor dies or whose main raises (the node gets "
                               "RLPIPE_RESTARTS in its environment; a restarted learner of a training example "
                               "resumes from its newest checkpoint in the run folder, with its counters)")
    run.add_argument("main_args", nargs=argparse.REMAINDER,
                     help="arguments for the main function's own parser, after '--' (e.g. -- --seed 3)")
    desc = sub.add_parser("describe", help="print a pipeline's middleware, roles and context fields (runs no step)")
    desc.add_argument("--main", required=True, help="the pipeline's main: package.module.function")
    desc.add_argument("--package", default=".", help="directory to import --main from")
    desc.add_argument("--roles", default=None, help="describe a multi-node run: roles per node, 'learner:collector'")
    desc.add_argument("--out", default="pipeline", help="diagram: <out>.mmd (with graphviz also .dot and .svg)")
    desc.add_argument("main_args", nargs=argparse.REMAINDER, help="arguments for the main, after '--'")
    return ap


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``rlpipe`` console script."""
    args = _parser().parse_args(argv)
    if args.command == "describe":
        from .describe import describe_main, parse_nodes  # lazy: rlpipe --help loads only this module
        describe_main(args.main, args.main_args[1:] if args.main_args[:1] == ["--"] else args.main_args,
                      args.package, parse_nodes(args.roles), args.out)
        return 0
    if args.verbose:
        args.log_level = "DEBUG"
    logging.basicConfig(level=args.log_level.upper(),
                        format="[launcher] %(asctime)s %(levelname)s %(message)s")
    if args.bus_auth:
        os.environ["RLPIPE_BUS_AUTH"] = args.bus_auth  # every node this launcher starts inherits it
    if args.backend == "ray":
        return _run_on_ray(args)
    from ..parallel.keys import KEY_ENV, KEY_FILE_ENV, MissingKeyError  # lazy: rlpipe --help loads only this module
    from ..parallel.launch import Launcher, plan_cluster_node, plan_nodes  # lazy: rlpipe --help loads only this module
    attach = [a.strip() for a in args.attach_to.split(",") if a.strip()]
    from ..parallel.wire import is_local_address  # lazy: rlpipe --help loads only this module
    if (args.platform == "local" and args.address is not None and args.parallel_workers == 1 and not attach
            and is_local_address(f"tcp://{args.address}:0")
            and not (args.key_file or os.environ.get(KEY_ENV) or os.environ.get(KEY_FILE_ENV))):
        # one node on a named interface: its peers come from another launch, which cannot know a random key
        print(f"rlpipe run: error: --address {args.address} with one node: the nodes that join it (another "
              f"`rlpipe run --attach-to ...`) need the same key; set {KEY_ENV} (or --key-file) for both, e.g. "
              f"export {KEY_ENV}=$(python -c 'import secrets; print(secrets.token_hex(32))')", file=sys.stderr)
        return 2
    options = dict(heartbeat_interval=args.heartbeat_interval, heartbeat_timeout=args.heartbeat_timeout,
                   startup_timeout=args.startup_timeout, stop_on_peer_failure=args.stop_on_failure,
                   peerless_timeout=args.peerless_timeout)
    try:
        if args.platform != "local":
            specs = plan_cluster_node(args.platform, ports=args.ports, topology=args.topology, attach_to=attach,
                                      labels=args.labels, roles=args.roles, **options)
        else:
            specs = plan_nodes(args.parallel_workers, topology=args.topology, protocol=args.protocol,
                               address=args.address or "127.0.0.1", ports=args.ports, node_ids=args.node_ids,
                               attach_to=attach, labels=args.labels, roles=args.roles, advertise=args.advertise,
                               **options)
        launcher = Launcher(specs, args.main, package=args.package, startup_interval=args.startup_interval,
                            auto_recover=args.auto_recover, max_retries=args.max_retries,
                            stop_grace=args.stop_grace, stop_on_failure=args.stop_on_failure,
                            key_file=args.key_file,
                            extra_env={"RLPIPE_LOG_LEVEL": args.log_level.upper()}, verbose=args.verbose,
                            main_args=args.main_args[1:] if args.main_args[:1] == ["--"] else args.main_args)
    except (ValueError, MissingKeyError) as e:
        print(f"rlpipe run: error: {e}", file=sys.stderr)
        return 2
    if not os.path.isdir(launcher.package):
        print(f"rlpipe run: error: --package {args.package!r} is not a directory", file=sys.stderr)
        return 2
    return launcher.run()


def _run_on_ray(args: argparse.Namespace) -> int:
    from .ray_launch import run_on_ray  # lazy: rlpipe --help loads only this module

    if args.platform != "local" or args.attach_to or args.protocol != "tcp":
        print("rlpipe run: error: --backend ray places the nodes itself: drop --platform, --attach-to and "
              "--protocol", file=sys.stderr)
        return 2
    address = None if args.address in (None, "127.0.0.1") else args.address  # --address names the Ray cluster here
    os.environ["RLPIPE_LOG_LEVEL"] = args.log_level.upper()
    try:
        results = run_on_ray(
            args.main, args.parallel_workers, package=args.package,
            main_args=args.main_args[1:] if args.main_args[:1] == ["--"] else args.main_args,
            roles=args.roles, labels=args.labels, topology=args.topology, address=address,
            cpus={r: getattr(args, f"{r}_cpus") for r in ("learner", "collector", "evaluator")},
            gpus={r: getattr(args, f"{r}_gpus") for r in ("learner", "collector", "evaluator")},
            max_restarts=args.max_restarts, stop_on_failure=args.stop_on_failure, stop_grace=args.stop_grace,
            heartbeat_interval=args.heartbeat_interval, heartbeat_timeout=args.heartbeat_timeout,
            startup_timeout=args.startup_timeout, stop_on_peer_failure=args.stop_on_failure)
    except (ValueError, ImportError, TimeoutError) as e:
        print(f"rlpipe run: error: {e}", file=sys.stderr)
        return 2
    failed = {i: r for i, r in results.items() if isinstance(r, BaseException)}
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
