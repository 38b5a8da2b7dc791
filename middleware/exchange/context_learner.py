"""The learner's side of ``ContextExchanger``: queue the collectors' batches, merge them into the context,
send ``train_iter``/``env_step`` and the per-collector acknowledgements back."""
from __future__ import annotations

import os
import re
import stat
import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, Dict, Generator, List, Optional, Set, Tuple, cast

from contexts import OnlineRLContext
from pipeline.parallel import codec
from pipeline.runtime.node import restarts_expected
from pipeline.runtime.roles import Role
from pipeline.runtime.task import Task

from .context import ContextExchanger
from .shared import EV_DATA, EV_LEARNER, DataMsg, current_task, log, peer_roles, unpack_rows

if TYPE_CHECKING:
    from pipeline.data.records import Transition

STORAGE_FILE = re.compile(r'ctx-\d+-\d+-\d+\.rlp')  # the names collectors give their batch files


class LearnerContextExchanger(ContextExchanger, side=Role.LEARNER):
    """``ContextExchanger`` on a node with the learner role (see ``ContextExchanger`` for what it does)."""

    role_name = 'learner'

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # ContextExchanger's arguments, passed on
        self._queue: Deque[Tuple[int, DataMsg]] = deque()
        self._last_seq: Dict[Tuple[int, int], int] = {}  # (collector id, incarnation) -> last batch seq
        self._incarnation: Dict[int, int] = {}  # collector id -> its newest incarnation (a restart is a new one)
        # collector id -> sequence number of the last batch of its newest incarnation consumed: a collector's
        # batches in flight are those it sent after that one, so batches that went to an earlier incarnation of
        # this learner (lost when it was killed and restarted) never stay counted as in flight
        self._consumed: Dict[int, int] = {}
        self.received_from: Dict[int, int] = {}  # collector id -> batches received
        self._alone_since: Optional[float] = None  # since when no collector is alive (after one delivered)
        super().__init__(*args, **kwargs)
        self.stats['refused_files'] = 0
        self.stats['collector_timeouts'] = 0
        self._storage_dir = os.path.realpath(self.storage) if self.storage is not None else None

    def _listen(self) -> None:
        current_task().on(EV_DATA, self._on_data)
        super()._listen()

    def _peer_lost(self, node_id: int, roles: Set[str], dead: bool = False) -> None:
        if 'collector' not in roles:
            return
        left = self._with_role('collector')
        if self.on_collector_lost == 'finish':
            log.error('ContextExchanger: collector node %d is lost; finishing the task '
                      "(on_collector_lost='finish')", node_id)
            current_task().finish = True
        else:
            log.warning('ContextExchanger: collector node %d is lost; the learner goes on with %s', node_id,
                        f'collectors {left}' if left else 'no collector')

    def _on_data(self, batch: DataMsg) -> None:
        sender, seq, inc = int(batch['node']), int(batch['seq']), int(batch.get('inc', 0))
        with self._w.cv:
            first_of_incarnation = (sender, inc) not in self._last_seq
            if seq <= self._last_seq.get((sender, inc), 0):
                self.stats['duplicates'] += 1
                log.warning('ContextExchanger: batch %d of node %d arrived twice; counted once', seq, sender)
                return
            self._last_seq[(sender, inc)] = seq
            if first_of_incarnation:
                if sender in self._incarnation:
                    log.warning('ContextExchanger: node %d restarted; its batches are counted anew', sender)
                self._incarnation[sender] = inc
                self._consumed[sender] = 0
            if sender not in self._alive:
                self._alive[sender] = peer_roles(self.router, sender) or {'collector'}
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

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        self._learner_forward(ctx)
        self._apply_eval(ctx)
        yield
        task = current_task()
        self._send_update(ctx)
        if self.sends_eval:
            self._send_eval(ctx)
        if task.finish:
            self._final_wait(ctx)
            self._log_stats()

    def _learner_forward(self, ctx: OnlineRLContext) -> None:
        task = current_task()
        if not self._queue and not task.finish:
            def give_up() -> Optional[str]:
                if not self._with_role('collector') and self._last_seq:
                    return 'no collector is alive'
                return None

            if self._with_role('collector') or not self._last_seq:
                if self._alone_since is not None:
                    log.warning('ContextExchanger: collector node(s) %s alive again after %.1f s',
                                self._with_role('collector'), time.monotonic() - self._alone_since)
                    self._alone_since = None
                why = self._w.wait(lambda: bool(self._queue), self.wait_timeout, give_up, 'collector data')
                if why == 'timeout':
                    self.stats['wait_timeouts'] += 1
            else:
                self._wait_for_a_collector(task)
        with self._w.cv:
            n = len(self._queue) if self.max_merge is None else min(self.max_merge, len(self._queue))
            batches = [self._queue.popleft() for _ in range(n)]
        if batches:
            self._merge(ctx, batches)

    def _wait_for_a_collector(self, task: Task) -> None:
        """No collector is alive (each one that delivered was lost): wait (at most ``wait_timeout`` per step) for
        one to come back or for data, instead of training on the same data again and again; finish the task
        when none came back within ``collector_timeout`` s (unless the launcher restarts nodes)."""
        now = time.monotonic()
        restarts = restarts_expected()
        if self._alone_since is None:
            self._alone_since = now
            if restarts:
                log.warning('ContextExchanger: no collector is alive; the learner waits for the launcher to restart '
                            'one (training only as its waits of wait_timeout=%.0f s end)', self.wait_timeout)
            else:
                log.warning('ContextExchanger: no collector is alive; the learner waits up to %.0f s '
                            '(collector_timeout) for one to come back, then finishes the task', self.collector_timeout)
        if not restarts and now - self._alone_since >= self.collector_timeout:
            self.stats['collector_timeouts'] += 1
            log.error('ContextExchanger: no collector came back within %.0f s (collector_timeout); finishing the task',
                      self.collector_timeout)
            task.finish = True
            return
        left = self.wait_timeout if restarts else min(self.wait_timeout,
                                                      self._alone_since + self.collector_timeout - now)
        why = self._w.wait(lambda: bool(self._queue) or bool(self._with_role('collector')), max(0.0, left),
                           lambda: None, 'a collector to come back')
        if why == 'timeout':
            self.stats['wait_timeouts'] += 1

    def _merge(self, ctx: OnlineRLContext, batches: List[Tuple[int, DataMsg]]) -> None:
        transitions: List[Transition] = []
        episodes: List[List[Transition]] = []
        returns: List[float] = []
        lengths: List[int] = []
        d_step = d_episode = 0
        for sender, b in batches:
            if int(b.get('inc', 0)) == self._incarnation.get(sender):  # acknowledged to that incarnation
                self._consumed[sender] = max(self._consumed.get(sender, 0), int(b['seq']))
            if 'file' in b:
                loaded = self._read_file(sender, b['file'])
                if loaded is None:
                    continue
                b = loaded
            # the collectors' transitions, packed by pack_rows
            if b.get('transitions') is not None:
                transitions.extend(cast('List[Transition]', unpack_rows(b['transitions'])))
            eps = b.get('episodes')
            if eps is not None:
                episodes.extend(cast('List[Transition]', unpack_rows(e)) for e in eps)
            returns.extend(b.get('episode_return') or ())
            lengths.extend(b.get('episode_length') or ())
            d_step += int(b['env_step'])
            d_episode += int(b['env_episode'])
        if transitions:
            ctx.transitions = (list(ctx.transitions) + transitions) if ctx.transitions else transitions
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

    def _storage_file(self, ref: object) -> Optional[str]:
        """The path of a batch file a message names, or None unless it is a collector's batch file directly
        inside this exchanger's ``storage`` directory (a bare name, or a path whose directory is it)."""
        if self._storage_dir is None or not isinstance(ref, str):
            return None
        name = os.path.basename(ref)
        if not STORAGE_FILE.fullmatch(name):
            return None
        if ref != name and os.path.realpath(os.path.dirname(ref)) != self._storage_dir:
            return None
        return os.path.join(self._storage_dir, name)

    def _read_file(self, sender: int, ref: object) -> Optional[DataMsg]:
        """Read and remove the batch file ``ref`` names; refuse (count, log, return None) any file that is not
        a regular batch file inside ``storage``: a message never makes the learner open or delete anything
        else."""
        path = self._storage_file(ref)
        data = None
        if path is not None:
            try:
                fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NOFOLLOW', 0))
            except OSError as e:
                why = f'cannot open it ({e.strerror})'
            else:
                with os.fdopen(fd, 'rb') as f:
                    why = 'not a regular file'
                    if stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                        try:
                            data = codec.loads(f.read())
                        except Exception as e:  # noqa: BLE001 - whatever the decoder says, the file is refused
                            why = f'not a batch file ({type(e).__name__}: {e})'
        elif self._storage_dir is None:
            why = 'this learner has no storage= directory (give the same one to every ContextExchanger)'
        else:
            why = f'only batch files (ctx-*.rlp) directly inside storage {self._storage_dir!r} are read'
        if data is None or path is None:  # (data is None whenever path is)
            self.stats['refused_files'] += 1
            log.error('ContextExchanger: refused the batch file %r named by node %d: %s', ref, sender, why)
            return None
        os.remove(path)
        return data

    def _send_update(self, ctx: OnlineRLContext) -> None:
        acks = {n: [self._incarnation[n], c] for n, c in self._consumed.items()}  # per collector incarnation
        current_task().emit(EV_LEARNER, {'node': self.node_id, 'train_iter': int(ctx.train_iter),
                                         'env_step': int(ctx.env_step), 'env_episode': int(ctx.env_episode),
                                         'acks': acks}, only_remote=True)
