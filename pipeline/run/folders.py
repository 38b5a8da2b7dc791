"""Run folders: ``<exp>/<n>/`` numbered per experiment, shared by the nodes of one launch, the checkpoint
paths ``--resume`` / ``--play`` name, and the run folder a resumed run continues. Imports neither torch nor
gymnasium."""
from __future__ import annotations

import fcntl
import os
from typing import Optional

from ..runtime.node import LAUNCH_ID_ENV

__all__ = ['new_run_dir', 'check_checkpoint_path', 'run_folder_of', 'mark_launch']


def new_run_dir(exp_name: str, root: Optional[str] = None, launch_id: Optional[str] = None) -> str:
    """Create and return ``<root>/<exp_name>/<n>`` with ``n`` one more than the highest number there
    (1 for the first run). Safe when two runs start at once (``mkdir`` either wins or retries).

    The nodes of one ``rlpipe run`` launch (same ``launch_id``, default ``$RLPIPE_LAUNCH_ID``) on one
    machine share one folder: the first creates it and marks it, the others find the mark."""
    base = os.path.join(os.path.abspath(root or os.getcwd()), exp_name)
    os.makedirs(base, exist_ok=True)
    launch_id = launch_id if launch_id is not None else os.environ.get(LAUNCH_ID_ENV)
    if launch_id:
        with open(os.path.join(base, '.lock'), 'a+') as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for d in os.listdir(base):
                mark = os.path.join(base, d, '.launch_id')
                if d.isdigit() and os.path.isfile(mark):
                    with open(mark) as f:
                        if f.read().strip() == launch_id:
                            return os.path.join(base, d)
            path = _next_numbered_dir(base)
            with open(os.path.join(path, '.launch_id'), 'w') as f:
                f.write(launch_id)
            return path
    return _next_numbered_dir(base)


def _next_numbered_dir(base: str) -> str:
    while True:
        nums = [int(d) for d in os.listdir(base) if d.isdigit()]
        path = os.path.join(base, str(max(nums, default=0) + 1))
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue


def check_checkpoint_path(path: str) -> str:
    """Refuse a ``--resume``/``--play`` path that is missing, a directory or empty (before anything
    is built); returns the absolute path."""
    full = os.path.abspath(os.path.expanduser(path))
    if os.path.isdir(full):
        ckpts = sorted(os.path.join(r, f) for r, _, fs in os.walk(full) for f in fs if f.endswith('.pth.tar'))
        hint = f'; checkpoints below it: {", ".join(ckpts[:3])}' if ckpts else ''
        raise SystemExit(f'error: {path!r} is a directory; give a checkpoint file{hint}')
    if not os.path.exists(full):
        raise SystemExit(f'error: no checkpoint at {path!r} (checkpoints are in <exp>/<n>/ckpt/, e.g. final.pth.tar)')
    if os.path.getsize(full) == 0:
        raise SystemExit(f'error: {path!r} is empty: not a checkpoint')
    return full


def run_folder_of(ckpt_path: str) -> Optional[str]:
    """The run folder ``<exp>/<n>`` that holds ``ckpt_path`` when it is ``<exp>/<n>/ckpt/<file>`` and ``<exp>/<n>``
    is a run folder (it has the ``config.json`` every run writes); None for a checkpoint from anywhere else (an
    agent's file, a copy): a run resumed from it writes a new run folder."""
    full = os.path.abspath(os.path.expanduser(ckpt_path))
    ckpt_dir = os.path.dirname(full)
    run_dir = os.path.dirname(ckpt_dir)
    if os.path.basename(ckpt_dir) != 'ckpt' or not os.path.isfile(os.path.join(run_dir, 'config.json')):
        return None
    return run_dir


def mark_launch(run_dir: str, launch_id: Optional[str] = None) -> None:
    """Mark ``run_dir`` as the folder of the launch ``launch_id`` (default ``$RLPIPE_LAUNCH_ID``; nothing outside a
    launch), so that :func:`new_run_dir` finds it for a node of that launch that starts or restarts later."""
    launch_id = launch_id if launch_id is not None else os.environ.get(LAUNCH_ID_ENV)
    if launch_id:
        with open(os.path.join(run_dir, '.launch_id'), 'w') as f:
            f.write(launch_id)
