"""``rlpipe describe``: run a script's main up to its ``task.run()`` and describe its pipeline instead of
stepping it (:class:`pipeline.runtime.describe.Description`: middleware, roles, context fields, nodes)."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Mapping, Optional, Sequence, TextIO

from ..runtime.entry import load_main
from ..runtime import task
from ..runtime.describe import Description

__all__ = ["describe_main", "parse_nodes", "DescribeOnly"]


class DescribeOnly(Exception):
    """Raised by ``task.run`` under ``rlpipe describe``: the pipeline was described, no step runs."""


def parse_nodes(spec: Optional[str]) -> Optional[Dict[int, List[str]]]:
    """``"learner:collector:evaluator"`` -> {0: ["learner"], 1: ["collector"], 2: ["evaluator"]}."""
    if not spec:
        return None
    return {i: [r for r in part.replace("+", ",").split(",") if r and r != "none"]
            for i, part in enumerate(spec.split(":"))}


def describe_main(main: str, main_args: Sequence[str] = (), package: str = ".", nodes: Optional[Mapping] = None,
                  out: Optional[str] = None, stream: Optional[TextIO] = None) -> Description:
    """Run ``main`` (``package.module.function``) up to its ``task.run()`` and describe its pipeline."""
    package = os.path.abspath(package)
    if package not in sys.path:
        sys.path.insert(0, package)
    found: List[Description] = []

    def instead_of_run(t: Any) -> None:
        found.append(t.describe(nodes=nodes, out=out, stream=stream))
        raise DescribeOnly()

    argv, sys.argv = sys.argv, [main] + list(main_args)
    task.instead_of_run = instead_of_run
    try:
        load_main(main)()
    except DescribeOnly:
        pass
    finally:
        task.instead_of_run = None
        sys.argv = argv
        task.stop()
    if not found:
        raise RuntimeError(f"{main} returned without calling task.run(): nothing to describe")
    return found[0]
