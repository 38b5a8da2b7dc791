"""The collector's side of ``ContextExchanger``: follow the learner's counts, keep at most ``skip_n_iter``
batches in flight, send each step's data (in the message or as a file in ``storage``) to the learner."""
from __future__ import annotations

import itertools
import os
from collections import deque
from typing import Any, Deque, Generator, Optional, Set, Tuple

from contexts import OnlineRLContext
from pipeline.parallel import codec
from pipeline.runtime.node import restarts_expected
from pipeline.runtime.roles import Role
from pipeline.runtime.task import Task

from .context import ContextExchanger
from .shared import EV_DATA, DataMsg, current_task, log, pack_rows


class CollectorContextExchanger(ContextExchanger, side=Role.COLLECTOR):
    """``ContextExchanger`` on a node with the collector role (see ``ContextExchanger`` for what it does)."""

    role_name = 'collector'

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # ContextExchanger's arguments, passed on
        self._seq = itertools.count(1)
        self._sent = 0
        self._ack_floor = 0  # batches up to this one went to a learner that was lost: no longer in flight
        self._lost_learners: Set[int] = set()
        # batches not sent yet, oldest first, with their env steps: kept while no learner is alive
        self._kept: Deque[Tuple[DataMsg, int]] = deque()
        self._keeping = False  # logged that batches are being kept (once per outage)
        super().__init__(*args, **kwargs)
        self.stats.update(batches_kept=0, kept_dropped=0, kept_lost=0)

    def _peer_lost(self, node_id: int, roles: Set[str], dead: bool = False) -> None:
        if 'learner' in roles:
            with self._w.cv:
                self._lost_learners.add(node_id)
                self._peers.joined.discard(node_id)
        self._finish_if_no_learner(node_id, roles, dead)

    def _unacked(self) -> int:
        if self._lost_learners:
            with self._w.cv:
                back = self._lost_learners & self._peers.joined
                if back:  # a lost learner is back (restarted): what was in flight to it is gone
                    self._lost_learners -= back
                    self._peers.joined -= back
                    self._ack_floor = self._sent
        u = self._updates.msg
        ack = u['acks'].get(self.node_id) if u is not None else None
        acked = int(ack[1]) if ack is not None and int(ack[0]) == self.incarnation else 0
        # sequence numbers: the learner acknowledges the last batch it consumed, _sent is the last one delivered
        return self._sent - max(acked, self._ack_floor)

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        task = current_task()
        self._learner_timed_out()
        if self._sent and self._unacked() > self.skip_n_iter and not task.finish:
            def give_up() -> Optional[str]:  # with restarts, a lost learner is waited for (bounded)
                return None if self._with_role('learner') or restarts_expected() else 'no learner is alive'

            why = self._w.wait(lambda: self._unacked() <= self.skip_n_iter, self.wait_timeout, give_up,
                               f'the learner to consume batches (node {self.node_id} has {self._unacked()} in '
                               f'flight, window {self.skip_n_iter + 1})')
            if why == 'timeout':
                self.stats['wait_timeouts'] += 1
        if len(self._kept) >= self.max_kept and not task.finish:  # full: wait for a learner before dropping
            self._w.wait(lambda: bool(self._with_role('learner')), self.wait_timeout, lambda: None,
                         f'a learner to come back (node {self.node_id} keeps {len(self._kept)} batches, max_kept '
                         f'{self.max_kept})')
        self._apply_update(ctx)
        self._apply_eval(ctx)
        step0, episode0 = ctx.env_step, ctx.env_episode
        info = ctx.info_for_logging
        n_ret0 = len(info.get('collect_episode_return', ()))
        yield
        d_step, d_episode = ctx.env_step - step0, ctx.env_episode - episode0
        traj, eps = ctx.transitions, ctx.episodes
        if d_step or d_episode or traj or eps:
            info = ctx.info_for_logging
            batch: DataMsg = {
                'env_step': int(d_step), 'env_episode': int(d_episode),
                'transitions': pack_rows(list(traj)) if traj else None,
                'episodes': [pack_rows(list(e)) for e in eps] if eps else None,
                'episode_return': [float(x) for x in info.get('collect_episode_return', ())[n_ret0:]],
                'episode_length': [int(x) for x in info.get('collect_episode_length', ())[n_ret0:]],
            }
            seq = next(self._seq)
            if self.storage is not None:
                batch = {'file': self._write_file(self.storage, batch, seq)}
            batch['node'] = self.node_id
            batch['inc'] = self.incarnation
            batch['seq'] = seq
            self._kept.append((batch, int(d_step)))
            self._deliver(task)
            if self._kept and self._kept[-1][0] is batch:
                self._keep()
        elif self._kept:
            self._deliver(task)
        if task.finish:
            if self._kept:
                # the finish went out already (to the learner too, on the connection kept for its revival); a
                # learner that comes back ends its run on it and would not train on batches sent now
                self.stats['kept_lost'] += len(self._kept)
                log.error('ContextExchanger: node %d finishes with %d collected batches (%d env steps) that no '
                          'learner got: none was alive when the task finished; they are lost (stats kept_lost)',
                          self.node_id, len(self._kept), sum(d for _, d in self._kept))
            self._final_wait(ctx)
            self._log_stats()

    def _deliver(self, task: Task) -> None:
        """Send the batches not sent yet, oldest first, to every live learner; stop at the first one that no
        learner accepted (the bus declared it dead meanwhile): it stays kept."""
        kept = self._kept
        stats = getattr(self.router, 'stats', None) or {}
        while kept:
            learners = self._with_role('learner')
            if not learners:
                return
            batch, d_step = kept[0]
            lost = stats.get('undeliverable', 0)
            for learner in learners:
                task.emit_to(learner, EV_DATA, batch)
            if stats.get('undeliverable', 0) - lost >= len(learners):
                return  # nobody got it: keep it for the learner's return
            kept.popleft()
            self._sent = int(batch['seq'])  # delivered in order: the newest sequence number sent
            self.stats['batches_sent'] += 1
            self.stats['env_steps_sent'] += d_step
        if self._keeping:
            self._keeping = False
            log.warning('ContextExchanger: node %d delivered the batches it kept while no learner was alive',
                        self.node_id)

    def _keep(self) -> None:
        """This step's batch could not be sent (no learner alive): it is kept, at most ``max_kept`` of them."""
        self.stats['batches_kept'] += 1
        if not self._keeping:
            self._keeping = True
            log.warning('ContextExchanger: node %d: no learner is alive; keeping collected batches until one is '
                        'back (at most %d; stats batches_kept, kept_dropped)', self.node_id, self.max_kept)
        while len(self._kept) > self.max_kept:
            self._kept.popleft()
            self.stats['kept_dropped'] += 1
            n = self.stats['kept_dropped']
            if n in (1, 10, 100) or n % 1000 == 0:
                log.error('ContextExchanger: node %d dropped its oldest kept batch: no learner for a long time and '
                          'max_kept=%d reached (%d dropped so far)', self.node_id, self.max_kept, n)

    def _write_file(self, storage: str, batch: DataMsg, seq: int) -> str:

        name = f'ctx-{self.node_id}-{os.getpid()}-{seq}.rlp'
        path = os.path.join(storage, name)
        with open(path + '.tmp', 'wb') as f:
            f.write(codec.dumps(batch))
        os.replace(path + '.tmp', path)
        return name  # the learner finds it in its own storage directory (the same one, maybe mounted elsewhere)
