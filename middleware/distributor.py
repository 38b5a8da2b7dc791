"""Distributed middleware: move context data and model weights between the nodes of a parallel run.

``ContextExchanger``
    Collectors send what they collected (``ctx.trajectories`` or ``ctx.episodes``) with their env-step
    and episode increments to the learner; the learner merges what arrived into its context, so that its
    ``data_pusher`` pushes it, and sends ``train_iter``/``env_step`` back to every node. Evaluators send
    their results to everybody, so every node knows ``last_eval_value`` at the end.
``ModelExchanger``
    The learner sends the model's weights (a dict of tensors, never a pickle) with a version (its
    ``train_iter``) after each train step; the other nodes load the newest version they received before
    acting.
``PeriodicalModelExchanger``
    The same with an explicit mode (``"send"``/``"receive"``), a send period in train iterations and a
    staleness bound: a receiver uses one model version for at most ``stale_toleration`` steps, then waits
    (bounded) for a newer one.

In a single process (``task.router.is_active`` is False) every exchanger is ``task.void()``: ``task.use``
skips it and it costs nothing. Build them inside ``with task.start(...)`` (the router and the node's roles
are known there), place them first in the chain::

    with task.start(ctx=OnlineRLContext()):
        task.use(ContextExchanger())
        task.use(ModelExchanger(policy.model))
        task.use(interaction_evaluator(...))
        ...

Every wait is bounded (``wait_timeout``), polls ``task.finish`` and is released by the loss of the peers it
waits for, with a log line saying what was waited for and why it ended.
"""
from __future__ import annotations

import itertools
import logging
import math
import os
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Generator, List, Mapping, Optional, Set, Tuple

from contexts import OnlineRLContext
from pipeline.contracts import Fields
from pipeline.roles import Role, for_all_roles

__all__ = ['ContextExchanger', 'ModelExchanger', 'PeriodicalModelExchanger']

log = logging.getLogger(__name__)

EV_DATA = 'ctx_exchanger.data'        # collector -> learner: collected data and increments
EV_LEARNER = 'ctx_exchanger.learner'  # learner -> all: train_iter, env_step, env_episode, acks
EV_EVAL = 'ctx_exchanger.eval'        # evaluator -> all: an evaluation result
EV_FINAL = 'ctx_exchanger.final'      # evaluator -> all: its last result, in the step where it finishes
EV_MODEL = 'model_exchanger'          # learner -> all: {'version', 'state', 'node'}
_PEER_LOST = ('__peer_dead__', '__peer_left__')
_PEER_JOINED = '__peer_joined__'
_POLL = 0.05


def _task() -> Any:
    from pipeline import task
    return task


def _inactive_void(name: str) -> Any:
    """``task.void()`` when this process has no peers (single-process run), else None."""
    task = _task()
    if not task.router.is_active:
        return task.void()
    if not task.roles:
        log.warning('%s: this node has no roles, so it runs the whole pipeline itself; nothing to exchange '
                    '(give nodes roles, e.g. rlpipe run --roles learner:collector:collector:evaluator)', name)
        return task.void()
    return None


def _peer_roles(router: Any, node_id: int) -> Set[str]:
    try:
        return {str(r) for r in router.peer_info(node_id)['roles']}
    except (KeyError, AttributeError):
        return set()


class _Waiter:
    """A condition variable whose waits are bounded, poll ``task.finish`` and log why they ended."""

    def __init__(self) -> None:
        self.cv = threading.Condition()

    def notify(self) -> None:
        with self.cv:
            self.cv.notify_all()

    def wait(self, ready: Callable[[], bool], timeout: float, give_up: Callable[[], Optional[str]],
             what: str) -> str:
        """Wait until ``ready()``; returns 'ready', 'finish', 'timeout' or the reason ``give_up()`` gave."""
        task = _task()
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
                self.cv.wait(min(_POLL, left))


# ---------------------------------------------------------------------------------------------- payloads
def _pack_rows(rows: List[Any]) -> Any:
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


def _unpack_rows(packed: Any) -> List[Any]:
    if not isinstance(packed, dict) or '__columns__' not in packed:
        return list(packed) if packed is not None else []
    keys, n, cols = packed['__columns__'], int(packed['n']), packed['cols']
    columns = [cols[k] for k in keys]
    return [dict(zip(keys, (c[j] for c in columns))) for j in range(n)]


# ---------------------------------------------------------------------------------------------- context
class ContextExchanger:
    """Exchange context data between the nodes of a parallel run (a generator middleware; place it first).

    By the node's roles:

    Collector (role COLLECTOR)
        Forward: loads the newest learner update into the context (``ctx.train_iter``; ``ctx.env_step``
        and ``ctx.env_episode`` become at least the learner's global counts, so exploration schedules
        follow the whole run), then waits until at most ``skip_n_iter`` of its batches are not yet
        consumed by the learner (backpressure: collectors never run more than ``skip_n_iter + 1`` batches
        ahead). Backward: sends ``ctx.trajectories`` (or ``ctx.episodes``), the env steps and episodes it
        added to ``ctx.env_step``/``ctx.env_episode`` in this step and the finished episodes' returns
        (``ctx.info_for_logging['collect_episode_return']``) to the learner.
    Learner (role LEARNER)
        Forward: waits (at most ``wait_timeout`` s) until some collector data arrived, then merges the
        queued batches (all, or at most ``max_merge``) into the context: writes ``ctx.trajectories`` and/or
        ``ctx.episodes`` (what the learner's ``data_pusher`` pushes), adds the increments to
        ``ctx.env_step``/``ctx.env_episode`` (each batch is counted once: batches carry a per-collector
        sequence number) and extends ``ctx.info_for_logging['collect_episode_return']``. Backward (after
        training): sends ``ctx.train_iter``, ``ctx.env_step``, ``ctx.env_episode`` and the per-collector
        count of consumed batches to every node.
    Evaluator (role EVALUATOR, not learner)
        Forward: after its first step, waits (at most ``wait_timeout`` s) for a learner update newer than
        the last one and loads ``ctx.train_iter``/``ctx.env_step``/``ctx.env_episode`` from it (so it
        evaluates at the learner's pace instead of spinning). Backward: when it evaluated in this step
        (``ctx.eval_value`` set) it sends the result to every node, and in the step where the task finishes
        it sends its final ``ctx.last_eval_value``/``ctx.last_eval_iter``.
    Every node but evaluators
        Loads the newest evaluation result into ``ctx.last_eval_value``/``ctx.last_eval_iter`` (on the
        learner also into ``ctx.eval_value``, so its ``CkptSaver`` keeps a best-eval checkpoint -- of the
        learner's current weights, slightly newer than the evaluated ones); in the step where the task
        finishes it waits at most ``final_timeout`` s for the final result of each live evaluator.

    Nothing is dropped: batches that arrive while the learner trains are queued; the queue is bounded by
    the collectors' window (``skip_n_iter + 1`` batches each); ``stats['over_limit']`` counts arrivals
    beyond ``max_queue`` (logged; they are kept). A collector's loss is logged; with
    ``on_collector_lost='finish'`` it finishes the task, with ``'continue'`` (default) the learner goes on
    with the others (and, with none left, trains on its buffer without waiting). When the learner is lost,
    collectors finish the task (there is nobody to send to).

    Args:
        skip_n_iter: batches a collector may have in flight (sent, not yet consumed) while it collects the
            next one. 0: strict alternation with the learner.
        storage: a directory shared by the nodes (same machine or shared file system): collectors write
            each batch there (safe codec, no pickle) and send only its path; the learner reads and deletes
            it. None: batches travel in the messages.
        max_merge: most batches the learner merges per step (None: all that arrived). With 1, the learner
            runs its ``update_per_collect`` updates per collected batch, as in a single process.
        wait_timeout: longest wait of one step, in seconds.
        final_timeout: longest wait for evaluators' final results when the task finishes.
        on_collector_lost: ``'continue'`` or ``'finish'``.
        max_queue: queue length above which arrivals are counted in ``stats['over_limit']`` and logged.

    In a single process this is ``task.void()``. A node with both the learner and the collector role is
    not supported (a clear error).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        void = _inactive_void(cls.__name__)
        return void if void is not None else super().__new__(cls)

    def __init__(self, skip_n_iter: int = 1, storage: Optional[str] = None, max_merge: Optional[int] = None,
                 wait_timeout: float = 10.0, final_timeout: float = 3.0, on_collector_lost: str = 'continue',
                 max_queue: int = 256) -> None:
        if not isinstance(skip_n_iter, int) or isinstance(skip_n_iter, bool) or skip_n_iter < 0:
            raise ValueError(f'ContextExchanger: skip_n_iter must be an int >= 0, got {skip_n_iter!r}')
        if max_merge is not None and (not isinstance(max_merge, int) or max_merge < 1):
            raise ValueError(f'ContextExchanger: max_merge must be None or an int >= 1, got {max_merge!r}')
        if on_collector_lost not in ('continue', 'finish'):
            raise ValueError(f"ContextExchanger: on_collector_lost must be 'continue' or 'finish', "
                             f"got {on_collector_lost!r}")
        for name, v in (('wait_timeout', wait_timeout), ('final_timeout', final_timeout)):
            if not (isinstance(v, (int, float)) and v >= 0):
                raise ValueError(f'ContextExchanger: {name} must be a number of seconds >= 0, got {v!r}')
        task = _task()
        roles = task.roles
        self.is_learner = Role.LEARNER in roles
        self.is_collector = Role.COLLECTOR in roles
        self.is_evaluator = Role.EVALUATOR in roles and not self.is_learner
        self.sends_eval = Role.EVALUATOR in roles
        if self.is_learner and self.is_collector:
            raise ValueError('ContextExchanger: this node is both learner and collector; give the roles to '
                             'different nodes (e.g. --roles learner:collector:collector:evaluator)')
        if storage is not None:
            os.makedirs(storage, exist_ok=True)
        self.skip_n_iter = skip_n_iter
        self.storage = storage
        self.max_merge = max_merge
        self.wait_timeout = float(wait_timeout)
        self.final_timeout = float(final_timeout)
        self.on_collector_lost = on_collector_lost
        self.max_queue = int(max_queue)
        self.router = task.router
        self.node_id = int(self.router.node_id)
        self._w = _Waiter()
        self.stats: Dict[str, int] = {'batches_sent': 0, 'batches_received': 0, 'batches_merged': 0,
                                      'duplicates': 0, 'over_limit': 0, 'env_steps_received': 0,
                                      'env_steps_sent': 0, 'wait_timeouts': 0, 'max_queue_seen': 0}
        # learner side
        self._queue: Deque[Tuple[int, Dict[str, Any]]] = deque()
        self._last_seq: Dict[int, int] = {}
        self._consumed: Dict[int, int] = {}
        self.received_from: Dict[int, int] = {}  # collector id -> batches received
        # collector / evaluator side
        self._update: Optional[Dict[str, Any]] = None
        self._update_n = 0
        self._applied_n = 0
        self._seq = itertools.count(1)
        self._sent = 0
        self._steps = 0
        # everybody: evaluation results
        self._eval: Optional[Dict[str, Any]] = None
        self._eval_n = 0
        self._applied_eval_n = 0
        self._finals: Dict[int, Dict[str, Any]] = {}
        # membership
        self._alive: Dict[int, Set[str]] = {}
        self._lost: Set[int] = set()
        self._warned_alone = False
        for p in list(getattr(self.router, 'peers', ()) or ()):
            self._alive[p] = _peer_roles(self.router, p)
        task.on(EV_DATA, self._on_data)
        task.on(EV_LEARNER, self._on_learner)
        task.on(EV_EVAL, self._on_eval)
        task.on(EV_FINAL, self._on_final)
        for ev in _PEER_LOST:
            task.on(ev, self._on_lost)
        task.on(_PEER_JOINED, self._on_joined)

    # ----------------------------------------------------------------- membership
    def _with_role(self, role: str) -> List[int]:
        return [i for i, r in self._alive.items() if role in r]

    def _on_joined(self, node_id: int, *_: Any, **__: Any) -> None:
        with self._w.cv:
            self._alive[int(node_id)] = _peer_roles(self.router, int(node_id))
            self._lost.discard(int(node_id))
            self._w.cv.notify_all()

    def _on_lost(self, node_id: int, *_: Any, **__: Any) -> None:
        node_id = int(node_id)
        with self._w.cv:
            roles = self._alive.pop(node_id, None)
            if roles is None:
                return
            self._lost.add(node_id)
            self._w.cv.notify_all()
        task = _task()
        if task.finish:
            log.info('ContextExchanger: node %d left (the task is finishing)', node_id)
            return
        if self.is_learner and 'collector' in roles:
            left = self._with_role('collector')
            if self.on_collector_lost == 'finish':
                log.error('ContextExchanger: collector node %d is lost; finishing the task '
                          "(on_collector_lost='finish')", node_id)
                task.finish = True
            else:
                log.warning('ContextExchanger: collector node %d is lost; the learner goes on with %s', node_id,
                            f'collectors {left}' if left else 'no collector (training on its buffer only)')
        elif 'learner' in roles and (self.is_collector or self.is_evaluator) and not self._with_role('learner'):
            log.error('ContextExchanger: learner node %d is lost and no learner is left; finishing the task',
                      node_id)
            task.finish = True

    # ----------------------------------------------------------------- listeners (router thread)
    def _on_data(self, batch: Dict[str, Any]) -> None:
        sender, seq = int(batch['node']), int(batch['seq'])
        with self._w.cv:
            if seq <= self._last_seq.get(sender, 0):
                self.stats['duplicates'] += 1
                log.warning('ContextExchanger: batch %d of node %d arrived twice; counted once', seq, sender)
                return
            self._last_seq[sender] = seq
            if sender not in self._alive:
                self._alive[sender] = _peer_roles(self.router, sender) or {'collector'}
            self._queue.append((sender, batch))
            self.stats['batches_received'] += 1
            self.received_from[sender] = self.received_from.get(sender, 0) + 1
            n = len(self._queue)
            if n > self.stats['max_queue_seen']:
                self.stats['max_queue_seen'] = n
            if n > self.max_queue:
                self.stats['over_limit'] += 1
                if self.stats['over_limit'] in (1, 10, 100) or self.stats['over_limit'] % 1000 == 0:
                    log.warning('ContextExchanger: %d batches queued (over max_queue=%d, %d times so far); '
                                'kept, the learner falls behind its collectors', n, self.max_queue,
                                self.stats['over_limit'])
            self._w.cv.notify_all()

    def _on_learner(self, update: Dict[str, Any]) -> None:
        with self._w.cv:
            self._update = update
            self._update_n += 1
            self._w.cv.notify_all()

    def _on_eval(self, result: Dict[str, Any]) -> None:
        with self._w.cv:
            self._eval = result
            self._eval_n += 1
            self._w.cv.notify_all()

    def _on_final(self, result: Dict[str, Any]) -> None:
        with self._w.cv:
            self._finals[int(result['node'])] = result
            self._w.cv.notify_all()

    # ----------------------------------------------------------------- the middleware
    def __fields__(self, roles: Set[Any]) -> Fields:
        """The context fields it fills on this node from what the other nodes sent (see the class doc)."""
        counters = ["env_step", "env_episode", "last_eval_value", "last_eval_iter"]
        if self.is_learner:
            received = ["trajectories", "episodes", "info_for_logging", "eval_value"] + counters
            return Fields.of(reads=["train_iter"], writes=received, owner="ContextExchanger")
        return Fields.of(reads=["trajectories?", "episodes?"], writes=["train_iter"] + counters,
                         owner="ContextExchanger")

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        if self.is_learner:
            return self._learner_step(ctx)
        if self.is_collector:
            return self._collector_step(ctx)
        if self.is_evaluator:
            return self._evaluator_step(ctx)
        return self._other_step(ctx)

    def _learner_step(self, ctx: OnlineRLContext) -> Generator:
        self._learner_forward(ctx)
        self._apply_eval(ctx)
        yield
        task = _task()
        self._send_update(ctx)
        if self.sends_eval:
            self._send_eval(ctx)
        if task.finish:
            self._final_wait(ctx)
            self._log_stats()

    def _log_stats(self) -> None:
        log.info('%r at finish: %s; batches received per collector %s', self,
                 ', '.join(f'{k} {v}' for k, v in self.stats.items()), self.received_from or '-')

    def _learner_forward(self, ctx: OnlineRLContext) -> None:
        task = _task()
        if not self._queue and not task.finish:
            def give_up() -> Optional[str]:
                if not self._with_role('collector') and self._last_seq:
                    return 'no collector is alive'
                return None

            if self._with_role('collector') or not self._last_seq:
                why = self._w.wait(lambda: bool(self._queue), self.wait_timeout, give_up, 'collector data')
                if why == 'timeout':
                    self.stats['wait_timeouts'] += 1
            elif not self._warned_alone:
                self._warned_alone = True
                log.warning('ContextExchanger: no collector alive; the learner trains on its buffer only')
        with self._w.cv:
            n = len(self._queue) if self.max_merge is None else min(self.max_merge, len(self._queue))
            batches = [self._queue.popleft() for _ in range(n)]
        if not batches:
            return
        trajectories: List[Any] = []
        episodes: List[Any] = []
        returns: List[float] = []
        lengths: List[int] = []
        d_step = d_episode = 0
        for sender, b in batches:
            if 'file' in b:
                b = self._read_file(b)
            if b.get('trajectories') is not None:
                trajectories.extend(_unpack_rows(b['trajectories']))
            if b.get('episodes') is not None:
                episodes.extend(_unpack_rows(e) for e in b['episodes'])
            returns.extend(b.get('episode_return') or ())
            lengths.extend(b.get('episode_length') or ())
            d_step += int(b['env_step'])
            d_episode += int(b['env_episode'])
            self._consumed[sender] = self._consumed.get(sender, 0) + 1
        if trajectories:
            ctx.trajectories = (list(ctx.trajectories) + trajectories) if ctx.trajectories else trajectories
        if episodes:
            ctx.episodes = (list(ctx.episodes) + episodes) if ctx.episodes else episodes
        ctx.env_step += d_step
        ctx.env_episode += d_episode
        if returns:
            info = ctx.info_for_logging
            info.setdefault('collect_episode_return', []).extend(returns)
            info.setdefault('collect_episode_length', []).extend(lengths)
        self.stats['batches_merged'] += len(batches)
        self.stats['env_steps_received'] += d_step

    def _read_file(self, b: Dict[str, Any]) -> Dict[str, Any]:
        from pipeline.parallel import codec

        path = b['file']
        with open(path, 'rb') as f:
            data = codec.loads(f.read())
        os.remove(path)
        return data

    def _send_update(self, ctx: OnlineRLContext) -> None:
        task = _task()
        task.emit(EV_LEARNER, {'node': self.node_id, 'train_iter': int(ctx.train_iter),
                               'env_step': int(ctx.env_step), 'env_episode': int(ctx.env_episode),
                               'acks': dict(self._consumed)}, only_remote=True)

    def _apply_update(self, ctx: OnlineRLContext) -> None:
        with self._w.cv:
            u, n = self._update, self._update_n
        if u is None or n == self._applied_n:
            return
        self._applied_n = n
        ctx.train_iter = int(u['train_iter'])
        if u['env_step'] > ctx.env_step:
            ctx.env_step = int(u['env_step'])
        if u['env_episode'] > ctx.env_episode:
            ctx.env_episode = int(u['env_episode'])

    def _apply_eval(self, ctx: OnlineRLContext) -> None:
        with self._w.cv:
            e, n = self._eval, self._eval_n
        if e is None or n == self._applied_eval_n:
            return
        self._applied_eval_n = n
        ctx.last_eval_value = float(e['eval_value'])
        ctx.last_eval_iter = int(e['train_iter'])
        if self.is_learner and not self.sends_eval:
            ctx.eval_value = ctx.last_eval_value  # e.g. CkptSaver keeps the best-eval checkpoint

    def _unacked(self) -> int:
        u = self._update
        acked = int(u['acks'].get(self.node_id, 0)) if u is not None else 0
        return self._sent - acked

    def _collector_step(self, ctx: OnlineRLContext) -> Generator:
        task = _task()
        if self._sent and self._unacked() > self.skip_n_iter and not task.finish:
            def give_up() -> Optional[str]:
                return None if self._with_role('learner') else 'no learner is alive'

            why = self._w.wait(lambda: self._unacked() <= self.skip_n_iter, self.wait_timeout, give_up,
                               f'the learner to consume batches (node {self.node_id} has {self._unacked()} in '
                               f'flight, window {self.skip_n_iter + 1})')
            if why == 'timeout':
                self.stats['wait_timeouts'] += 1
        self._apply_update(ctx)
        self._apply_eval(ctx)
        step0, episode0 = ctx.env_step, ctx.env_episode
        info = ctx.info_for_logging
        n_ret0 = len(info.get('collect_episode_return', ()))
        yield
        d_step, d_episode = ctx.env_step - step0, ctx.env_episode - episode0
        traj, eps = ctx.trajectories, ctx.episodes
        learners = self._with_role('learner')
        if learners and (d_step or d_episode or traj or eps):
            info = ctx.info_for_logging
            batch: Dict[str, Any] = {
                'env_step': int(d_step), 'env_episode': int(d_episode),
                'trajectories': _pack_rows(list(traj)) if traj else None,
                'episodes': [_pack_rows(list(e)) for e in eps] if eps else None,
                'episode_return': [float(x) for x in info.get('collect_episode_return', ())[n_ret0:]],
                'episode_length': [int(x) for x in info.get('collect_episode_length', ())[n_ret0:]],
            }
            seq = next(self._seq)
            if self.storage is not None:
                from pipeline.parallel import codec

                path = os.path.join(self.storage, f'ctx-{self.node_id}-{os.getpid()}-{seq}.rlp')
                with open(path + '.tmp', 'wb') as f:
                    f.write(codec.dumps(batch))
                os.replace(path + '.tmp', path)
                batch = {'file': path}
            batch['node'] = self.node_id
            batch['seq'] = seq
            for learner in learners:
                task.emit_to(learner, EV_DATA, batch)
            self._sent += 1
            self.stats['batches_sent'] += 1
            self.stats['env_steps_sent'] += int(d_step)
        if task.finish:
            self._final_wait(ctx)
            self._log_stats()

    def _evaluator_step(self, ctx: OnlineRLContext) -> Generator:
        task = _task()
        if self._steps and not task.finish:
            def give_up() -> Optional[str]:
                return None if self._with_role('learner') else 'no learner is alive'

            seen = self._applied_n
            self._w.wait(lambda: self._update_n != seen, self.wait_timeout, give_up, 'a learner update')
        self._steps += 1
        self._apply_update(ctx)
        yield
        self._send_eval(ctx)

    def _send_eval(self, ctx: OnlineRLContext) -> None:
        """Evaluator: send this step's evaluation (if any) and, when finishing, the final result."""
        task = _task()
        ev = getattr(ctx, 'eval_value', None)
        if ev is not None and ev > -math.inf:
            task.emit(EV_EVAL, {'node': self.node_id, 'eval_value': float(ev), 'train_iter': int(ctx.train_iter),
                                'env_step': int(ctx.env_step)}, only_remote=True)
        if task.finish:
            task.emit(EV_FINAL, {'node': self.node_id, 'eval_value': float(ctx.last_eval_value),
                                 'train_iter': int(ctx.last_eval_iter)}, only_remote=True)

    def _other_step(self, ctx: OnlineRLContext) -> Generator:
        self._apply_update(ctx)
        self._apply_eval(ctx)
        yield
        if _task().finish:
            self._final_wait(ctx)

    def _final_wait(self, ctx: OnlineRLContext) -> None:
        """In the finishing step: wait (bounded) for every live evaluator's final result, then load it."""
        evaluators = [i for i, r in self._alive.items() if 'evaluator' in r]
        if not evaluators:
            self._apply_eval(ctx)
            return
        deadline = time.monotonic() + self.final_timeout
        with self._w.cv:
            while True:
                missing = [i for i in evaluators if i not in self._finals and i in self._alive]
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    break
                self._w.cv.wait(min(_POLL, left))
        if missing:
            log.info('ContextExchanger: no final evaluation result from node(s) %s within %.1f s', missing,
                     self.final_timeout)
        self._apply_eval(ctx)
        finals = [self._finals[i] for i in evaluators if i in self._finals]
        best = max(finals, key=lambda r: r['train_iter'], default=None)
        if best is not None and best['train_iter'] >= ctx.last_eval_iter:
            ctx.last_eval_value = float(best['eval_value'])
            ctx.last_eval_iter = int(best['train_iter'])

    def __repr__(self) -> str:
        role = 'learner' if self.is_learner else 'collector' if self.is_collector else \
            'evaluator' if self.is_evaluator else 'other'
        return f'ContextExchanger(node {self.node_id}, {role}, skip_n_iter={self.skip_n_iter})'


# ---------------------------------------------------------------------------------------------- model
@for_all_roles(reads=["train_iter"])
class PeriodicalModelExchanger:
    """Send a model's weights from one node, load them on the others (a generator middleware).

    ``mode='send'`` (the learner): in the backward part of the first step and then whenever
    ``ctx.train_iter`` advanced by at least ``period`` since the last send, sends the model's
    ``state_dict()`` (a dict of tensors; the safe codec carries no pickles) with ``version = ctx.train_iter``
    to every node.

    ``mode='receive'``: keeps the newest version that arrived; the forward part loads it into ``model``
    before the node acts (when it is newer than the loaded one). With ``stale_toleration=N``, one version is
    used for at most N steps: then the node waits (at most ``wait_timeout`` s, released by finish and by
    the loss of every sender) for a newer one. ``None``: never wait. A collector that waits sends no data
    meanwhile: if the learner needs that data to reach its next send (one collector, ``period`` larger than
    the batches the collector has in flight), the wait only ends by its timeout; keep ``stale_toleration``
    at least ``period + skip_n_iter + 1`` in that case.

    Reads ``ctx.train_iter`` (sender). Writes nothing to the context; ``self.version`` is the loaded (or
    sent) version, ``self.stats`` counts sends, loads and waits. In a single process it is
    ``task.void()``.
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        void = _inactive_void(cls.__name__)
        return void if void is not None else super().__new__(cls)

    def __init__(self, model: Any, mode: str = 'receive', period: int = 1, stale_toleration: Optional[int] = None,
                 wait_timeout: float = 10.0, event_name: str = EV_MODEL) -> None:
        if not hasattr(model, 'state_dict') or not hasattr(model, 'load_state_dict'):
            raise TypeError(f'{type(self).__name__}: model must be a torch.nn.Module (state_dict/load_state_dict); '
                            f'got {type(model).__name__}')
        if mode not in ('send', 'receive'):
            raise ValueError(f"{type(self).__name__}: mode must be 'send' or 'receive', got {mode!r}")
        if not isinstance(period, int) or isinstance(period, bool) or period < 1:
            raise ValueError(f'{type(self).__name__}: period must be an int >= 1 (train iterations), got {period!r}')
        if stale_toleration is not None and (not isinstance(stale_toleration, int) or stale_toleration < 1):
            raise ValueError(f'{type(self).__name__}: stale_toleration must be None or an int >= 1, '
                             f'got {stale_toleration!r}')
        task = _task()
        self.model = model
        self.mode = mode
        self.period = period
        self.stale_toleration = stale_toleration
        self.wait_timeout = float(wait_timeout)
        self.event_name = event_name
        self.router = task.router
        self.node_id = int(self.router.node_id)
        self.version = -1
        self.stats: Dict[str, int] = {'sent': 0, 'received': 0, 'loaded': 0, 'waits': 0, 'wait_timeouts': 0}
        self._w = _Waiter()
        self._newest: Optional[Tuple[int, Dict[str, Any]]] = None
        self._uses = 0
        self._senders: Set[int] = set()
        self._had_sender = False
        if mode == 'receive':
            task.on(event_name, self._on_model)
            for ev in _PEER_LOST:
                task.on(ev, self._on_lost)

    def _on_model(self, msg: Dict[str, Any]) -> None:
        version = int(msg['version'])
        with self._w.cv:
            self.stats['received'] += 1
            self._senders.add(int(msg['node']))
            self._had_sender = True
            if self._newest is None or version > self._newest[0]:
                self._newest = (version, msg['state'])
            self._w.cv.notify_all()

    def _on_lost(self, node_id: int, *_: Any, **__: Any) -> None:
        with self._w.cv:
            self._senders.discard(int(node_id))
            self._w.cv.notify_all()

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        return self._send_step(ctx) if self.mode == 'send' else self._receive_step(ctx)

    def _send_step(self, ctx: OnlineRLContext) -> Generator:
        yield
        it = int(ctx.train_iter)
        if self.version < 0 or it - self.version >= self.period:
            state = {k: v.detach() for k, v in self.model.state_dict().items()}
            _task().emit(self.event_name, {'node': self.node_id, 'version': it, 'state': state}, only_remote=True)
            self.version = it
            self.stats['sent'] += 1

    def _newer(self) -> bool:
        return self._newest is not None and self._newest[0] > self.version

    def _receive_step(self, ctx: OnlineRLContext) -> Generator:
        task = _task()
        if (self.stale_toleration is not None and self._uses >= self.stale_toleration and not self._newer()
                and not task.finish):
            self.stats['waits'] += 1

            def give_up() -> Optional[str]:
                return 'the model sender is gone' if self._had_sender and not self._senders else None

            why = self._w.wait(self._newer, self.wait_timeout, give_up,
                               f'a model newer than version {self.version} (stale_toleration '
                               f'{self.stale_toleration})')
            if why == 'timeout':
                self.stats['wait_timeouts'] += 1
        with self._w.cv:
            newest = self._newest if self._newer() else None
        if newest is not None:
            self.model.load_state_dict(newest[1])
            self.version = newest[0]
            self.stats['loaded'] += 1
            self._uses = 0
        self._uses += 1
        yield

    def __repr__(self) -> str:
        return f'{type(self).__name__}(node {self.node_id}, mode={self.mode!r}, version {self.version})'


class ModelExchanger(PeriodicalModelExchanger):
    """``PeriodicalModelExchanger`` with the mode from the node's roles: the learner sends its model's
    weights after every train step (``period=1``), every other node loads the newest version it received
    before acting. ``stale_toleration`` as in ``PeriodicalModelExchanger``. In a single process it is
    ``task.void()``."""

    def __init__(self, model: Any, stale_toleration: Optional[int] = None, wait_timeout: float = 10.0,
                 period: int = 1) -> None:
        mode = 'send' if Role.LEARNER in _task().roles else 'receive'
        super().__init__(model, mode=mode, period=period, stale_toleration=stale_toleration,
                         wait_timeout=wait_timeout)
