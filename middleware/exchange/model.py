"""``PeriodicalModelExchanger`` and ``ModelExchanger``: send a model's weights from the learner, load the
newest version on the other nodes."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Generator, Optional, Set, Tuple, TypedDict

from contexts import OnlineRLContext
from pipeline.runtime.roles import Role, for_all_roles

from .shared import EV_MODEL, PEER_LOST, StateModel, Waiter, current_task, host_state, inactive_void

if TYPE_CHECKING:
    import torch


class _ModelMsgBase(TypedDict):
    node: int
    version: int
    state: Dict[str, torch.Tensor]


class ModelMsg(_ModelMsgBase, total=False):
    """The weights a sender sends (``EV_MODEL``): its node, the train iteration they are from, the state dict and
    the sender's incarnation ``inc`` (a restarted sender is a new one)."""

    inc: int


@for_all_roles(reads=["train_iter"])
class PeriodicalModelExchanger:
    """Send a model's weights from one node, load them on the others (a generator middleware).

    ``mode='send'`` (the learner): in the backward part of the first step and then whenever
    ``ctx.train_iter`` advanced by at least ``period`` since the last send, sends the model's
    ``state_dict()`` (a dict of host tensors, whatever the model's device; the safe codec carries no pickles)
    with ``version = ctx.train_iter`` to every node.

    ``mode='receive'``: keeps the newest version that arrived; the forward part loads it into ``model`` (onto
    the model's device, e.g. the CPU of a collector node while the learner trains on a GPU) before the node acts (when it is newer than the loaded one). With ``stale_toleration=N``, one version is
    used for at most N steps: then the node waits (at most ``wait_timeout`` s, released by finish and by
    the loss of every sender) for a newer one. ``None``: never wait. A collector that waits sends no data
    meanwhile: if the learner needs that data to reach its next send (one collector, ``period`` larger than
    the batches the collector has in flight), the wait only ends by its timeout; keep ``stale_toleration``
    at least ``period + skip_n_iter + 1`` in that case.
    A sender that restarted (a new incarnation of its node, e.g. a learner resumed from its checkpoint by
    ``rlpipe run --backend ray --max-restarts N``) counts its versions again from its checkpoint: its
    weights are loaded even when their version is below the one loaded before (``stats['sender_restarts']``).

    Reads ``ctx.train_iter`` (sender). Writes nothing to the context; ``self.version`` is the loaded (or
    sent) version, ``self.stats`` counts sends, loads and waits. In a single process it is
    ``task.void()``.
    """

    # loosely typed: in a single process it returns task.void(), not an instance (which mypy requires of __new__)
    def __new__(cls, *args: object, **kwargs: object) -> Any:
        void = inactive_void(cls.__name__)
        return void if void is not None else super().__new__(cls)

    def __init__(self, model: StateModel, mode: str = 'receive', period: int = 1, stale_toleration: Optional[int] = None,
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
        task = current_task()
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
        self._w = Waiter()
        self._newest: Optional[Tuple[int, Dict[str, torch.Tensor]]] = None
        self._uses = 0
        self._senders: Set[int] = set()
        self._had_sender = False
        self._sender_inc: Dict[int, object] = {}  # sender node -> its incarnation (a restarted sender is a new one)
        self._restarted = False  # the newest version comes from a restarted sender: load it even if older
        self.incarnation = int(getattr(self.router, 'session', 0) or 0)
        if mode == 'receive':
            task.on(event_name, self._on_model)
            for ev in PEER_LOST:
                task.on(ev, self._on_lost)

    def _on_model(self, msg: ModelMsg) -> None:
        version, node, inc = int(msg['version']), int(msg['node']), msg.get('inc')
        with self._w.cv:
            self.stats['received'] += 1
            self._senders.add(node)
            self._had_sender = True
            known = self._sender_inc.get(node)
            self._sender_inc[node] = inc
            if known is not None and inc is not None and inc != known:
                # the sender restarted (e.g. a learner resumed from its checkpoint): its versions start again
                # below the ones loaded from its previous incarnation; they are the weights that train now
                self._newest = (version, msg['state'])
                self._restarted = True
                self.stats['sender_restarts'] = self.stats.get('sender_restarts', 0) + 1
            elif self._newest is None or version > self._newest[0]:
                self._newest = (version, msg['state'])
            self._w.cv.notify_all()

    def _on_lost(self, node_id: int, *_: object, **__: object) -> None:
        with self._w.cv:
            self._senders.discard(int(node_id))
            self._w.cv.notify_all()

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        return self._send_step(ctx) if self.mode == 'send' else self._receive_step(ctx)

    def _send_step(self, ctx: OnlineRLContext) -> Generator:
        yield
        it = int(ctx.train_iter)
        if self.version < 0 or it - self.version >= self.period:
            state = host_state(self.model)
            current_task().emit(self.event_name, {'node': self.node_id, 'inc': self.incarnation, 'version': it,
                                                  'state': state}, only_remote=True)
            self.version = it
            self.stats['sent'] += 1

    def _newer(self) -> bool:
        return self._newest is not None and (self._restarted or self._newest[0] > self.version)

    def _receive_step(self, ctx: OnlineRLContext) -> Generator:
        task = current_task()
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
            self._restarted = False
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

    def __init__(self, model: StateModel, stale_toleration: Optional[int] = None, wait_timeout: float = 10.0,
                 period: int = 1) -> None:
        mode = 'send' if Role.LEARNER in current_task().roles else 'receive'
        super().__init__(model, mode=mode, period=period, stale_toleration=stale_toleration,
                         wait_timeout=wait_timeout)
