"""What the exchangers share: event names, the bounded waiter, role look-ups and the columnar row packing."""
from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Set

log = logging.getLogger('middleware.distributor')

EV_DATA = 'ctx_exchanger.data'        # collector -> learner: collected data and increments
EV_LEARNER = 'ctx_exchanger.learner'  # learner -> all: train_iter, env_step, env_episode, acks
EV_EVAL = 'ctx_exchanger.eval'        # evaluator -> all: an evaluation result
EV_FINAL = 'ctx_exchanger.final'      # evaluator -> all: its last result, in the step where it finishes
EV_MODEL = 'model_exchanger'          # learner -> all: {'version', 'state', 'node'}
PEER_LOST = ('__peer_dead__', '__peer_left__')
PEER_JOINED = '__peer_joined__'
POLL = 0.05


def current_task() -> Any:
    from pipeline import task
    return task


def restarts_expected() -> bool:
    """True when the launcher restarts a node that dies (``RLPIPE_MAX_RESTARTS`` > 0, set for every node by
    ``rlpipe run --backend ray --max-restarts N``): a lost learner is then waited for, not given up on (the
    launcher ends the job when it cannot restart it any more)."""
    try:
        return int(os.environ.get('RLPIPE_MAX_RESTARTS', '0') or 0) > 0
    except ValueError:
        return False


def inactive_void(name: str) -> Any:
    """``task.void()`` when this process has no peers (single-process run), else None."""
    task = current_task()
    if not task.router.is_active:
        return task.void()
    if not task.roles:
        log.warning('%s: this node has no roles, so it runs the whole pipeline itself; nothing to exchange '
                    '(give nodes roles, e.g. rlpipe run --roles learner:collector:collector:evaluator)', name)
        return task.void()
    return None


def peer_roles(router: Any, node_id: int) -> Set[str]:
    try:
        return {str(r) for r in router.peer_info(node_id)['roles']}
    except (KeyError, AttributeError):
        return set()


class Waiter:
    """A condition variable whose waits are bounded, poll ``task.finish`` and log why they ended."""

    def __init__(self) -> None:
        self.cv = threading.Condition()

    def notify(self) -> None:
        with self.cv:
            self.cv.notify_all()

    def wait(self, ready: Callable[[], bool], timeout: float, give_up: Callable[[], Optional[str]],
             what: str) -> str:
        """Wait until ``ready()``; returns 'ready', 'finish', 'timeout' or the reason ``give_up()`` gave."""
        task = current_task()
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                if ready():
                    return 'ready'
                if task.finish:
                    log.info('stopped waiting for %s: the task finished', what)
                    return 'finish'
                reason = give_up()
                if reason:
                    log.warning('stopped waiting for %s: %s', what, reason)
                    return reason
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning('waited %.1f s for %s: going on without it', timeout, what)
                    return 'timeout'
                self.cv.wait(min(POLL, left))


def pack_rows(rows: List[Any]) -> Any:
    """A list of same-keyed dicts -> columns (numpy rows of one shape/dtype stacked): fewer, larger wire
    items. Anything else is sent as is."""
    import numpy as np

    if not rows or not isinstance(rows[0], dict):
        return rows
    keys = list(rows[0].keys())
    if not all(isinstance(k, str) for k in keys):
        return rows
    ks = set(keys)
    if not all(type(r) is dict and r.keys() == ks for r in rows):
        return rows
    cols: Dict[str, Any] = {}
    for k in keys:
        vals = [r[k] for r in rows]
        v0 = vals[0]
        if isinstance(v0, np.ndarray) and all(isinstance(v, np.ndarray) and v.shape == v0.shape
                                              and v.dtype == v0.dtype for v in vals):
            cols[k] = np.stack(vals)
        else:
            cols[k] = vals
    return {'__columns__': keys, 'n': len(rows), 'cols': cols}


def unpack_rows(packed: Any) -> List[Any]:
    """The inverse of ``pack_rows``."""
    if not isinstance(packed, dict) or '__columns__' not in packed:
        return list(packed) if packed is not None else []
    keys, n, cols = packed['__columns__'], int(packed['n']), packed['cols']
    columns = [cols[k] for k in keys]
    return [dict(zip(keys, (c[j] for c in columns))) for j in range(n)]
