"""The collector's side of ``ContextExchanger``: follow the learner's counts, keep at most ``skip_n_iter``
batches in flight, send each step's data (in the message or as a file in ``storage``) to the learner."""
from __future__ import annotations

import itertools
import os
from typing import Any, Dict, Generator, Optional, Set

from contexts import OnlineRLContext

from .context import ContextExchanger
from .shared import EV_DATA, current_task, log, pack_rows, restarts_expected


class CollectorContextExchanger(ContextExchanger):
    """``ContextExchanger`` on a node with the collector role (see ``ContextExchanger`` for what it does)."""

    role_name = 'collector'

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._seq = itertools.count(1)
        self._sent = 0
        self._learner_inc: Optional[int] = None
        super().__init__(*args, **kwargs)

    def _peer_lost(self, node_id: int, roles: Set[str]) -> None:
        self._finish_if_no_learner(node_id, roles)

    def _unacked(self) -> int:
        u = self._update
        ack = u['acks'].get(self.node_id) if u is not None else None
        acked = int(ack[1]) if ack is not None and int(ack[0]) == self.incarnation else 0
        inc = u.get('inc') if u is not None else None
        if inc is not None and inc != self._learner_inc:
            if self._learner_inc is not None:  # a restarted learner: what the old one did not consume is lost
                log.warning('ContextExchanger: the learner restarted (a new incarnation); node %d counts its '
                            'batches in flight anew', self.node_id)
                self._sent = acked
            self._learner_inc = inc
        return self._sent - acked

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        task = current_task()
        if self._sent and self._unacked() > self.skip_n_iter and not task.finish:
            def give_up() -> Optional[str]:  # with restarts, a lost learner is waited for (bounded)
                return None if self._with_role('learner') or restarts_expected() else 'no learner is alive'

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
                'trajectories': pack_rows(list(traj)) if traj else None,
                'episodes': [pack_rows(list(e)) for e in eps] if eps else None,
                'episode_return': [float(x) for x in info.get('collect_episode_return', ())[n_ret0:]],
                'episode_length': [int(x) for x in info.get('collect_episode_length', ())[n_ret0:]],
            }
            seq = next(self._seq)
            if self.storage is not None:
                batch = {'file': self._write_file(batch, seq)}
            batch['node'] = self.node_id
            batch['inc'] = self.incarnation
            batch['seq'] = seq
            for learner in learners:
                task.emit_to(learner, EV_DATA, batch)
            self._sent += 1
            self.stats['batches_sent'] += 1
            self.stats['env_steps_sent'] += int(d_step)
        if task.finish:
            self._final_wait(ctx)
            self._log_stats()

    def _write_file(self, batch: Dict[str, Any], seq: int) -> str:
        from pipeline.parallel import codec

        name = f'ctx-{self.node_id}-{os.getpid()}-{seq}.rlp'
        path = os.path.join(self.storage, name)
        with open(path + '.tmp', 'wb') as f:
            f.write(codec.dumps(batch))
        os.replace(path + '.tmp', path)
        return name  # the learner finds it in its own storage directory (the same one, maybe mounted elsewhere)
