"""Where a node that the launcher restarted resumes from (``rlpipe run --auto-recover``, or ``rlpipe run
--backend ray --max-restarts N``).

A restarted node finds ``RLPIPE_RESTARTS`` (1, 2, ...) in its environment and, like every node of its
launch, ``RLPIPE_LAUNCH_ID``, which names the launch's shared run folder (:mod:`pipeline.runtime.node`).
``pipeline.run.prepare_run`` calls :func:`restart_resume`: a restarted learner continues that folder from its
newest intact learner checkpoint (:func:`pipeline.checkpoint.latest_checkpoint`), so every training example
resumes after a restart without code of its own. Imports neither torch nor Ray.
"""
from __future__ import annotations

import json
import os
from typing import List, Optional, Tuple

from ..checkpoint import latest_checkpoint
from ..runtime.node import LAUNCH_ID_ENV, NODE_ENV, RESTARTS_ENV
from .folders import new_run_dir

__all__ = ['restart_resume']


def _node_roles() -> Optional[List[str]]:
    """This node's roles from the launcher's ``RLPIPE_NODE`` (None outside ``rlpipe run``)."""
    text = os.environ.get(NODE_ENV)
    if not text:
        return None
    try:
        return [str(r) for r in json.loads(text).get('roles') or ()]
    except (ValueError, AttributeError):
        return None


def restart_resume(exp_name: str) -> Optional[Tuple[str, Optional[str]]]:
    """On a node the launcher restarted (``RLPIPE_RESTARTS`` >= 1: ``rlpipe run --auto-recover``, or
    ``--backend ray --max-restarts N``) that trains (the learner role, or no roles): ``(run folder, checkpoint)``, the
    launch's shared run folder and the newest learner checkpoint in it (None for the checkpoint when none
    was written yet). None on every other node and outside a launch."""
    try:
        restarts = int(os.environ.get(RESTARTS_ENV, '0') or 0)
    except ValueError:
        return None
    if restarts < 1 or not os.environ.get(LAUNCH_ID_ENV):
        return None
    roles = _node_roles()
    if roles and 'learner' not in roles:
        return None
    run_dir = new_run_dir(exp_name)  # the launch's folder, made by the first incarnation of this node
    return run_dir, latest_checkpoint(os.path.join(run_dir, 'ckpt'))
