"""Replay-buffer middleware: push collected data, fetch training batches, write PER priorities.

The learner's side of the data path (:mod:`pipeline.data.records`): ``data_pusher`` stores each
collected ``Transition`` (or episode) as one buffer item; a :class:`ReplaySource` samples a
``TrainBatch`` from one buffer, a weighted list or a dict of buffers and, once the batch is trained,
writes the ``TrainOutput``'s ``priority`` back. ``OffPolicyLearner`` calls the source once per round;
``offpolicy_data_fetcher`` is the same source as a middleware (forward: sample, backward: priorities).
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Mapping as MappingABC
from typing import (TYPE_CHECKING, Callable, Dict, Generator, List, Mapping, NamedTuple, Optional, Protocol,
                    Sequence, Tuple, Union, cast)

import numpy as np

from contexts import OnlineRLContext, RLContext
from pipeline.runtime.contracts import buffered
from pipeline.runtime.roles import Role, for_roles

if TYPE_CHECKING:
    from pipeline.data.protocols import ReplayBuffer
    from pipeline.data.records import OnTrained, TrainBatch, TrainOutput

__all__ = ['data_pusher', 'offpolicy_data_fetcher', 'uses_per', 'ReplaySource', 'BatchSource', 'last_train_output']

log = logging.getLogger(__name__)

Buffers = Union['ReplayBuffer', Sequence[Tuple['ReplayBuffer', float]], Mapping[str, 'ReplayBuffer']]
"""One buffer, a list of ``(buffer, weight)`` pairs or a dict of buffers (what the fetchers sample from)."""

# Bound by _load() when the first pusher or fetcher is made (or uses_per is called), not at import: torch and
# pipeline.data (every buffer module) would make `import middleware` ten times slower.
if TYPE_CHECKING:
    import torch
    from pipeline.data.collate import collate
    from pipeline.data.protocols import sample_arguments, samples_by_priority, wants_priorities
    from pipeline.data.sampler import Priorities
else:
    torch = collate = wants_priorities = samples_by_priority = sample_arguments = None


class _TakesPriorities(Protocol):
    """A buffer whose sampler takes priorities (:func:`pipeline.data.protocols.samples_by_priority`)."""

    def update_priority(self, indices: Sequence[int], priorities: np.ndarray) -> List[bool]: ...


#: One share's sample: the batch (with ``indices`` and, prioritized, ``weight``) and the sampled items' indices.
_Sampled = Dict[str, object]  # one buffer's batch, with its items' ``indices``


def _load() -> None:
    global torch, collate, wants_priorities, samples_by_priority, sample_arguments
    if wants_priorities is None:
        # lazy: `import middleware` loads no torch and no buffers
        import torch  # lazy: see above
        from pipeline.data.collate import collate  # lazy: see above
        from pipeline.data.protocols import sample_arguments, samples_by_priority, wants_priorities  # lazy


def uses_per(buffer_: object) -> bool:
    """True when ``buffer_`` takes priorities back: its sampler (``PrioritizedSampler``) or a
    middleware with ``wants_priorities = True``
    (:class:`pipeline.data.protocols.PriorityFeedback`)."""
    _load()
    return wants_priorities(buffer_)


@for_roles(Role.LEARNER, reads=["transitions|episodes", "train_iter"], writes=["@buffer"])
def data_pusher(cfg: Mapping, buffer_: ReplayBuffer, group_by_env: bool = True,
                warn_after: int = 10) -> Callable[[OnlineRLContext], None]:
    """Push collected data into ``buffer_``.

    Reads ``ctx.transitions`` (a list of :class:`~pipeline.data.records.Transition`: each is pushed as
    one item) or, when that is empty, ``ctx.episodes`` (a list of episodes, lists of transitions: each
    whole episode is pushed as one item), and
    ``ctx.train_iter``. Writes nothing to the context (the data is left in place for later
    middleware such as loggers).

    Each item's meta is ``{'env': <env_id>, 'train_iter_data_collected': ctx.train_iter}`` when
    ``group_by_env`` (so ``buffer_.sample(groupby='env')`` and ``staleness_check`` work), else
    only the train iteration.

    A step with neither transitions nor episodes pushes nothing. When that is so for each of the first
    ``warn_after`` steps (nothing was ever pushed), it logs one warning: usually no collector runs before
    it on this node, or (on a distributed learner) no collector has delivered yet. Steps without data once
    something was pushed are normal (a distributed learner's step whose wait for collectors timed out) and
    are not reported. ``warn_after=0``: never warn.

    Role: LEARNER -- the replay buffer lives with the learner; in a distributed run the
    collector's transitions reach the learner node with its context and are pushed there.
    """
    if not isinstance(warn_after, int) or isinstance(warn_after, bool) or warn_after < 0:
        raise ValueError(f'data_pusher: warn_after must be an int >= 0, got {warn_after!r}')
    _load()
    # steps with nothing to push before anything was pushed (-1: something was pushed, or it warned)
    empty = [0]

    def _push(ctx: OnlineRLContext) -> None:
        it = ctx.train_iter
        if ctx.transitions:
            push = buffer_.push
            if group_by_env:
                for t in ctx.transitions:
                    # a collector's transitions are plain dicts: no ABC check for them
                    push(t, {'env': t.get('env_id', 0) if type(t) is dict or isinstance(t, MappingABC) else 0,
                             'train_iter_data_collected': it})
            else:
                meta = {'train_iter_data_collected': it}
                for t in ctx.transitions:
                    push(t, meta)
        elif ctx.episodes:
            for ep in ctx.episodes:
                buffer_.push(ep, {'train_iter_data_collected': it})
        else:
            if empty[0] >= 0 and warn_after:
                empty[0] += 1
                if empty[0] >= warn_after:
                    empty[0] = -1
                    log.warning('data_pusher: nothing to push in its first %d steps (ctx.transitions and '
                                'ctx.episodes are empty): does a collector run before it on this node? (on a '
                                'distributed learner: has any collector delivered?)', warn_after)
            return
        empty[0] = -1

    return _push


class _Share(NamedTuple):
    """One buffer's part of every batch: the form all buffer setups are normalised to."""

    key: object              # its key in a dict of buffers (the batch is nested under it), else None
    buffer: ReplayBuffer  # as the user handed it (checked by use, not by class)
    rows: int             # rows it gives to each batch (0: none, for a tiny weight)
    need: int             # items it must hold before a batch is drawn
    span: Optional[slice]  # its rows in a concatenated batch (weighted list), else None: the whole batch


def _normalise_buffers(buffer_: object, batch_size: int, min_count: int) -> Tuple[str, List[_Share]]:
    """``('single' | 'list' | 'dict', shares)`` for one buffer, a list of ``(buffer, weight)`` pairs or a
    dict of buffers. A weighted list splits one batch of ``batch_size`` rows by the weights; every buffer
    of a dict gives a whole batch."""
    if isinstance(buffer_, MappingABC):
        if not buffer_:
            raise ValueError('offpolicy_data_fetcher: the dict of buffers is empty')
        return 'dict', [_Share(k, b, batch_size, min_count, None) for k, b in buffer_.items()]
    if isinstance(buffer_, (list, tuple)):
        pairs = []
        for i, pair in enumerate(buffer_):
            if not (isinstance(pair, (list, tuple)) and len(pair) == 2):
                raise ValueError(f'offpolicy_data_fetcher: item {i} of the buffer list must be a '
                                 f'(buffer, weight) pair, got {pair!r}')
            b, w = pair
            if not (isinstance(w, (int, float)) and w > 0):
                raise ValueError(f'offpolicy_data_fetcher: weight of buffer {i} must be > 0, got {w!r}')
            pairs.append((b, float(w)))
        if not pairs:
            raise ValueError('offpolicy_data_fetcher: the list of (buffer, weight) pairs is empty')
        shares, start = [], 0
        for (b, _), rows in zip(pairs, _split_sizes(batch_size, [w for _, w in pairs])):
            shares.append(_Share(None, b, rows, max(rows, 1), slice(start, start + rows)))
            start += rows
        return 'list', shares
    if not hasattr(buffer_, 'sample'):
        raise TypeError(f'offpolicy_data_fetcher: expected a buffer, a list of (buffer, weight) pairs or a '
                        f'dict of buffers; got {type(buffer_).__name__}')
    return 'single', [_Share(None, cast('ReplayBuffer', buffer_), batch_size, min_count, None)]


def _split_sizes(batch_size: int, weights: Sequence[float]) -> List[int]:
    """Split ``batch_size`` rows by ``weights`` (largest remainders get the leftover rows)."""
    total = sum(weights)
    raw = [batch_size * w / total for w in weights]
    sizes = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - sizes[i], reverse=True)
    for i in order[: batch_size - sum(sizes)]:
        sizes[i] += 1
    return sizes


def _sample_one(buffer_: ReplayBuffer, size: int, ctx: RLContext) -> _Sampled:
    """The batch of ``size`` rows of one buffer: the buffer's own batch (``sample_batch``: numpy columns
    gathered into tensors, with ``indices`` and, prioritized, ``weight``) as it is. A buffer without
    ``sample_batch`` gets its items collated into the same form."""
    kw = sample_arguments(buffer_, ctx.train_iter)  # e.g. staleness_check needs the train iteration
    # a BatchSampling buffer (pipeline.data.protocols); checked by attribute: isinstance against a
    # runtime Protocol walks its members on every call
    sample_batch = getattr(buffer_, 'sample_batch', None)
    if callable(sample_batch):
        batch = cast(Dict[str, object], sample_batch(size, **kw))
        return batch
    items = buffer_.sample(size, groupby=None, **kw)
    data = collate([it.data for it in items])
    if not isinstance(data, MappingABC):
        raise TypeError(f'offpolicy_data_fetcher: buffer items must be dicts of tensors/arrays/numbers '
                        f'(e.g. {{"obs": ..., "action": ..., "reward": ...}}) to be batched; the buffer holds '
                        f'{type(items[0].data).__name__} items')
    out: Dict[str, object] = dict(data)
    for k in ('indices', 'weight'):
        if k in out:
            raise ValueError(f'offpolicy_data_fetcher: the buffer items have a field named {k!r}, a name the batch '
                             f'gives the items\' buffer indices / importance-sampling weights; rename that field')
    index = [it.index for it in items]
    out['indices'] = torch.tensor(index, dtype=torch.int64)
    if items and 'priority_IS' in items[0].meta:
        out['weight'] = torch.tensor([it.meta['priority_IS'] for it in items], dtype=torch.float32)
    return out


def _cat(parts: Sequence[Mapping[str, object]]) -> Dict[str, object]:
    keys = parts[0].keys()
    for p in parts[1:]:
        if p.keys() != keys:
            raise ValueError(f'offpolicy_data_fetcher: buffers hold items with different keys '
                             f'({sorted(keys)} vs {sorted(p.keys())})')
    out: Dict[str, object] = {}
    for k in keys:
        col = [p[k] for p in parts]
        out[k] = (torch.cat(cast(List[torch.Tensor], col)) if isinstance(col[0], torch.Tensor)
                  else [x for c in cast(List[list], col) for x in c])
    return out


def _assemble(kind: str, shares: List[_Share], sampled: List[Optional[_Sampled]]) -> TrainBatch:
    """The batch from each share's batch (None for a share of no rows): one buffer's batch as
    it is, a weighted list's parts concatenated (rows of a buffer without weights weigh 1 when another
    buffer's rows have weights), a dict's batches under their names."""
    if kind == 'single':
        return cast('TrainBatch', sampled[0])  # one buffer: it gives rows
    if kind == 'dict':  # a TrainBatch per buffer (see TrainBatch)
        return cast('TrainBatch', {sh.key: data for sh, data in zip(shares, cast(List[_Sampled], sampled))})
    parts = [p for p in sampled if p is not None]
    if any('weight' in data for data in parts) and not all('weight' in data for data in parts):
        parts = [data if 'weight' in data else
                 {**data, 'weight': torch.ones(len(cast('torch.Tensor', data['indices'])), dtype=torch.float32)}
                 for data in parts]
    return cast('TrainBatch', _cat(parts))


def last_train_output(train_output: object) -> Optional[TrainOutput]:
    """The last update's :class:`~pipeline.data.records.TrainOutput` from ``ctx.train_output`` (a list
    of them; a bare dict, as ported DI-engine trainers write, is taken as it is), or None."""
    if isinstance(train_output, MappingABC):
        return cast('TrainOutput', train_output)
    if isinstance(train_output, list) and train_output and isinstance(train_output[-1], MappingABC):
        return cast('TrainOutput', train_output[-1])
    return None


def _priority_for(out: object, key: object) -> Optional[Priorities]:
    """``out['priority']``; for a buffer of a dict, that module's own (``out[key]['priority']``) first."""
    if not isinstance(out, MappingABC):
        return None
    if key is not None:
        sub = out.get(key)
        if isinstance(sub, MappingABC) and sub.get('priority') is not None:
            return cast('Priorities', sub['priority'])
    return cast('Optional[Priorities]', out.get('priority'))


def _write_priorities(buffer_: ReplayBuffer, index: Sequence[int], priority: object) -> None:
    if isinstance(priority, torch.Tensor):
        priority = priority.detach().cpu().numpy()
    priority = np.asarray(priority, dtype=np.float64).reshape(-1)
    if len(priority) != len(index):
        raise ValueError(f'offpolicy_data_fetcher: train_output has {len(priority)} priorities for a batch '
                         f'of {len(index)} rows; the learner must output one priority per row')
    if samples_by_priority(buffer_):
        cast(_TakesPriorities, buffer_).update_priority(index, priority)  # the buffer's sampler takes them
    else:  # a middleware with `wants_priorities` takes them from the update
        buffer_.update_many(index, meta={'priority': priority})


def _write_back(sampled: List[Tuple[_Share, List[int]]], train_output: Optional[TrainOutput]) -> None:
    """Write ``train_output``'s per-row ``priority`` to the items each prioritized share sampled: the one
    place priorities go back to buffers."""
    for share, index in sampled:
        pr = _priority_for(train_output, share.key)
        if pr is None:
            which = 'the buffer' if share.key is None else f'buffer {share.key!r}'
            raise ValueError(f'{which} uses prioritized replay but the train output has no "priority"'
                             f'{"" if share.key is None else " for it"}: use a learner whose loss outputs '
                             f'per-row priorities')
        _write_priorities(share.buffer, index, pr if share.span is None else pr[share.span])


WriteBack = Callable[[Optional['TrainOutput']], None]
"""A :class:`ReplaySource`'s ``on_trained``: an :data:`~pipeline.data.records.OnTrained` that also takes None."""


class BatchSource(Protocol):
    """Where :class:`~middleware.learner.TrainRounds` gets each round's batch.

    ``next(ctx)`` returns ``(batch, on_trained)``: the :class:`~pipeline.data.records.TrainBatch` to
    train on (None: too little data, the rounds stop) and a callable to run with that update's
    :class:`~pipeline.data.records.TrainOutput` once it is trained (e.g. write its priorities back),
    or None.
    """

    def next(self, ctx: RLContext) -> Tuple[Optional[TrainBatch], Optional[OnTrained]]:
        ...


class ReplaySource:
    """Training batches of ``cfg.policy.learn.batch_size`` rows from replay buffers: a :class:`BatchSource`.

    ``buffer_`` is one buffer, a list of ``(buffer, weight)`` pairs (one batch split across them by
    weight, largest remainders getting the leftover rows, and concatenated), or a dict of buffers (a
    dict of batches with the same keys). Every setup is normalised once into the same per-buffer
    shares; :meth:`next` samples them all through one function (in the setup's order), and the
    ``on_trained`` it returns writes the update's ``priority`` back to the buffers that take
    priorities (a ``PrioritizedSampler``, or any middleware with ``wants_priorities``): for a
    weighted list each buffer gets its rows' slice, for a dict each buffer its module's own
    ``priority`` when the output has one per module.

    :meth:`next` gives ``(None, None)`` while a buffer holds fewer than ``max(batch_size,
    cfg.policy.learn.learning_starts)`` items (a weighted list: fewer than its share, or fewer than that
    together). The batch (a :class:`~pipeline.data.records.TrainBatch`) is the buffer's batch as
    ``sample_batch`` returns it, a plain dict ``field -> [batch_size, ...]`` tensor (non-numeric fields
    as lists), with ``indices`` (the items' buffer indices) and, when the buffer samples with priorities,
    ``weight``.
    """

    def __init__(self, cfg: Mapping, buffer_: object, data_shortage_warning: bool = False) -> None:
        _load()
        learn = cfg['policy']['learn']
        self.batch_size = int(learn['batch_size'])
        self.min_count = max(self.batch_size, int(learn.get('learning_starts', self.batch_size) or self.batch_size))
        self.kind, self.shares = _normalise_buffers(buffer_, self.batch_size, self.min_count)
        self.data_shortage_warning = data_shortage_warning

    def next(self, ctx: RLContext) -> Tuple[Optional[TrainBatch], Optional[WriteBack]]:
        """``(batch, on_trained)``, or ``(None, None)`` when the buffers hold too little. ``on_trained`` also
        takes None (no output): it then raises, as for an output without ``priority``."""
        shares = self.shares
        counts = [sh.buffer.count() for sh in shares]
        if any(c < sh.need for c, sh in zip(counts, shares)) or sum(counts) < self.min_count:
            if self.data_shortage_warning:
                if self.kind == 'single':
                    log.warning('replay buffer holds %d items, fewer than %d: no training this round',
                                counts[0], self.min_count)
                else:
                    log.warning('replay buffers hold %s items (each needs %s, together %d): no training this '
                                'round', counts, [sh.need for sh in shares], self.min_count)
            return None, None
        sampled = [_sample_one(sh.buffer, sh.rows, ctx) if sh.rows else None for sh in shares]
        batch = _assemble(self.kind, shares, sampled)
        prioritized = [(sh, cast('torch.Tensor', s['indices']).tolist()) for sh, s in zip(shares, sampled)
                       if s is not None and uses_per(sh.buffer)]  # where the priorities go back
        if not prioritized:
            return batch, None
        return batch, functools.partial(_write_back, prioritized)


class FetchMiddleware(Protocol):
    """What :func:`offpolicy_data_fetcher` returns: the middleware and its :class:`ReplaySource` (``source``)."""

    source: ReplaySource

    def __call__(self, ctx: RLContext) -> Generator[None, None, None]: ...


@for_roles(Role.LEARNER, reads=["@buffer", "train_iter", "train_output?"], writes=["train_data"])
def offpolicy_data_fetcher(cfg: Mapping[str, object], buffer_: Buffers, data_shortage_warning: bool = False
                           ) -> FetchMiddleware:
    """Sample one training batch of ``cfg.policy.learn.batch_size`` rows from ``buffer_``.

    ``buffer_`` is one buffer, a list of ``(buffer, weight)`` pairs (the batch is split across them
    by weight and concatenated), or a dict of buffers (``ctx.train_data`` becomes a dict of batches
    with the same keys). The batches come from a :class:`ReplaySource` (``fn.source``), the source
    ``OffPolicyLearner`` uses round by round.

    Reads ``ctx.train_iter`` (for ``staleness_check`` buffers). Writes ``ctx.train_data``: a
    :class:`~pipeline.data.records.TrainBatch`, the buffer's batch as it comes from ``sample_batch``,
    a plain dict ``field -> [batch_size, ...] tensor`` (fields that are not numbers or arrays, e.g.
    strings, are plain lists; ``indices`` holds the items' buffer indices and, when the buffer uses
    prioritized replay, ``weight`` the importance-sampling weights; use
    :func:`pipeline.data.to_treetensor` for attribute access), or ``None`` when a buffer holds fewer
    than ``max(batch_size, cfg.policy.learn.learning_starts)`` items.

    Backward part (after the yield): when a buffer samples by priority (a ``PrioritizedSampler``, or any
    middleware with ``wants_priorities``), reads the last update's ``priority`` from ``ctx.train_output`` (a list of
    :class:`~pipeline.data.records.TrainOutput`, as ``trainer`` writes it; a bare dict is read too), one
    value per row (e.g. ``|TD error|``), and writes it back as the sampled items' priorities.
    Role: LEARNER.
    """
    source = ReplaySource(cfg, buffer_, data_shortage_warning)

    def _fetch(ctx: RLContext) -> Generator[None, None, None]:
        batch, on_trained = source.next(ctx)
        ctx.train_data = batch
        yield
        if on_trained is not None:
            on_trained(last_train_output(ctx.train_output))

    setattr(_fetch, '__provided__', buffered(buffer_))  # a buffer filled before the run needs no pusher (fields check)
    setattr(_fetch, 'source', source)
    return cast(FetchMiddleware, _fetch)  # a function with a ``source`` attribute
