"""``RolloutExchanger``: synchronous on-policy training over the bus (weights out, rollouts in).

Each round: the learner sends its model's weights (``state_dict()`` tensors, with the model's
running statistics) tagged with a version; every collector loads them, collects one rollout and
sends it back tagged with the version it acted with; the learner waits for one rollout of the
current version from each live collector (the "rollout set"), trains once on all of them and sends
the next version. A rollout made with any other version is refused and counted
(``stats['stale_refused']``), never trained on. Evaluators load each new version and send their
results to every node.

In a single process (``task.router.is_active`` is False) it is ``task.void()``. Place it first.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, Optional, Set, TypedDict

import numpy as np

from pipeline.runtime.contracts import Fields

from .shared import (POLL, EvalMsg, Newest, PeerTable, StateModel, Waiter, current_task, exchanger_roles, host_state,
                     inactive_void, peer_roles)

if TYPE_CHECKING:
    import torch

    from contexts import OnlineRLContext

__all__ = ['RolloutExchanger']

log = logging.getLogger('middleware.onpolicy_exchanger')

EV_WEIGHTS = 'onpolicy.weights'   # learner -> all: {'node', 'version', 'state', 'train_iter', 'env_step', ...}
EV_ROLLOUT = 'onpolicy.rollout'   # collector -> learner: {'node', 'version', 'rollout', increments, returns}
EV_EVAL = 'onpolicy.eval'         # evaluator -> all: {'eval_value', 'train_iter'}


class _WeightsMsg(TypedDict):
    """The learner's weights (``EV_WEIGHTS``), with its counters."""

    node: int
    version: int
    state: Dict[str, torch.Tensor]
    train_iter: int
    env_step: int
    env_episode: int


class _RolloutMsg(TypedDict):
    """A collector's rollout (``EV_ROLLOUT``) made with weights ``version``, with its increments."""

    node: int
    version: int
    rollout: Dict[str, np.ndarray]
    env_step: int
    env_episode: int
    episode_return: List[float]
    episode_length: List[int]


class RolloutExchanger:
    """Synchronous on-policy exchange (a generator middleware; place it first in the chain).

    Learner (role LEARNER)
        Forward: on the first step sends version 0 of the weights; then waits (up to
        ``wait_timeout`` s per attempt, logging each expiry, released by ``task.finish``) until every
        live collector has delivered a rollout of the current version, merges them along the env
        axis into ``ctx.rollout`` and adds their env steps/episodes to ``ctx.env_step`` /
        ``ctx.env_episode``. If the wait expires with some rollouts, it trains on those
        (``stats['partial_sets']``); with none, ``ctx.rollout`` stays None (nothing trained).
        Backward: when this step trained (``ctx.train_iter`` advanced), sends the next version.
    Collector (role COLLECTOR)
        Forward: waits (up to ``wait_timeout`` s) for a version newer than the one it last used and
        loads it (``ctx.train_iter``/``ctx.env_step`` follow the learner's). Backward: sends
        ``ctx.rollout`` tagged with that version and its env-step/episode increments and returns.
        With no learner alive (paused past the heartbeat timeout, or gone) the rollout is kept
        (``stats['rollouts_kept']``, logged) and sent as soon as the bus sees a learner alive again,
        from the forward wait (``stats['kept_sent']``); the learner then takes it only if it is still
        of the current version, like any other rollout. Only the newest one is kept (the learner takes
        at most one rollout per collector and version): a kept rollout is dropped, counted in
        ``stats['kept_dropped']`` and logged, when a newer rollout replaces it, when newer weights show
        the learner has moved past its version, or when the run finishes before a learner is back. A
        rollout made when the run has finished and the learner is gone is not kept
        (``stats['unsent_at_finish']``).
    Evaluator (role EVALUATOR, not learner)
        Forward: waits (up to ``wait_timeout`` s) for a new version and loads it (``ctx.train_iter``
        becomes the learner's). Backward: sends ``ctx.eval_value`` when it evaluated this step.
    Every node loads the newest evaluation into ``ctx.last_eval_value``/``ctx.last_eval_iter``.

    Args:
        model: the ``nn.Module`` whose ``state_dict`` is exchanged (e.g. ``PPOPolicy.model``).
        wait_timeout: longest single wait, seconds.
        resend_interval: while the learner waits for a collector's rollout, it sends the current weights
            again every this many seconds (a message sent before a peer connected is lost).
    """

    # loosely typed: in a single process it returns task.void(), not an instance (which mypy requires of __new__)
    def __new__(cls, *args: object, **kwargs: object) -> Any:
        void = inactive_void(cls.__name__)
        return void if void is not None else super().__new__(cls)

    def __init__(self, model: StateModel, wait_timeout: float = 30.0, resend_interval: float = 1.0) -> None:
        if not hasattr(model, 'state_dict') or not hasattr(model, 'load_state_dict'):
            raise TypeError(f'RolloutExchanger: model must be an nn.Module, got {type(model).__name__}')
        task = current_task()
        self.is_learner, self.is_collector, self.is_evaluator = exchanger_roles('RolloutExchanger')
        self.model = model
        self.wait_timeout = float(wait_timeout)
        self.resend_interval = float(resend_interval)
        self.router = task.router
        self.node_id = int(self.router.node_id)
        self.version = -1          # learner: version sent last; others: version loaded
        self.stats: Dict[str, int] = {'rollouts_received': 0, 'rollouts_trained': 0, 'stale_refused': 0,
                                      'partial_sets': 0, 'empty_waits': 0, 'weights_sent': 0, 'weights_resent': 0,
                                      'weights_loaded': 0, 'rollouts_sent': 0, 'wait_timeouts': 0,
                                      'rollouts_kept': 0, 'kept_sent': 0, 'kept_dropped': 0,
                                      'unsent_at_finish': 0}
        self._w = Waiter()
        self._rollouts: Dict[int, _RolloutMsg] = {}      # learner: collector id -> rollout of this version
        self._weights: Optional[_WeightsMsg] = None      # others: newest weights message
        self._kept: Optional[_RolloutMsg] = None         # collector: the newest rollout no learner got yet
        self._evals: Newest[EvalMsg] = Newest(self._w)   # evaluation results
        self._peers = PeerTable(self.router, self._w)
        self._roles, self._joined = self._peers.alive, self._peers.joined   # peer id -> roles; joined, not served
        self._trained_iter = 0
        self._used_version = -1
        self._step0 = (0, 0, 0)
        task.on(EV_WEIGHTS, self._on_weights)
        task.on(EV_ROLLOUT, self._on_rollout)
        task.on(EV_EVAL, self._evals.put)
        self._peers.listen(task)

    # ------------------------------------------------------------------ listeners (router thread)
    def _on_weights(self, msg: _WeightsMsg) -> None:
        with self._w.cv:
            if self._weights is None or int(msg['version']) > int(self._weights['version']):
                self._weights = msg
            self._w.cv.notify_all()

    def _on_rollout(self, msg: _RolloutMsg) -> None:
        sender, version = int(msg['node']), int(msg['version'])
        with self._w.cv:
            self.stats['rollouts_received'] += 1
            if version != self.version or sender in self._rollouts:
                self.stats['stale_refused'] += 1
                log.warning('RolloutExchanger: refused a rollout of node %d made with weights version %d '
                            '(current %d%s)', sender, version, self.version,
                            ', already have one' if version == self.version else '')
                return
            self._rollouts[sender] = msg
            self._roles.setdefault(sender, {'collector'})
            self._w.cv.notify_all()

    # ------------------------------------------------------------------ helpers
    def _collectors(self) -> List[int]:
        for p in list(getattr(self.router, 'peers', ()) or ()):
            if int(p) not in self._roles:
                self._roles[int(p)] = peer_roles(self.router, int(p))
        return [i for i, r in self._roles.items() if 'collector' in r]

    def _wait(self, ready: Callable[[], bool], what: str, poll: Optional[Callable[[], None]] = None) -> bool:
        """Wait up to ``wait_timeout`` s for ``ready()`` (calling ``poll()`` between checks, under the lock);
        False on timeout or finish (logged)."""
        def keep_waiting() -> None:
            if poll is not None:
                poll()

        outcome = self._w.wait(ready, self.wait_timeout, keep_waiting,
                               f'{what} (RolloutExchanger, node {self.node_id})')
        if outcome == 'timeout':
            self.stats['wait_timeouts'] += 1
        return outcome == 'ready'

    def _apply_eval(self, ctx: OnlineRLContext) -> None:
        e = self._evals.take()
        if e is not None:
            ctx.last_eval_value = float(e['eval_value'])
            ctx.last_eval_iter = int(e['train_iter'])

    def _send_weights(self, ctx: OnlineRLContext, to: Optional[int] = None) -> None:
        msg: _WeightsMsg = {'node': self.node_id, 'version': self.version,
               'state': host_state(self.model),
               'train_iter': int(ctx.train_iter), 'env_step': int(ctx.env_step), 'env_episode': int(ctx.env_episode)}
        task = current_task()
        if to is None:
            task.emit(EV_WEIGHTS, msg, only_remote=True)
        else:
            task.emit_to(to, EV_WEIGHTS, msg)
        self.stats['weights_sent'] += 1

    # ------------------------------------------------------------------ the middleware
    def __fields__(self, roles: Set[object]) -> Fields:
        """The context fields it fills on this node from what the other nodes sent (see the class doc)."""
        evals = ["last_eval_value", "last_eval_iter"]
        if self.is_learner:
            return Fields.of(reads=["train_iter", "env_step", "env_episode"],
                             writes=["rollout", "env_step", "env_episode", "info_for_logging"] + evals,
                             owner="RolloutExchanger")
        if self.is_collector:
            return Fields.of(reads=["rollout?", "info_for_logging?"],
                             writes=["train_iter", "env_step", "env_episode"] + evals, owner="RolloutExchanger")
        return Fields.of(reads=["eval_value?"], writes=["train_iter", "env_step", "env_episode"],
                         owner="RolloutExchanger")

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        if self.is_learner:
            return self._learner_step(ctx)
        if self.is_collector:
            return self._collector_step(ctx)
        return self._evaluator_step(ctx)

    def _learner_step(self, ctx: OnlineRLContext) -> Generator:
        if self.version < 0:
            with self._w.cv:
                self.version = 0
            self._send_weights(ctx)
        self._apply_eval(ctx)

        last_send = [time.monotonic()]

        def resend() -> None:
            # A weights message sent before a peer was connected is lost, and a collector that joined late
            # never got one: while some collector has not delivered, the current version goes out again
            # every resend_interval s (receivers ignore versions they already have).
            now = time.monotonic()
            if now - last_send[0] < self.resend_interval and not self._joined:
                return
            last_send[0] = now
            self._joined.clear()
            self._w.cv.release()
            try:
                self._send_weights(ctx)
                self.stats['weights_resent'] += 1
            finally:
                self._w.cv.acquire()

        def complete() -> bool:
            live = self._collectors()
            return bool(self._rollouts) and all(c in self._rollouts for c in live)

        ok = self._wait(complete, f'rollouts of weights version {self.version}', resend)
        with self._w.cv:
            got = self._rollouts
            self._rollouts = {}
            missing = [c for c in self._collectors() if c not in got]
        if got:
            if missing and not ok and not current_task().finish:
                self.stats['partial_sets'] += 1
            self._merge(ctx, [got[k] for k in sorted(got)])
        else:
            self.stats['empty_waits'] += 1
            setattr(ctx, 'rollout', None)  # an extra field of the context
        it0 = ctx.train_iter
        yield
        if ctx.train_iter > it0:
            self.stats['rollouts_trained'] += len(got)
            with self._w.cv:
                self.version += 1
                late = len(self._rollouts)  # arrived during training, made with the old weights
                self._rollouts = {}
                self.stats['stale_refused'] += late
            if late:
                log.warning('RolloutExchanger: refused %d rollout(s) that arrived during training with the '
                            'old weights', late)
            self._send_weights(ctx)
        if current_task().finish:
            self._final(ctx)

    def _merge(self, ctx: OnlineRLContext, msgs: List[_RolloutMsg]) -> None:
        rollouts = [m['rollout'] for m in msgs]
        merged: Dict[str, np.ndarray] = {}
        for k, v in rollouts[0].items():
            axis = 0 if k == 'last_value' else 1
            merged[k] = v if len(rollouts) == 1 else np.concatenate([r[k] for r in rollouts], axis=axis)
        setattr(ctx, 'rollout', merged)  # an extra field of the context
        info = ctx.info_for_logging
        for m in msgs:
            ctx.env_step += int(m['env_step'])
            ctx.env_episode += int(m['env_episode'])
            if m['episode_return']:
                info.setdefault('collect_episode_return', []).extend(m['episode_return'])
                info.setdefault('collect_episode_length', []).extend(m['episode_length'])

    def _load_newer(self, ctx: OnlineRLContext, what: str, poll: Optional[Callable[[], None]] = None) -> bool:
        newer = lambda: self._weights is not None and int(self._weights['version']) > self.version  # noqa: E731
        self._wait(newer, what, poll)
        with self._w.cv:
            msg = self._weights if newer() else None
        if msg is None:
            return False
        self.model.load_state_dict(msg['state'])
        self.version = int(msg['version'])
        self.stats['weights_loaded'] += 1
        ctx.train_iter = int(msg['train_iter'])
        ctx.env_step = max(int(ctx.env_step), int(msg['env_step']))
        ctx.env_episode = max(int(ctx.env_episode), int(msg['env_episode']))
        return True

    def _send_rollout(self, msg: _RolloutMsg) -> bool:
        """Send ``msg`` to every live learner; False when none is alive or none took it (the bus declared
        it dead between our look and the send: the bus counts it undeliverable)."""
        with self._w.cv:
            learners = [i for i, roles in self._roles.items() if 'learner' in roles]
        if not learners:
            return False
        stats = getattr(self.router, 'stats', None) or {}
        lost = stats.get('undeliverable', 0)
        for node in learners:
            current_task().emit_to(node, EV_ROLLOUT, msg)
        if stats.get('undeliverable', 0) - lost >= len(learners):
            return False
        self.stats['rollouts_sent'] += 1
        return True

    def _drop_kept(self, why: str) -> None:
        msg, self._kept = self._kept, None
        if msg is None:
            return
        self.stats['kept_dropped'] += 1
        log.warning('RolloutExchanger (node %d): dropped the kept rollout of weights version %d (%d env steps): '
                    '%s [%d dropped so far]', self.node_id, msg['version'], msg['env_step'], why,
                    self.stats['kept_dropped'])

    def _send_kept(self) -> None:
        """The collector's poll while it waits for weights (called under the lock): drop the kept rollout once
        newer weights show that the learner moved past its version (it would refuse it), else send it once a
        learner is alive again."""
        msg = self._kept
        if msg is None:
            return
        if self._weights is not None and int(self._weights['version']) > int(msg['version']):
            self._drop_kept(f'the learner moved on to weights version {int(self._weights["version"])}')
            return
        if not any('learner' in r for r in self._roles.values()):
            return
        self._kept = None
        self._w.cv.release()
        try:
            sent = self._send_rollout(msg)
        finally:
            self._w.cv.acquire()
        if not sent:
            if self._kept is None:
                self._kept = msg
            return
        self.stats['kept_sent'] += 1
        log.warning('RolloutExchanger (node %d): a learner is alive again; sent the rollout of weights version %d '
                    'kept meanwhile', self.node_id, msg['version'])

    def _collector_step(self, ctx: OnlineRLContext) -> Generator:
        self._load_newer(ctx, f'weights newer than version {self.version}', self._send_kept)
        with self._w.cv:
            self._send_kept()   # a kept rollout: dropped if the weights just loaded are newer, else sent if it can be
        self._apply_eval(ctx)
        used = self.version
        step0, ep0 = ctx.env_step, ctx.env_episode
        n_ret0 = len(ctx.info_for_logging.get('collect_episode_return', ()))
        yield
        r = getattr(ctx, 'rollout', None)
        if r is not None:
            info = ctx.info_for_logging
            msg: _RolloutMsg = {'node': self.node_id, 'version': used, 'rollout': r,
                   'env_step': int(ctx.env_step - step0), 'env_episode': int(ctx.env_episode - ep0),
                   'episode_return': [float(x) for x in info.get('collect_episode_return', ())[n_ret0:]],
                   'episode_length': [int(x) for x in info.get('collect_episode_length', ())[n_ret0:]]}
            with self._w.cv:
                self._drop_kept('a newer rollout replaces it')
            sent = self._send_rollout(msg)
            if not sent and current_task().finish:   # the learner finished (and left): nobody will train on it
                self.stats['unsent_at_finish'] += 1
                log.info('RolloutExchanger (node %d): the run finished; the last rollout (weights version %d) was '
                         'not sent', self.node_id, used)
            elif not sent:
                with self._w.cv:
                    self._kept = msg
                self.stats['rollouts_kept'] += 1
                log.warning('RolloutExchanger (node %d): no learner is alive; keeping the rollout of weights '
                            'version %d (%d env steps) until one is back [%d kept so far]', self.node_id, used,
                            msg['env_step'], self.stats['rollouts_kept'])
        if current_task().finish:
            with self._w.cv:
                self._drop_kept('the run finished before a learner was back')
            self._final(ctx)

    def _evaluator_step(self, ctx: OnlineRLContext) -> Generator:
        self._load_newer(ctx, f'weights newer than version {self.version} to evaluate')
        yield
        ev = getattr(ctx, 'eval_value', None)
        if ev is not None and ev > float('-inf'):
            msg: EvalMsg = {'node': self.node_id, 'eval_value': float(ev), 'train_iter': int(ctx.train_iter)}
            current_task().emit(EV_EVAL, msg, only_remote=True)
        if current_task().finish:
            log.debug('RolloutExchanger (evaluator %d) at finish: %s', self.node_id, self.stats)

    def _final(self, ctx: OnlineRLContext) -> None:
        """Finishing: give a live evaluator up to 3 s to deliver a last result, then load it."""
        if not self.is_evaluator and any('evaluator' in r for r in self._roles.values()):
            n = self._evals.n
            deadline = time.monotonic() + 3.0
            with self._w.cv:
                while self._evals.n == n and time.monotonic() < deadline:
                    self._w.cv.wait(POLL)
        self._apply_eval(ctx)
        log.debug('RolloutExchanger (node %d, %s) at finish: %s', self.node_id,
                 'learner' if self.is_learner else 'collector', self.stats)

    def __repr__(self) -> str:
        return f'RolloutExchanger(node {self.node_id}, version {self.version})'
