"""Which node of a launch this process is, as the launcher tells it in the environment.

``rlpipe run`` (and ``rlpipe run --backend ray``) start every node with these variables set: the node's spec
(:data:`NODE_ENV`), the launch it belongs to (:data:`LAUNCH_ID_ENV`: the nodes of one launch share a run
folder), how often it was restarted (:data:`RESTARTS_ENV`), whether the launcher restarts nodes that die
(:data:`MAX_RESTARTS_ENV`, :func:`restarts_expected`), whether it shares the console with the node that
reports the run (:data:`QUIET_NODE_ENV`), whether it is a Ray actor (:data:`RAY_NODE_ENV`) and its log level
(:data:`LOG_LEVEL_ENV`). Read here, below both the launcher and what runs in a node: :func:`node_label` names
the node in log lines and summaries, :func:`node_is_quiet` says whether it keeps its console quiet. Imports
neither torch nor the launcher.
"""
from __future__ import annotations

import functools
import json
import os

from .task import task

__all__ = ['NODE_ENV', 'LAUNCH_ID_ENV', 'RESTARTS_ENV', 'MAX_RESTARTS_ENV', 'RESTART_PEERLESS_TIMEOUT',
           'QUIET_NODE_ENV', 'RAY_NODE_ENV', 'LOG_LEVEL_ENV', 'node_label', 'node_is_quiet', 'restarts_expected']

#: the node's spec (JSON: ``node_id``, ``roles``, ...), set by ``rlpipe run`` in every node
NODE_ENV = 'RLPIPE_NODE'

#: set by ``rlpipe run`` for all nodes of one launch (the same value): they share a run folder
LAUNCH_ID_ENV = 'RLPIPE_LAUNCH_ID'

#: set by the launcher on a node it restarted (1, 2, ...)
RESTARTS_ENV = 'RLPIPE_RESTARTS'

#: set for every node by ``rlpipe run --auto-recover`` and ``rlpipe run --backend ray --max-restarts N``: how
#: often the launcher restarts a node that dies
MAX_RESTARTS_ENV = 'RLPIPE_MAX_RESTARTS'

#: the peerless bound of a node while restarts are expected: a restarted peer needs its interpreter, imports
#: and checkpoint (with the replay buffer) before it listens again, far longer than a job's usual bound
RESTART_PEERLESS_TIMEOUT = 120.0

#: set to ``1`` by ``rlpipe run`` (without ``-v``) in every node but one when several share its console
QUIET_NODE_ENV = 'RLPIPE_QUIET_NODE'

#: set by the Ray launcher in its node actors: ``node_print`` keeps the lines of a summary for the launcher
RAY_NODE_ENV = 'RLPIPE_RAY_NODE'

#: the log level ``rlpipe run`` gives its nodes (``--log-level``; ``DEBUG`` with ``-v``)
LOG_LEVEL_ENV = 'RLPIPE_LOG_LEVEL'


def node_label() -> str:
    """``'node 1 collector'`` in a multi-node run (the node id and its roles), ``''`` otherwise."""
    try:
        router = task.router
        if router is None or not router.is_active:
            return _launched_node_label(os.environ.get(NODE_ENV, ''))
        roles = '+'.join(sorted(str(r) for r in task.roles)) or 'all roles'
        return f'node {router.node_id} {roles}'
    except Exception:  # noqa: BLE001 - a label must never break logging
        return ''


@functools.lru_cache(maxsize=4)
def _launched_node_label(spec_json: str) -> str:
    """The label of a node that ``rlpipe run`` started (its spec in ``$RLPIPE_NODE``) before its task starts,
    e.g. for the ``run folder:`` line printed before the pipeline runs; ``''`` outside a launch."""
    if not spec_json:
        return ''
    spec = json.loads(spec_json)
    roles = '+'.join(sorted(str(r) for r in spec.get('roles') or [])) or 'all roles'
    return f'node {spec["node_id"]} {roles}'


def node_is_quiet() -> bool:
    """True in a node that ``rlpipe run`` started beside the node that reports the run on the same console
    (the learner): it shows no progress display and no run folder or summary lines, only its log lines."""
    return os.environ.get(QUIET_NODE_ENV) == '1'


def restarts_expected() -> bool:
    """True when the launcher restarts a node that dies (:data:`MAX_RESTARTS_ENV` > 0): the nodes then wait for a
    lost peer's restart instead of giving up on it, and the launcher ends the job when it cannot restart one."""
    try:
        return int(os.environ.get(MAX_RESTARTS_ENV, '0') or 0) > 0
    except ValueError:
        return False
