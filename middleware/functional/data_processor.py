"""Replay-buffer middleware: push collected data, fetch training batches, write PER priorities."""
from __future__ import annotations

import logging
from collections.abc import Mapping as MappingABC
from typing import TYPE_CHECKING, Any, Callable, Dict, Generator, List, Mapping, Sequence, Tuple

import numpy as np

from contexts import RLContext
from pipeline.runtime.contracts import buffered
from pipeline.runtime.roles import Role, for_roles

if TYPE_CHECKING:
    from pipeline.data.protocols import ReplayBuffer

__all__ = ['data_pusher', 'offpolicy_data_fetcher', 'uses_per']

log = logging.getLogger(__name__)

# Bound by _load() when the first pusher or fetcher is made (or uses_per is called), not at import: torch and
# pipeline.data (every buffer module) would make `import middleware` ten times slower.
torch: Any = None
collate: Any = None
BatchSampling: Any = None
wants_priorities: Any = None


def _load() -> None:
    global torch, collate, BatchSampling, wants_priorities
    if wants_priorities is None:
        import torch
        from pipeline.data.collate import collate
        from pipeline.data.protocols import BatchSampling, wants_priorities


def uses_per(buffer_: Any) -> bool:
    """True when a middleware of ``buffer_`` takes priorities back (``PriorityExperienceReplay``, or
    any middleware with ``wants_priorities = True``: :class:`pipeline.data.protocols.PriorityFeedback`)."""
    _load()
    return wants_priorities(buffer_)


def _sample_kwargs(buffer_: Any, ctx: RLContext) -> Dict[str, Any]:
    """Extra ``sample`` arguments the buffer's middleware ask for (``SampleArguments``: e.g.
    ``staleness_check`` needs the current train iteration)."""
    out: Dict[str, Any] = {}
    for m in getattr(buffer_, 'middleware', ()):
        fn = getattr(m, 'sample_kwargs', None)
        if fn is not None:
            out.update(fn(ctx.train_iter))
    return out


@for_roles(Role.LEARNER, reads=["trajectories|episodes", "train_iter"], writes=["@buffer"])
def data_pusher(cfg: Mapping, buffer_: ReplayBuffer, group_by_env: bool = True,
                warn_after: int = 10) -> Callable[[Any], None]:
    """Push collected data into ``buffer_``.

    Reads ``ctx.trajectories`` (a list of transitions: each is pushed as one item) or, when that is
    empty, ``ctx.episodes`` (a list of episodes: each whole episode is pushed as one item), and
    ``ctx.train_iter``. Writes nothing to the context (the data is left in place for later
    middleware such as loggers).

    Each item's meta is ``{'env': <env_id>, 'train_iter_data_collected': ctx.train_iter}`` when
    ``group_by_env`` (so ``buffer_.sample(groupby='env')`` and ``staleness_check`` work), else
    only the train iteration.

    A step with neither trajectories nor episodes pushes nothing. When that is so for each of the first
    ``warn_after`` steps (nothing was ever pushed), it logs one warning: usually no collector runs before
    it on this node, or (on a distributed learner) no collector has delivered yet. Steps without data once
    something was pushed are normal (a distributed learner's step whose wait for collectors timed out) and
    are not reported. ``warn_after=0``: never warn.

    Role: LEARNER -- the replay buffer lives with the learner; in a distributed run the
    collector's trajectories reach the learner node with its context and are pushed there.
    """
    if not isinstance(warn_after, int) or isinstance(warn_after, bool) or warn_after < 0:
        raise ValueError(f'data_pusher: warn_after must be an int >= 0, got {warn_after!r}')
    _load()
    # steps with nothing to push before anything was pushed (-1: something was pushed, or it warned)
    empty = [0]

    def _push(ctx: RLContext) -> None:
        it = ctx.train_iter
        if ctx.trajectories:
            push = buffer_.push
            if group_by_env:
                for t in ctx.trajectories:
                    push(t, {'env': t.get('env_id', 0) if isinstance(t, MappingABC) else 0,
                             'train_iter_data_collected': it})
            else:
                meta = {'train_iter_data_collected': it}
                for t in ctx.trajectories:
                    push(t, meta)
        elif ctx.episodes:
            for ep in ctx.episodes:
                buffer_.push(ep, {'train_iter_data_collected': it})
        else:
            if empty[0] >= 0 and warn_after:
                empty[0] += 1
                if empty[0] >= warn_after:
                    empty[0] = -1
                    log.warning('data_pusher: nothing to push in its first %d steps (ctx.trajectories and '
                                'ctx.episodes are empty): does a collector run before it on this node? (on a '
                                'distributed learner: has any collector delivered?)', warn_after)
            return
        empty[0] = -1

    return _push


def _normalise_buffers(buffer_: Any) -> Tuple[str, Any]:
    if isinstance(buffer_, MappingABC):
        if not buffer_:
            raise ValueError('offpolicy_data_fetcher: the dict of buffers is empty')
        return 'dict', dict(buffer_)
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
        return 'list', pairs
    if not hasattr(buffer_, 'sample'):
        raise TypeError(f'offpolicy_data_fetcher: expected a buffer, a list of (buffer, weight) pairs or a '
                        f'dict of buffers; got {type(buffer_).__name__}')
    return 'single', buffer_


def _split_sizes(batch_size: int, weights: Sequence[float]) -> List[int]:
    """Split ``batch_size`` rows by ``weights`` (largest remainders get the leftover rows)."""
    total = sum(weights)
    raw = [batch_size * w / total for w in weights]
    sizes = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - sizes[i], reverse=True)
    for i in order[: batch_size - sum(sizes)]:
        sizes[i] += 1
    return sizes


def _sample_one(buffer_: ReplayBuffer, size: int, ctx: RLContext) -> Tuple[Dict[str, Any], Any]:
    """(batch dict with 'weight' if PER IS weights, indices) for ``size`` rows: the buffer's own
    batch (``sample_batch``: numpy columns gathered into tensors) is used as it is."""
    kw = _sample_kwargs(buffer_, ctx)
    if isinstance(buffer_, BatchSampling):
        sb = buffer_.sample_batch(size, **kw)
        data = sb.data
        if type(data) is not dict:
            if not isinstance(data, MappingABC):
                items = sb.items
                kind = type(items[0].data).__name__ if items else type(data).__name__
                raise TypeError(f'offpolicy_data_fetcher: buffer items must be dicts of tensors/arrays/numbers '
                                f'(e.g. {{"obs": ..., "action": ..., "reward": ...}}) to be batched; the buffer '
                                f'holds {kind} items')
            data = dict(data)
        if sb.weight is not None:
            data = dict(data)
            data['weight'] = sb.weight
        return data, sb.index
    items = buffer_.sample(size, **kw)
    data = collate([it.data for it in items])
    if not isinstance(data, dict):
        raise TypeError(f'offpolicy_data_fetcher: buffer items must be dicts of tensors/arrays/numbers '
                        f'(e.g. {{"obs": ..., "action": ..., "reward": ...}}) to be batched; the buffer holds '
                        f'{type(items[0].data).__name__} items')
    if items and 'priority_IS' in items[0].meta:
        data['weight'] = torch.tensor([it.meta['priority_IS'] for it in items], dtype=torch.float32)
    return data, [it.index for it in items]


def _cat(parts: List[Dict[str, Any]]) -> Dict[str, Any]:
    keys = parts[0].keys()
    for p in parts[1:]:
        if p.keys() != keys:
            raise ValueError(f'offpolicy_data_fetcher: buffers hold items with different keys '
                             f'({sorted(keys)} vs {sorted(p.keys())})')
    out = {}
    for k in keys:
        col = [p[k] for p in parts]
        out[k] = torch.cat(col) if isinstance(col[0], torch.Tensor) else [x for c in col for x in c]
    return out


def _write_priorities(buffer_: Any, index: Sequence[int], priority: Any) -> None:
    if isinstance(priority, torch.Tensor):
        priority = priority.detach().cpu().numpy()
    priority = np.asarray(priority, dtype=np.float64).reshape(-1)
    if len(priority) != len(index):
        raise ValueError(f'offpolicy_data_fetcher: train_output has {len(priority)} priorities for a batch '
                         f'of {len(index)} rows; the learner must output one priority per row')
    if hasattr(buffer_, 'update_many'):
        buffer_.update_many(index, meta={'priority': priority})
    else:
        for i, p in zip(index, priority.tolist()):
            buffer_.update(i, meta={'priority': p})


def _priority_of(train_output: Any) -> Any:
    if isinstance(train_output, MappingABC):
        return train_output.get('priority')
    if isinstance(train_output, list) and train_output and isinstance(train_output[-1], MappingABC):
        return train_output[-1].get('priority')
    return None


@for_roles(Role.LEARNER, reads=["@buffer", "train_iter", "train_output?"], writes=["train_data"])
def offpolicy_data_fetcher(cfg: Mapping, buffer_: Any, data_shortage_warning: bool = False
                           ) -> Callable[[Any], Generator]:
    """Sample one training batch of ``cfg.policy.learn.batch_size`` rows from ``buffer_``.

    ``buffer_`` is one buffer, a list of ``(buffer, weight)`` pairs (the batch is split across them
    by weight and concatenated), or a dict of buffers (``ctx.train_data`` becomes a dict of batches
    with the same keys).

    Reads ``ctx.train_iter`` (for ``staleness_check`` buffers). Writes ``ctx.train_data``: the
    buffer's batch as it comes from ``sample_batch``, a plain dict ``field -> [batch_size, ...]
    tensor`` (fields that are not numbers or arrays, e.g. strings, are plain lists; ``weight`` holds
    the importance-sampling weights when the buffer uses prioritized replay; use
    :func:`pipeline.data.to_treetensor` for attribute access), or ``None`` when a buffer holds fewer
    than ``max(batch_size, cfg.policy.learn.learning_starts)`` items.

    Backward part (after the yield): when a buffer uses ``PriorityExperienceReplay`` (any middleware
    with ``wants_priorities``), reads
    ``ctx.train_output['priority']`` (one value per row, e.g. ``|TD error|``) and writes it back
    as the sampled items' priorities. ``OffPolicyLearner`` runs this right after each train step.
    Role: LEARNER.
    """
    _load()
    learn = cfg['policy']['learn']
    batch_size = int(learn['batch_size'])
    min_count = max(batch_size, int(learn.get('learning_starts', batch_size) or batch_size))
    kind, bufs = _normalise_buffers(buffer_)

    def _fetch(ctx: RLContext) -> Generator:
        if kind == 'single':
            if bufs.count() < min_count:
                if data_shortage_warning:
                    log.warning('replay buffer holds %d items, fewer than %d: no training this round',
                                bufs.count(), min_count)
                ctx.train_data = None
                yield
                return
            data, index = _sample_one(bufs, batch_size, ctx)
            ctx.train_data = data
            yield
            if uses_per(bufs):
                pr = _priority_of(ctx.train_output)
                if pr is None:
                    raise ValueError('the buffer uses prioritized replay but ctx.train_output has no '
                                     '"priority": use a learner whose loss outputs per-row priorities')
                _write_priorities(bufs, index, pr)
        elif kind == 'list':
            sizes = _split_sizes(batch_size, [w for _, w in bufs])
            if any(b.count() < max(s, 1) for (b, _), s in zip(bufs, sizes)) or \
                    sum(b.count() for b, _ in bufs) < min_count:
                ctx.train_data = None
                yield
                return
            parts, indices = [], []
            for (b, _), s in zip(bufs, sizes):
                if s == 0:
                    indices.append([])
                    continue
                d, idx = _sample_one(b, s, ctx)
                parts.append(d)
                indices.append(idx)
            if any('weight' in p for p in parts) and not all('weight' in p for p in parts):
                for p in parts:
                    if 'weight' not in p:
                        p['weight'] = torch.ones(len(next(iter(p.values()))), dtype=torch.float32)
            ctx.train_data = _cat(parts)
            yield
            pr = None
            start = 0
            for (b, _), s, idx in zip(bufs, sizes, indices):
                if s and uses_per(b):
                    if pr is None:
                        pr = _priority_of(ctx.train_output)
                        if pr is None:
                            raise ValueError('a buffer uses prioritized replay but ctx.train_output has '
                                             'no "priority"')
                    _write_priorities(b, idx, pr[start:start + s])
                start += s
        else:  # dict of buffers
            if any(b.count() < min_count for b in bufs.values()):
                ctx.train_data = None
                yield
                return
            out, indices = {}, {}
            for name, b in bufs.items():
                d, idx = _sample_one(b, batch_size, ctx)
                out[name] = d
                indices[name] = idx
            ctx.train_data = out
            yield
            for name, b in bufs.items():
                if uses_per(b):
                    to = ctx.train_output
                    pr = None
                    if isinstance(to, MappingABC) and isinstance(to.get(name), MappingABC):
                        pr = to[name].get('priority')
                    if pr is None:
                        pr = _priority_of(to)
                    if pr is None:
                        raise ValueError(f'buffer {name!r} uses prioritized replay but ctx.train_output '
                                         f'has no "priority" for it')
                    _write_priorities(b, indices[name], pr)

    _fetch.__provided__ = buffered(buffer_)  # a buffer filled before the run needs no pusher (fields check)
    return _fetch
