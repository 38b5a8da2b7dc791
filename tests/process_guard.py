"""Which tests start other Python processes: such a test must be marked ``multiprocess``.

The fast command of the README (``-m "not slow and not multiprocess and not bench"``) leaves out the
tests that start processes (bus nodes, the launcher, env worker processes, Ray, or a script run in a
fresh interpreter). tests/conftest.py watches every test (setup, call and teardown) with
:func:`process_starts` and fails one that started a Python process without that marker, naming what it
started, so a new test cannot slip into the fast command by accident.

What counts: ``multiprocessing`` processes (``Process.start``: env workers, process pools) and
``subprocess`` commands that run Python (``sys.executable``, ``python...``) or ``rlpipe``. Other commands
(``git``, ``ldconfig``, ...) do not count, nor does a process started while a module is being imported: a
library's probe on first import (glfw, imported with gymnasium's MuJoCo envs, runs ``python -c`` to read
its library's version) would otherwise fail whichever test happens to import it first.
"""
from __future__ import annotations

import contextlib
import multiprocessing.process
import os
import re
import subprocess
import sys
from typing import Any, Iterator, List

MARKER = "multiprocess"
_PYTHON_WORD = re.compile(r"""(?:^|[\s/"'])(?:python[\d.]*|rlpipe)(?:[\s"']|$)""")


def _importing() -> bool:
    """Whether the caller runs inside an ``import`` (a frame of importlib's bootstrap is on the stack)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def starts_python(args: Any) -> bool:
    """Whether ``subprocess.Popen(args)`` runs Python (``sys.executable``, ``python3 ...``) or ``rlpipe``."""
    if isinstance(args, (str, bytes, os.PathLike)):
        cmd = os.fsdecode(args)
    else:
        cmd = " ".join(os.fsdecode(a) if isinstance(a, (bytes, os.PathLike)) else str(a) for a in args)
    return sys.executable in cmd or bool(_PYTHON_WORD.search(cmd))


@contextlib.contextmanager
def process_starts() -> Iterator[List[str]]:
    """Within the block, every Python process started (from any thread) is appended to the list yielded."""
    started: List[str] = []
    popen_init = subprocess.Popen.__init__
    process_start = multiprocessing.process.BaseProcess.start

    def watched_popen_init(self: Any, args: Any, *a: Any, **kw: Any) -> None:
        if starts_python(args) and not _importing():
            started.append(f"subprocess {str(args)[:120]}")
        popen_init(self, args, *a, **kw)

    def watched_process_start(self: Any) -> None:
        started.append(f"multiprocessing process {self.name}")
        process_start(self)

    subprocess.Popen.__init__ = watched_popen_init  # type: ignore[method-assign]
    multiprocessing.process.BaseProcess.start = watched_process_start  # type: ignore[method-assign]
    try:
        yield started
    finally:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        multiprocessing.process.BaseProcess.start = process_start  # type: ignore[method-assign]


def unmarked_start(item: Any, started: List[str]) -> str:
    """The failure message for a test (``item``) that started processes without the marker, or ''."""
    if not started or item.get_closest_marker(MARKER) is not None:
        return ""
    more = f" (and {len(started) - 1} more)" if len(started) > 1 else ""
    return (f"{item.nodeid} started a Python process ({started[0]}{more}) but is not marked {MARKER}: add "
            f"@pytest.mark.{MARKER} to the test, or pytestmark = pytest.mark.{MARKER} to its module, so that the "
            f"README's fast test command leaves it out (tests/process_guard.py)")
