"""``task.describe()``: the pipeline as a table and a diagram.

For this node (or, given ``nodes={node_id: roles}``, for each node of a multi-node run): the middleware in
order, their roles, the context fields they read and write (:mod:`pipeline.runtime.contracts`), which node runs what,
which fields cross the bus (read on one node, written on another) and the wiring problems. The diagram is
Mermaid text (``.mmd``, rendered by GitHub and most Markdown viewers); where graphviz is installed a DOT file
and its SVG rendering are written next to it.

``rlpipe describe --main package.module.main [--roles learner:collector:evaluator]`` runs a pipeline's main
up to its ``task.run()`` (no step runs) and describes what it registered (:mod:`pipeline.run.describe`).
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Set, Tuple

from .contracts import branches_of, check_chain, fields_of
from .phases import name_of
from .roles import Role, RoleLike, normalize_roles, roles_of

__all__ = ["Description", "describe_registered"]


@dataclass
class Row:
    name: str
    roles: str
    reads: List[str]
    writes: List[str]
    nodes: List[int]


@dataclass
class Description:
    """What ``task.describe()`` found: ``rows``, ``bus`` ({(from, to): fields}), ``problems`` per node."""

    rows: List[Row]
    nodes: Dict[int, Set[Role]]
    bus: Dict[Tuple[int, int], List[str]] = field(default_factory=dict)
    problems: Dict[int, List[str]] = field(default_factory=dict)

    def table(self) -> str:
        multi = len(self.nodes) > 1
        head = ["#", "middleware", "roles", "reads", "writes"] + (["nodes"] if multi else [])
        body = [[str(i), r.name, r.roles, ", ".join(r.reads) or "-", ", ".join(r.writes) or "-"]
                + ([", ".join(map(str, r.nodes)) or "-"] if multi else []) for i, r in enumerate(self.rows, 1)]
        widths = [max(len(line[c]) for line in [head] + body) for c in range(len(head))]
        fmt = " | ".join("{:%d}" % w for w in widths)
        lines = [fmt.format(*line).rstrip() for line in [head, ["-" * w for w in widths]] + body]
        if multi:
            lines.append("")
            for nid, roles in self.nodes.items():
                lines.append(f"node {nid}: roles {_roles_text(roles)}")
            lines += [f"bus: node {a} -> node {b}: {', '.join(fs)}" for (a, b), fs in sorted(self.bus.items())]
        problems = [(nid, p) for nid, ps in self.problems.items() for p in ps]
        lines.append("")
        lines += [f"problem{f' (node {nid})' if multi else ''}: {p}" for nid, p in problems] or \
            ["wiring: every read is written before it or kept"]
        return "\n".join(lines)

    def mermaid(self) -> str:
        out = ["flowchart LR"]
        for nid, ids in self._node_ids().items():
            if len(self.nodes) > 1:
                out.append(f'  subgraph node{nid}["node {nid}: {_roles_text(self.nodes[nid])}"]')
            prev = None
            for i in ids:
                r = self.rows[i]
                label = f"{r.name}<br/>reads: {', '.join(r.reads) or '-'}<br/>writes: {', '.join(r.writes) or '-'}"
                out.append(f'    n{nid}_{i}["{_esc(label)}"]')
                if prev is not None:
                    out.append(f"    n{nid}_{prev} --> n{nid}_{i}")
                prev = i
            if len(self.nodes) > 1:
                out.append("  end")
        for (a, b), fields in sorted(self.bus.items()):
            out.append(f'  node{a} -. "{_esc(", ".join(fields))}" .-> node{b}')
        return "\n".join(out) + "\n"

    def dot(self) -> str:
        out = ["digraph pipeline {", "  rankdir=LR; node [shape=box, fontname=Helvetica];"]
        for nid, ids in self._node_ids().items():
            out.append(f'  subgraph cluster_{nid} {{ label="node {nid}: {_roles_text(self.nodes[nid])}";')
            for i in ids:
                r = self.rows[i]
                label = f"{r.name}\\nreads: {', '.join(r.reads) or '-'}\\nwrites: {', '.join(r.writes) or '-'}"
                out.append(f'    n{nid}_{i} [label="{label}"];')
            out += [f"    n{nid}_{a} -> n{nid}_{b};" for a, b in zip(ids, ids[1:])]
            out.append("  }")
        for (a, b), fields in sorted(self.bus.items()):
            ia, ib = self._node_ids()[a], self._node_ids()[b]
            if ia and ib:
                out.append(f'  n{a}_{ia[-1]} -> n{b}_{ib[0]} [style=dashed, label="{", ".join(fields)}", '
                           f"ltail=cluster_{a}, lhead=cluster_{b}];")
        return "\n".join(out + ["}"]) + "\n"

    def _node_ids(self) -> Dict[int, List[int]]:
        return {nid: [i for i, r in enumerate(self.rows) if nid in r.nodes] for nid in self.nodes}

    def write(self, path: str) -> List[str]:
        """Write ``<path>.mmd`` (and, with graphviz installed, ``<path>.dot`` and ``<path>.svg``)."""
        base = path[:-4] if path.endswith(".mmd") else path
        written = [base + ".mmd"]
        with open(written[0], "w") as f:
            f.write(self.mermaid())
        if shutil.which("dot"):
            with open(base + ".dot", "w") as f:
                f.write(self.dot())
            subprocess.run(["dot", "-Tsvg", base + ".dot", "-o", base + ".svg"], check=True, timeout=60)
            written += [base + ".dot", base + ".svg"]
        return written


def _roles_text(roles: Iterable[object]) -> str:
    return ", ".join(sorted(str(r) for r in roles)) or "all roles"


def _esc(text: str) -> str:
    return text.replace('"', "'")


def _active(fn: object, roles: Set[Role]) -> bool:
    wanted = roles_of(fn)
    return wanted is None or not roles or not roles.isdisjoint(wanted)


def _row(fn: object, roles_by_node: Dict[int, Set[Role]]) -> Row:
    fields = fields_of(fn, set().union(*roles_by_node.values()) if roles_by_node else set())
    parts = branches_of(fn)
    if fields is None and parts is not None:
        rows = [_row(p, roles_by_node) for p in parts]
        reads = [r for row in rows for r in row.reads]
        writes = [w for row in rows for w in row.writes]
    else:
        reads = list(fields.reads) if fields else ["?"]
        writes = list(fields.writes) if fields else ["?"]
    wanted = roles_of(fn)
    name = (fields.owner if fields is not None and fields.owner else None) or _short(name_of(fn))
    return Row(name, _roles_text(wanted) if wanted else "all", reads, writes,
               [nid for nid, roles in roles_by_node.items() if _active(fn, roles)])


def _short(name: str) -> str:
    """``factory.<locals>._fn`` -> ``factory``; ``main.<locals>.<lambda>`` -> ``main.<lambda>``."""
    outer, _, inner = name.partition(".<locals>.")
    return f"{outer}.<lambda>" if inner.endswith("<lambda>") else outer


def describe_registered(registered: List[object], provided: Iterable[str],
                        nodes: Optional[Mapping[int, Iterable[RoleLike]]] = None,
                        this_node: Tuple[int, Iterable[RoleLike]] = (0, ())) -> Description:
    """Describe the ``registered`` middleware for ``nodes`` ({node id: roles}; default: this node alone)."""
    roles_by_node = ({int(n): normalize_roles(r) for n, r in nodes.items()} if nodes
                     else {int(this_node[0]): normalize_roles(this_node[1])})
    rows = [_row(fn, roles_by_node) for fn in registered]
    have = set(provided)
    writes_on = {nid: {w for r in rows if nid in r.nodes for w in r.writes} for nid in roles_by_node}
    bus: Dict[Tuple[int, int], List[str]] = {}
    if len(roles_by_node) > 1:
        for b in roles_by_node:
            wanted = {name for r in rows if b in r.nodes for read in r.reads if not read.endswith("?")
                      for name in read.split("|")}
            for name in sorted(wanted):
                if name.startswith("@") or name in writes_on[b]:
                    continue
                for a in roles_by_node:
                    if a != b and name in writes_on[a]:
                        bus.setdefault((a, b), []).append(name)
    problems = {}
    for nid, roles in roles_by_node.items():
        active = [fn for fn in registered if _active(fn, roles)]
        skipped = [fn for fn in registered if not _active(fn, roles)]
        received = {f for (a, b), fs in bus.items() if b == nid for f in fs}
        problems[nid] = check_chain(active, have | received, roles, skipped)
    return Description(rows, roles_by_node, bus, problems)
