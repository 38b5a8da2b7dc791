"""The terminal of a training run: log lines as ``HH:MM:SS [node 1 collector] message`` that do not garble
a progress bar (:func:`setup_logging`), and the end-of-run summary lines (:func:`node_print`). Importable from
:mod:`pipeline.run`; importing this module loads neither torch nor gymnasium."""
from __future__ import annotations

import logging
import os
import sys
from typing import List, Optional

from ..runtime import node
from ..runtime.node import LOG_LEVEL_ENV, RAY_NODE_ENV, node_is_quiet

__all__ = ['setup_logging', 'node_print', 'take_summary']


class _TqdmAwareHandler(logging.StreamHandler):
    """Writes log lines through ``tqdm.write`` (when tqdm is installed) so a progress bar on the
    same terminal is lifted and redrawn instead of being garbled."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = self.format(record)
            try:
                from tqdm import tqdm  # lazy: tqdm may be missing (plain lines then)
            except ImportError:
                self.stream.write(msg + '\n')
                self.flush()
                return
            tqdm.write(msg, file=self.stream)
        except Exception:  # noqa: BLE001 - logging must not raise
            self.handleError(record)


class _NodeTag(logging.Filter):
    """Adds ``record.node``: ``'[node 1 collector] '`` in a multi-node run, ``''`` otherwise."""

    def filter(self, record: logging.LogRecord) -> bool:
        label = node.node_label()
        record.node = f'[{label}] ' if label else ''
        return True


def node_print(*lines: str, summary: bool = True) -> None:
    """Print ``lines`` (a summary at the end of a run) to stdout, flushed. In a multi-node run each starts with
    the node and its roles, ``[node 1 collector] solved: ...``: every node prints its own view (its counters, the
    newest evaluation it received), and in the merged output of ``rlpipe run`` a reader must know whose it is.
    A line that starts with a newline keeps it before the tag.

    In a node of ``rlpipe run --backend ray`` (``$RLPIPE_RAY_NODE`` set) the lines of a ``summary`` (the end of
    a run) are kept for the launcher instead (:func:`take_summary`), which prints them on its console: an
    actor's stdout goes to Ray's worker log files, and its last lines do not reliably reach the driver before
    the job ends. ``summary=False`` (e.g. the run folder at the start) prints them in any case.

    A node that shares its console with the node that reports the run
    (:func:`pipeline.runtime.node.node_is_quiet`) prints nothing."""
    if node_is_quiet():
        return
    label = node.node_label()
    tag = f'[{label}] ' if label else ''
    under_ray = summary and bool(os.environ.get(RAY_NODE_ENV))
    for line in lines:
        stripped = line.lstrip('\n')
        text = line[:len(line) - len(stripped)] + tag + stripped
        if under_ray:
            _kept.append(text)
        else:
            print(text)
    sys.stdout.flush()


#: the summary lines :func:`node_print` kept in a Ray node actor (``$RLPIPE_RAY_NODE`` set), for the launcher
_kept: List[str] = []


def take_summary() -> List[str]:
    """The lines :func:`node_print` kept in a Ray node actor since the last call (then forgotten)."""
    out = list(_kept)
    _kept.clear()
    return out


def setup_logging(level: Optional[int] = None, stream: object = None) -> logging.Handler:
    """Log lines as ``HH:MM:SS [node 1 collector] message`` (the node part only in multi-node runs), through
    ``tqdm.write`` so they do not garble the progress bar. ``level``: by default INFO, or the level
    ``rlpipe run`` passes its nodes in ``$RLPIPE_LOG_LEVEL`` (``DEBUG`` with ``-v``). Returns the handler."""
    if level is None:
        level = logging.getLevelName(os.environ.get(LOG_LEVEL_ENV, 'INFO').upper())
        if not isinstance(level, int):
            level = logging.INFO
    handler = _TqdmAwareHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(logging.Formatter('%(asctime)s %(node)s%(message)s', datefmt='%H:%M:%S'))
    handler.addFilter(_NodeTag())
    root = logging.getLogger()
    for h in list(root.handlers):  # ours from an earlier call, or a plain console handler (e.g. basicConfig)
        if isinstance(h, _TqdmAwareHandler) or (type(h) is logging.StreamHandler
                                                and getattr(h, 'stream', None) in (sys.stderr, sys.stdout)):
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
