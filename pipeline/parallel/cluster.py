"""Read the node layout of a cluster job from its environment (``rlpipe run --platform slurm|k8s``).

Each cluster task runs ``rlpipe run --platform ...`` once; this module tells it its node id, the address it
listens on and the addresses of all the other nodes.

* ``slurm``: ``SLURM_PROCID`` (node id), ``SLURM_NTASKS``, ``SLURM_JOB_NODELIST`` (or
  ``SLURM_STEP_NODELIST``, e.g. ``gpu[01-03],cpu7``) and ``SLURM_TASKS_PER_NODE`` (e.g. ``2(x3),1``); tasks
  are laid out block-wise as srun does by default, task k on a host listens on ``base_port + k``.
* ``k8s`` (or any orchestrator): ``RLPIPE_NODES`` = ``host:port,host:port,...`` (one entry per node, in node
  id order) and ``RLPIPE_RANK`` = this node's id, e.g. from a StatefulSet's ordinal.
"""
from __future__ import annotations

import re
import socket
from typing import Dict, List, Mapping, Tuple

__all__ = ["expand_hostlist", "expand_tasks_per_node", "slurm_layout", "k8s_layout", "layout"]


def expand_hostlist(text: str) -> List[str]:
    """``"gpu[01-03,7],cpu5"`` -> ``["gpu01", "gpu02", "gpu03", "gpu7", "cpu5"]`` (Slurm's compact form)."""
    hosts: List[str] = []
    for item in re.findall(r"[^,\[]+(?:\[[^\]]*\][^,\[]*)*", text):
        m = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", item)
        if not m:
            hosts.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for part in ranges.split(","):
            if "-" in part:
                lo, hi = part.split("-", 1)
                width = len(lo)
                for i in range(int(lo), int(hi) + 1):
                    for rest in expand_hostlist(suffix) if "[" in suffix else [suffix]:
                        hosts.append(f"{prefix}{i:0{width}d}{rest}")
            else:
                for rest in expand_hostlist(suffix) if "[" in suffix else [suffix]:
                    hosts.append(f"{prefix}{part}{rest}")
    return hosts


def expand_tasks_per_node(text: str) -> List[int]:
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    out: List[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"cannot read SLURM_TASKS_PER_NODE={text!r}")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def slurm_layout(env: Mapping[str, str], base_port: int) -> Tuple[int, Dict[int, Tuple[str, int]]]:
    """(this node's id, {node id: (host, port)}) from Slurm's environment."""
    try:
        rank = int(env["SLURM_PROCID"])
        ntasks = int(env["SLURM_NTASKS"])
        nodelist = env.get("SLURM_STEP_NODELIST") or env["SLURM_JOB_NODELIST"]
    except KeyError as e:
        raise ValueError(f"--platform slurm: {e.args[0]} is not set (run under srun)") from None
    hosts = expand_hostlist(nodelist)
    per_node = expand_tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE")
                                     or ",".join(["1"] * len(hosts)))
    layout: Dict[int, Tuple[str, int]] = {}
    task = 0
    for host, n in zip(hosts, per_node):
        for local in range(n):
            if task < ntasks:
                layout[task] = (host, base_port + local)
            task += 1
    if len(layout) != ntasks:
        raise ValueError(f"--platform slurm: {ntasks} tasks but the node list {nodelist!r} with tasks per node "
                         f"{per_node} places {len(layout)}")
    return rank, layout


def k8s_layout(env: Mapping[str, str]) -> Tuple[int, Dict[int, Tuple[str, int]]]:
    """(this node's id, {node id: (host, port)}) from ``RLPIPE_NODES`` and ``RLPIPE_RANK``."""
    try:
        rank = int(env["RLPIPE_RANK"])
        nodes = [x.strip() for x in env["RLPIPE_NODES"].split(",") if x.strip()]
    except KeyError as e:
        raise ValueError(f"--platform k8s: {e.args[0]} is not set (RLPIPE_NODES=host:port,...; RLPIPE_RANK=i)") \
            from None
    layout = {}
    for i, item in enumerate(nodes):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"RLPIPE_NODES entry {item!r} is not host:port")
        layout[i] = (host, int(port))
    if rank not in layout:
        raise ValueError(f"RLPIPE_RANK={rank} but RLPIPE_NODES lists {len(layout)} nodes")
    return rank, layout


def layout(platform: str, env: Mapping[str, str], base_port: int) -> Tuple[int, Dict[int, str], str]:
    """(node id, {node id: tcp address to connect to}, tcp address to listen on) for ``platform``."""
    if platform == "slurm":
        rank, hosts = slurm_layout(env, base_port)
    elif platform == "k8s":
        rank, hosts = k8s_layout(env)
    else:
        raise ValueError(f"unknown platform {platform!r}: use slurm or k8s")
    peers = {i: f"tcp://{h}:{p}" for i, (h, p) in hosts.items()}
    host, port = hosts[rank]
    try:
        ip = socket.gethostbyname(host)  # ZeroMQ binds to an interface address
    except OSError:
        ip = host
    return rank, peers, f"tcp://{ip}:{port}"
