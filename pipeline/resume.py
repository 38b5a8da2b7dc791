"""Where a node that the launcher restarted resumes from (``rlpipe run --auto-recover``, or ``rlpipe run
--backend ray --max-restarts N``).

A restarted node finds ``RLPIPE_RESTARTS`` (1, 2, ...) in its environment and, like every node of its
launch, ``RLPIPE_LAUNCH_ID``, which names the launch's shared run folder. ``pipeline.experiment.prepare_run``
calls :func:`restart_resume`: a restarted learner continues that folder from its newest learner checkpoint,
so every training example resumes after a restart without code of its own. Imports neither torch nor Ray.
"""
from __future__ import annotations

import json
import logging
import os
import zipfile
from typing import List, Optional, Tuple

from pipeline.experiment import LAUNCH_ID_ENV, new_run_dir

__all__ = ['RESTARTS_ENV', 'latest_checkpoint', 'restart_resume', 'checkpoint_problem', 'buffer_path']

log = logging.getLogger(__name__)

RESTARTS_ENV = 'RLPIPE_RESTARTS'  # set by the launcher on a node it restarted (1, 2, ...)


def buffer_path(ckpt_path: str) -> str:
    """The replay buffer file ``CkptSaver`` saves next to a checkpoint (``final.pth.tar`` -> ``final.buffer``)."""
    base = ckpt_path[:-len('.pth.tar')] if ckpt_path.endswith('.pth.tar') else ckpt_path
    return base + '.buffer'


def _file_problem(path: str, what: str) -> Optional[str]:
    """Why ``path`` is not a complete file (empty, unreadable, or a zip archive cut short), or None. Checkpoints
    and buffer files are the zip archives ``torch.save`` writes: a truncated one has lost its central directory
    (at the end) or members that end past the end of the file. Only the directory is read, not the data (the
    loader checks the contents); a file in another format is left to the loader."""
    try:
        size = os.path.getsize(path)
        with open(path, 'rb') as f:
            head = f.read(4)
    except OSError as e:
        return f'{what} {path} cannot be read ({e.strerror})'
    if size == 0:
        return f'{what} {path} is empty'
    if head != b'PK\x03\x04':
        return None
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.header_offset + 30 + len(info.filename) + info.compress_size > size:
                    return f'{what} {path} is truncated ({size} bytes; {info.filename} ends past the end)'
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f'{what} {path} is truncated or corrupt ({size} bytes, not a complete archive: {e})'
    return None


def checkpoint_problem(path: str, with_buffer: bool = True) -> Optional[str]:
    """Why the checkpoint at ``path`` cannot be resumed from as it stands, or None: the checkpoint file (and,
    ``with_buffer``, the replay buffer file saved next to it, when there is one) is missing, empty or truncated.
    Cheap (reads the archives' directories only); what the files hold is checked when they are loaded."""
    if not os.path.isfile(path):
        return f'no checkpoint at {path}'
    problem = _file_problem(path, 'checkpoint')
    if problem is None and with_buffer and os.path.exists(buffer_path(path)):
        problem = _file_problem(buffer_path(path), 'replay buffer file')
    return problem


def latest_checkpoint(ckpt_dir: str) -> Optional[str]:
    """The newest intact learner checkpoint in ``ckpt_dir`` (``final.pth.tar`` or ``iteration_<n>.pth.tar``, the
    most recently written whose file and buffer file pass :func:`checkpoint_problem`; ``eval.pth.tar`` is the
    evaluator's and is never picked), or None. Newer checkpoints passed over are named in one warning line."""
    if not os.path.isdir(ckpt_dir):
        return None
    found = []
    for name in os.listdir(ckpt_dir):
        it = -1
        if name.startswith('iteration_') and name.endswith('.pth.tar'):
            digits = name[len('iteration_'):-len('.pth.tar')]
            if not digits.isdigit():
                continue
            it = int(digits)
        elif name != 'final.pth.tar':
            continue
        path = os.path.join(ckpt_dir, name)
        try:
            found.append((os.path.getmtime(path), it, path))
        except OSError:  # removed meanwhile
            continue
    skipped = []
    chosen = None
    for _, _, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            chosen = path
            break
        skipped.append(problem)
    if skipped:
        log.warning('%s; %s', '; '.join(skipped), f'using the newest intact checkpoint, {chosen}' if chosen else
                    'no intact checkpoint is left')
    return chosen


def _node_roles() -> Optional[List[str]]:
    """This node's roles from the launcher's ``RLPIPE_NODE`` (None outside ``rlpipe run``)."""
    text = os.environ.get('RLPIPE_NODE')
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
