"""``ContextExchanger``: the part every role shares (arguments, membership, learner updates, evaluation
results). Each role's steps live in their own module: ``context_learner``, ``context_collector`` and
``context_evaluator``; ``ContextExchanger(...)`` builds the one that fits the node's roles."""
from __future__ import annotations

import math
import os
import time
from typing import Any, ClassVar, Collection, Dict, Generator, List, Optional, Set

from contexts import OnlineRLContext
from pipeline.runtime.contracts import Fields
from pipeline.runtime.node import restarts_expected
from pipeline.runtime.roles import Role

from .shared import (EV_EVAL, EV_FINAL, EV_LEARNER, POLL, EvalMsg, LearnerMsg, Newest, PeerTable, Waiter,
                     current_task, exchanger_roles, inactive_void, log)


class ContextExchanger:
    """Exchange context data between the nodes of a parallel run (a generator middleware; place it first).

    By the node's roles:

    Collector (role COLLECTOR)
        Forward: loads the newest learner update into the context (``ctx.train_iter``; ``ctx.env_step``
        and ``ctx.env_episode`` become at least the learner's global counts, so exploration schedules
        follow the whole run), then waits until at most ``skip_n_iter`` of its batches are not yet
        consumed by the learner (backpressure: collectors never run more than ``skip_n_iter + 1`` batches
        ahead). Backward: sends ``ctx.transitions`` (or ``ctx.episodes``), the env steps and episodes it
        added to ``ctx.env_step``/``ctx.env_episode`` in this step and the finished episodes' returns
        (``ctx.info_for_logging['collect_episode_return']``) to the learner.
    Learner (role LEARNER)
        Forward: waits (at most ``wait_timeout`` s) until some collector data arrived, then merges the
        queued batches (all, or at most ``max_merge``) into the context: writes ``ctx.transitions`` and/or
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
    with the others. With none left (every collector that delivered was lost), the learner does not train on
    its stale data in a loop: each step waits (``wait_timeout``) for a collector to come back, and after
    ``collector_timeout`` s without one it finishes the task (logged), unless the launcher restarts nodes
    (``--auto-recover``, Ray's ``--max-restarts``): then it waits for the restart. A learner declared dead
    (silent past the bus's heartbeat timeout) may come back (the bus revives it when it sends again):
    meanwhile collectors keep what they collect (at most ``max_kept`` batches each, the oldest dropped beyond
    that; ``stats['batches_kept']``, ``stats['kept_dropped']``, logged) and deliver it, in order, once a
    learner is back. Collectors and evaluators finish the task when the learner said goodbye, or when none
    came back within ``learner_timeout`` s, unless the launcher restarts nodes (``rlpipe run --backend ray
    --max-restarts N``): then they wait for it, and a restarted learner (a new incarnation, resumed from its
    checkpoint) gets their batches counted anew.

    Args:
        skip_n_iter: batches a collector may have in flight (sent, not yet consumed) while it collects the
            next one. 0: strict alternation with the learner.
        storage: a directory shared by the nodes (same machine or shared file system; give it to every
            node's exchanger): collectors write each batch there (safe codec, no pickle) and send only its
            file name; the learner reads and deletes it. The learner opens and removes only batch files
            (``ctx-*.rlp``, regular files, no symlinks) directly inside its own ``storage``; any other file a
            message names is refused, counted in ``stats['refused_files']`` and logged. None: batches travel
            in the messages.
        max_merge: most batches the learner merges per step (None: all that arrived). With 1, the learner
            runs its ``update_per_collect`` updates per collected batch, as in a single process.
        wait_timeout: longest wait of one step, in seconds.
        final_timeout: longest wait for evaluators' final results when the task finishes.
        on_collector_lost: ``'continue'`` or ``'finish'``.
        max_queue: queue length above which arrivals are counted in ``stats['over_limit']`` and logged.
        learner_timeout: how long collectors and evaluators wait for a learner declared dead to come back.
        collector_timeout: how long a learner left without any live collector waits for one to come back
            before it finishes the task (not when the launcher restarts nodes).
        max_kept: most batches a collector keeps while no learner is alive.

    In a single process this is ``task.void()``. A node with both the learner and the collector role is
    not supported (a clear error).
    """

    role_name = 'other'

    #: role -> the subclass that plays it; each side registers itself with ``class ...(ContextExchanger,
    #: side=Role.X)`` when its module is imported (the package ``middleware.exchange`` imports all three)
    sides: ClassVar[Dict[Role, type]] = {}

    def __init_subclass__(cls, side: Optional[Role] = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if side is not None:
            ContextExchanger.sides[side] = cls

    # loosely typed: in a single process it returns task.void(), not an instance (which mypy requires of __new__)
    def __new__(cls, *args: object, **kwargs: object) -> Any:
        void = inactive_void('ContextExchanger')
        if void is not None:
            return void
        if cls is ContextExchanger:
            cls = _side_for(current_task().roles)
        return super().__new__(cls)

    def __init__(self, skip_n_iter: int = 1, storage: Optional[str] = None, max_merge: Optional[int] = None,
                 wait_timeout: float = 10.0, final_timeout: float = 3.0, on_collector_lost: str = 'continue',
                 max_queue: int = 256, learner_timeout: float = 120.0, max_kept: int = 64,
                 collector_timeout: float = 120.0) -> None:
        if not isinstance(skip_n_iter, int) or isinstance(skip_n_iter, bool) or skip_n_iter < 0:
            raise ValueError(f'ContextExchanger: skip_n_iter must be an int >= 0, got {skip_n_iter!r}')
        if max_merge is not None and (not isinstance(max_merge, int) or max_merge < 1):
            raise ValueError(f'ContextExchanger: max_merge must be None or an int >= 1, got {max_merge!r}')
        if on_collector_lost not in ('continue', 'finish'):
            raise ValueError(f"ContextExchanger: on_collector_lost must be 'continue' or 'finish', "
                             f"got {on_collector_lost!r}")
        if not isinstance(max_kept, int) or isinstance(max_kept, bool) or max_kept < 1:
            raise ValueError(f'ContextExchanger: max_kept must be an int >= 1, got {max_kept!r}')
        for name, v in (('wait_timeout', wait_timeout), ('final_timeout', final_timeout),
                        ('learner_timeout', learner_timeout), ('collector_timeout', collector_timeout)):
            if not (isinstance(v, (int, float)) and v >= 0):
                raise ValueError(f'ContextExchanger: {name} must be a number of seconds >= 0, got {v!r}')
        task = current_task()
        self.is_learner, self.is_collector, self.sends_eval = exchanger_roles('ContextExchanger')
        self.is_evaluator = self.sends_eval and not self.is_learner
        if storage is not None:
            os.makedirs(storage, exist_ok=True)
        self.skip_n_iter = skip_n_iter
        self.storage = storage
        self.max_merge = max_merge
        self.wait_timeout = float(wait_timeout)
        self.final_timeout = float(final_timeout)
        self.on_collector_lost = on_collector_lost
        self.max_queue = int(max_queue)
        self.learner_timeout = float(learner_timeout)
        self.collector_timeout = float(collector_timeout)
        self.max_kept = max_kept
        self._learner_gone_since: Optional[float] = None  # when the last learner was declared dead
        self.router = task.router
        self.node_id = int(self.router.node_id)
        # this process's incarnation of the node: a node restarted with the same node id starts anew
        self.incarnation = int(getattr(self.router, 'session', 0) or os.getpid())
        self._w = Waiter()
        self.stats: Dict[str, int] = {'batches_sent': 0, 'batches_received': 0, 'batches_merged': 0,
                                      'duplicates': 0, 'over_limit': 0, 'env_steps_received': 0,
                                      'env_steps_sent': 0, 'wait_timeouts': 0, 'max_queue_seen': 0}
        # the newest learner update (collectors, evaluators, other nodes)
        self._updates: Newest[LearnerMsg] = Newest(self._w)
        # everybody: evaluation results
        self._evals: Newest[EvalMsg] = Newest(self._w)
        self._finals: Dict[int, EvalMsg] = {}
        # membership
        self._peers = PeerTable(self.router, self._w, on_lost=self._on_lost)
        self._alive, self._lost = self._peers.alive, self._peers.lost
        self._listen()

    def _listen(self) -> None:
        task = current_task()
        task.on(EV_LEARNER, self._updates.put)
        task.on(EV_EVAL, self._evals.put)
        task.on(EV_FINAL, self._on_final)
        self._peers.listen(task)

    # ----------------------------------------------------------------- membership
    def _with_role(self, role: str) -> List[int]:
        return self._peers.with_role(role)

    def _on_lost(self, node_id: int, roles: Set[str], dead: bool = False) -> None:
        """A live peer was lost (the peer table has dropped it): it said goodbye, or was declared dead
        (``dead``: it may come back, and the bus then revives it: the table has it alive again)."""
        if current_task().finish:
            log.debug('ContextExchanger: node %d left (the task is finishing)', node_id)
            return
        self._peer_lost(node_id, roles, dead)

    def _peer_lost(self, node_id: int, roles: Set[str], dead: bool = False) -> None:
        """React to the loss of a peer with ``roles`` (not called while the task finishes)."""

    def _finish_if_no_learner(self, node_id: int, roles: Set[str], dead: bool = False) -> None:
        """The last learner is gone: finish if it said goodbye; if it was declared dead, wait for it to come
        back (``learner_timeout``, checked each step by ``_learner_timed_out``)."""
        if 'learner' not in roles or self._with_role('learner'):
            return
        if restarts_expected():
            log.warning('ContextExchanger: learner node %d is lost; waiting for the launcher to restart it '
                        '(it ends the job if it cannot)', node_id)
        elif not dead:
            log.error('ContextExchanger: learner node %d left and no learner is left; finishing the task', node_id)
            current_task().finish = True
            return
        if self._learner_gone_since is None:
            self._learner_gone_since = time.monotonic()
            if dead and not restarts_expected():
                log.warning('ContextExchanger: learner node %d is not answering (declared dead); waiting up to '
                            '%.0f s for a learner to come back (learner_timeout)%s', node_id, self.learner_timeout,
                            '; collected batches are kept meanwhile' if self.is_collector else '')

    def _learner_timed_out(self) -> bool:
        """Called once per step: logs a learner's return; finishes the task when none came back within
        ``learner_timeout``."""
        since = self._learner_gone_since
        if since is None:
            return False
        back = self._with_role('learner')
        if back:
            log.warning('ContextExchanger: learner node %s is back after %.1f s', back[0], time.monotonic() - since)
            self._learner_gone_since = None
            return False
        if restarts_expected() or time.monotonic() - since < self.learner_timeout:
            return False
        log.error('ContextExchanger: no learner came back within %.0f s (learner_timeout); finishing the task',
                  self.learner_timeout)
        current_task().finish = True
        return True

    # ----------------------------------------------------------------- listeners (router thread)
    def _on_final(self, result: EvalMsg) -> None:
        with self._w.cv:
            self._finals[int(result['node'])] = result
            self._w.cv.notify_all()

    # ----------------------------------------------------------------- the middleware
    def __fields__(self, roles: Set[object]) -> Fields:
        """The context fields it fills on this node from what the other nodes sent (see the class doc)."""
        counters = ["env_step", "env_episode", "last_eval_value", "last_eval_iter"]
        if self.is_learner:
            received = ["transitions", "episodes", "info_for_logging", "eval_value"] + counters
            return Fields.of(reads=["train_iter"], writes=received, owner="ContextExchanger")
        return Fields.of(reads=["transitions?", "episodes?"], writes=["train_iter"] + counters,
                         owner="ContextExchanger")

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        """A node with none of the learner, collector, evaluator roles: follows updates and results."""
        self._apply_update(ctx)
        self._apply_eval(ctx)
        yield
        if current_task().finish:
            self._final_wait(ctx)
            self._w.flush()

    def _log_stats(self) -> None:
        self._w.flush()
        log.debug('%r at finish: %s; batches received per collector %s', self,
                 ', '.join(f'{k} {v}' for k, v in self.stats.items()), getattr(self, 'received_from', None) or '-')

    def _apply_update(self, ctx: OnlineRLContext) -> None:
        u = self._updates.take()
        if u is None:
            return
        ctx.train_iter = int(u['train_iter'])
        if u['env_step'] > ctx.env_step:
            ctx.env_step = int(u['env_step'])
        if u['env_episode'] > ctx.env_episode:
            ctx.env_episode = int(u['env_episode'])

    def _apply_eval(self, ctx: OnlineRLContext) -> None:
        e = self._evals.take()
        if e is None:
            return
        ctx.last_eval_value = float(e['eval_value'])
        ctx.last_eval_iter = int(e['train_iter'])
        if self.is_learner and not self.sends_eval:
            ctx.eval_value = ctx.last_eval_value  # e.g. CkptSaver keeps the best-eval checkpoint

    def _send_eval(self, ctx: OnlineRLContext) -> None:
        """Evaluator: send this step's evaluation (if any) and, when finishing, the final result."""
        task = current_task()
        ev = getattr(ctx, 'eval_value', None)
        if ev is not None and ev > -math.inf:
            task.emit(EV_EVAL, {'node': self.node_id, 'eval_value': float(ev), 'train_iter': int(ctx.train_iter),
                                'env_step': int(ctx.env_step)}, only_remote=True)
        if task.finish:
            task.emit(EV_FINAL, {'node': self.node_id, 'eval_value': float(ctx.last_eval_value),
                                 'train_iter': int(ctx.last_eval_iter)}, only_remote=True)

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
                self._w.cv.wait(min(POLL, left))
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
        return f'ContextExchanger(node {self.node_id}, {self.role_name}, skip_n_iter={self.skip_n_iter})'


def _side_for(roles: Collection[object]) -> type:
    """The ``ContextExchanger`` subclass for a node with ``roles`` (learner before collector before evaluator)."""
    for role in (Role.LEARNER, Role.COLLECTOR, Role.EVALUATOR):
        if role in roles and role in ContextExchanger.sides:
            return ContextExchanger.sides[role]
    return ContextExchanger
