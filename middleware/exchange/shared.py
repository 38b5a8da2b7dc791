"""What the exchangers share: event names, the bounded waiter, role look-ups and the columnar row packing."""
from __future__ import annotations

import logging
import re
import threading
import time
from typing import (TYPE_CHECKING, Callable, Dict, Generic, Iterable, List, Mapping, Optional, Protocol, Sequence, Set,
                    Tuple, TypedDict, TypeVar, cast)

import numpy as np

from pipeline import task
from pipeline.runtime.roles import Role
from pipeline.runtime.task import Task

if TYPE_CHECKING:
    import torch

log = logging.getLogger('middleware.distributor')

EV_DATA = 'ctx_exchanger.data'        # collector -> learner: collected data and increments
EV_LEARNER = 'ctx_exchanger.learner'  # learner -> all: train_iter, env_step, env_episode, acks
EV_EVAL = 'ctx_exchanger.eval'        # evaluator -> all: an evaluation result
EV_FINAL = 'ctx_exchanger.final'      # evaluator -> all: its last result, in the step where it finishes
EV_MODEL = 'model_exchanger'          # learner -> all: {'version', 'state', 'node'}
PEER_LOST = ('__peer_dead__', '__peer_left__')
PEER_JOINED = '__peer_joined__'
POLL = 0.05


class _EvalMsg(TypedDict):
    node: int
    eval_value: float
    train_iter: int


class EvalMsg(_EvalMsg, total=False):
    """An evaluator's result (``EV_EVAL``, ``EV_FINAL``); ``ContextExchanger`` adds its ``env_step``."""

    env_step: int


class LearnerMsg(TypedDict):
    """The learner's counters (``EV_LEARNER``), with the last batch it consumed per collector:
    ``acks[collector id] = [incarnation, batch sequence number]``."""

    node: int
    train_iter: int
    env_step: int
    env_episode: int
    acks: Dict[int, List[int]]


class DataMsg(TypedDict, total=False):
    """A collector's batch (``EV_DATA``): what it collected (packed rows) and its increments, or, with
    ``storage``, the ``file`` that holds them; always ``node``, ``inc`` (incarnation) and ``seq``."""

    node: int
    inc: int
    seq: int
    file: str
    env_step: int
    env_episode: int
    transitions: object            # pack_rows of the transitions, or None
    episodes: Optional[List[object]]  # pack_rows of each episode, or None
    episode_return: List[float]
    episode_length: List[int]


class StateModel(Protocol):
    """A model whose weights are exchanged (a ``torch.nn.Module``)."""

    def state_dict(self) -> Mapping[str, torch.Tensor]: ...

    def load_state_dict(self, state_dict: Mapping[str, torch.Tensor], /) -> object: ...


class _KnowsPeers(Protocol):
    def peer_info(self, node_id: int) -> Mapping[str, List[object]]: ...


def current_task() -> Task:
    return task


def host_state(model: StateModel) -> Dict[str, torch.Tensor]:
    """``model.state_dict()`` as host tensors to send (detached; copied off a GPU, as they are on the CPU): the
    receiver loads them onto its own model's device."""
    return {k: v.detach() if v.device.type == 'cpu' else v.detach().cpu() for k, v in model.state_dict().items()}


def inactive_void(name: str) -> object:
    """``task.void()`` when this process has no peers (single-process run), else None."""
    task = current_task()
    if not task.router.is_active:
        return task.void()
    if not task.roles:
        log.warning('%s: this node has no roles, so it runs the whole pipeline itself; nothing to exchange '
                    '(give nodes roles, e.g. rlpipe run --roles learner:collector:collector:evaluator)', name)
        return task.void()
    return None


def peer_roles(router: object, node_id: int) -> Set[str]:
    try:
        return {str(r) for r in cast(_KnowsPeers, router).peer_info(node_id)['roles']}  # a bus router; else set()
    except (KeyError, AttributeError, TypeError):
        return set()


def exchanger_roles(name: str) -> Tuple[bool, bool, bool]:
    """(learner, collector, evaluator): which of these roles this node has; a node may not be both learner
    and collector (ValueError naming ``name``)."""
    roles = current_task().roles
    learner, collector = Role.LEARNER in roles, Role.COLLECTOR in roles
    if learner and collector:
        raise ValueError(f'{name}: this node is both learner and collector; give the roles to different nodes '
                         '(e.g. --roles learner:collector:collector:evaluator)')
    return learner, collector, Role.EVALUATOR in roles


_Msg = TypeVar('_Msg', bound=Mapping[str, object])


class Newest(Generic[_Msg]):
    """The newest message of one kind and how many arrived (under ``waiter``'s lock, waking its waits):
    a reader ``take``s each one at most once."""

    def __init__(self, waiter: 'Waiter') -> None:
        self._w = waiter
        self.msg: Optional[_Msg] = None
        self.n = 0          # messages arrived
        self.taken = 0      # the count at the last take

    def put(self, msg: _Msg) -> None:
        with self._w.cv:
            self.msg = msg
            self.n += 1
            self._w.cv.notify_all()

    def take(self) -> Optional[_Msg]:
        """The newest message if it arrived after the last take, else None."""
        with self._w.cv:
            msg, n = self.msg, self.n
        if msg is None or n == self.taken:
            return None
        self.taken = n
        return msg


class PeerTable:
    """The live peers of this node and their roles: filled from the router, kept current by the bus's join and
    loss events (under ``waiter``'s lock, waking its waits). ``lost`` holds the peers lost and not back,
    ``joined`` those that joined since the owner last cleared it; ``on_lost(node_id, roles, dead)`` runs
    (outside the lock) when a live peer is lost (``dead``: declared dead, it may come back; else it left)."""

    def __init__(self, router: object, waiter: 'Waiter',
                 on_lost: Optional[Callable[[int, Set[str], bool], None]] = None) -> None:
        self.router, self._w, self._on_lost_cb = router, waiter, on_lost
        self.alive: Dict[int, Set[str]] = {}
        self.lost: Set[int] = set()
        self.joined: Set[int] = set()
        for p in list(getattr(router, 'peers', ()) or ()):
            self.alive[int(p)] = peer_roles(router, int(p))

    def listen(self, task: Task) -> None:
        dead, left = PEER_LOST
        task.on(dead, self.on_dead)
        task.on(left, self.on_lost)
        task.on(PEER_JOINED, self.on_joined)

    def with_role(self, role: str) -> List[int]:
        return [i for i, r in self.alive.items() if role in r]

    def on_joined(self, node_id: int, *_: object, **__: object) -> None:
        with self._w.cv:
            self.alive[int(node_id)] = peer_roles(self.router, int(node_id))
            self.lost.discard(int(node_id))
            self.joined.add(int(node_id))
            self._w.cv.notify_all()

    def on_dead(self, node_id: int, *_: object, **__: object) -> None:
        """Declared dead by the bus: it may come back (then ``on_joined``: a revived peer is alive again)."""
        self.on_lost(node_id, dead=True)

    def on_lost(self, node_id: int, *_: object, dead: bool = False, **__: object) -> None:
        node_id = int(node_id)
        with self._w.cv:
            roles = self.alive.pop(node_id, None)
            if roles is None:
                return
            self.lost.add(node_id)
            self._w.cv.notify_all()
        if self._on_lost_cb is not None:
            self._on_lost_cb(node_id, roles, dead)


class _Streak:
    """A repeated condition of one kind of wait: its reason, the message logged, how often, since when (monotonic)."""

    __slots__ = ('reason', 'message', 'count', 'since')

    def __init__(self, reason: str, message: str, count: int, since: float) -> None:
        self.reason, self.message, self.count, self.since = reason, message, count, since


class Waiter:
    """A condition variable whose waits are bounded, poll ``task.finish`` and log why they ended.

    A wait that ends the same way as the one before (the same ``give_up`` reason, or a timeout, for the same
    kind of wait) is a repeated condition: it is logged once, when it starts, and once more with its count
    when it ends (another outcome, e.g. the awaited thing arrived or the task finished). A repeated give-up
    also backs off: it returns only after a pause that doubles with each repetition (from ``POLL`` up to
    ``MAX_BACKOFF`` s, within the wait's timeout; cut short when the wait becomes ready, the task finishes or
    the reason goes away), so that a caller that steps again at once (e.g. an evaluator while the learner is
    dead or paused) does not spin."""

    MAX_BACKOFF = 1.0

    def __init__(self) -> None:
        self.cv = threading.Condition()
        # per kind of wait, the repeated condition being counted
        self._streaks: Dict[str, _Streak] = {}
        self.repeats_logged = 0  # repeated conditions logged with their count

    def notify(self) -> None:
        with self.cv:
            self.cv.notify_all()

    def _note(self, kind: str, reason: str, message: str) -> int:
        """Log ``message`` (a warning) unless it repeats the condition of the streak of ``kind``; returns the
        streak's count."""
        st = self._streaks.get(kind)
        if st is not None and st.reason == reason:
            st.count += 1
            return st.count
        self._end_streak(kind)
        self._streaks[kind] = _Streak(reason, message, 1, time.monotonic())
        log.warning('%s', message)
        return 1

    def _end_streak(self, kind: str) -> None:
        st = self._streaks.pop(kind, None)
        if st is not None and st.count > 1:
            self.repeats_logged += 1
            log.warning('%s: %d times in a row over %.1f s (logged once)', st.message, st.count,
                        time.monotonic() - st.since)

    def flush(self) -> None:
        """Log the count of every repeated condition still going on (e.g. when the task finishes)."""
        for kind in list(self._streaks):
            self._end_streak(kind)

    def wait(self, ready: Callable[[], bool], timeout: float, give_up: Callable[[], Optional[str]],
             what: str) -> str:
        """Wait until ``ready()``; returns 'ready', 'finish', 'timeout' or the reason ``give_up()`` gave."""
        task = current_task()
        deadline = time.monotonic() + timeout
        kind = re.sub(r'\d+', 'N', what)  # the kind of wait: its description without its numbers
        with self.cv:
            while True:
                if ready():
                    self._end_streak(kind)
                    return 'ready'
                if task.finish:
                    self._end_streak(kind)
                    log.debug('stopped waiting for %s: the task finished', what)
                    return 'finish'
                reason = give_up()
                if reason:
                    n = self._note(kind, reason, f'stopped waiting for {what}: {reason}')
                    if n > 1:  # the same give-up again: back off before the caller steps again
                        pause = min(self.MAX_BACKOFF, POLL * 2 ** min(n - 2, 10), max(0.0, deadline - time.monotonic()))
                        end = time.monotonic() + pause
                        while True:
                            left = end - time.monotonic()
                            if left <= 0:
                                break
                            self.cv.wait(min(POLL, left))
                            if ready() or task.finish or give_up() != reason:
                                break
                        if ready():
                            self._end_streak(kind)
                            return 'ready'
                    return reason
                left = deadline - time.monotonic()
                if left <= 0:
                    self._note(kind, 'timeout', f'waited {timeout:.1f} s for {what}: going on without it')
                    return 'timeout'
                self.cv.wait(min(POLL, left))


def pack_rows(rows: Sequence[object]) -> object:
    """A list of same-keyed dicts -> columns (numpy rows of one shape/dtype stacked): fewer, larger wire
    items. Anything else is sent as is."""
    if not rows or not isinstance(rows[0], dict):
        return rows
    keys = list(rows[0].keys())
    if not all(isinstance(k, str) for k in keys):
        return rows
    ks = set(keys)
    if not all(type(r) is dict and r.keys() == ks for r in rows):
        return rows
    cols: Dict[str, object] = {}
    dicts = cast(Sequence[Dict[str, object]], rows)  # checked above
    for k in keys:
        vals = [r[k] for r in dicts]
        v0 = vals[0]
        if isinstance(v0, np.ndarray) and all(isinstance(v, np.ndarray) and v.shape == v0.shape
                                              and v.dtype == v0.dtype for v in vals):
            cols[k] = np.stack(cast(List[np.ndarray], vals))
        else:
            cols[k] = vals
    return {'__columns__': keys, 'n': len(rows), 'cols': cols}


def unpack_rows(packed: object) -> List[object]:
    """The inverse of ``pack_rows``."""
    if not isinstance(packed, dict) or '__columns__' not in packed:
        return list(cast(Iterable[object], packed)) if packed is not None else []  # rows sent as they were
    keys, n, cols = packed['__columns__'], int(packed['n']), packed['cols']
    columns = [cols[k] for k in keys]
    return [dict(zip(keys, (c[j] for c in columns))) for j in range(n)]
