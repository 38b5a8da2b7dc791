"""Offline RL middleware: training batches from a fixed dataset, epoch by epoch (``OfflineRLContext``).

An offline pipeline is::

    with task.start(ctx=OfflineRLContext()):
        task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))   # EVALUATOR
        task.use(offline_data_fetcher(cfg, dataset))                            # LEARNER
        task.use(trainer(cfg, policy.learn_mode))                               # LEARNER
        task.use(CkptSaver(policy, run_dir, train_freq=1000))                   # LEARNER
        task.use(offline_logger(...))
        task.use(termination_checker(max_train_iter=10_000))
        task.run()

Importing this module loads neither torch nor the datasets.
"""
from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Dict, Iterator, Mapping, Optional, Protocol, TextIO, TypedDict, cast

import numpy as np

from contexts import OfflineRLContext
from middleware.functional.logger import scalar_means
from pipeline import task
from pipeline.runtime.roles import Role, for_all_roles, for_roles

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

    from pipeline.data.records import TrainBatch

__all__ = ['offline_data_fetcher', 'offline_logger', 'MinibatchDataset', 'OfflineFetcher', 'OfflineLogger']


class MinibatchDataset(Protocol):
    """What :func:`offline_data_fetcher` reads: a :class:`pipeline.offline.OfflineDataset` or
    :class:`pipeline.offline.ChunkedDataset`."""

    def __len__(self) -> int: ...

    def num_minibatches(self, batch_size: int, drop_last: bool = False) -> int: ...

    def iter_minibatches(self, batch_size: int, rng: Optional[np.random.Generator] = None,
                         drop_last: bool = False) -> Iterator[Dict[str, np.ndarray]]: ...


class OfflineFetcher(Protocol):
    """What :func:`offline_data_fetcher` returns: the middleware and ``minibatches_per_epoch``."""

    minibatches_per_epoch: int

    def __call__(self, ctx: OfflineRLContext) -> None: ...


class _OfflineLogState(TypedDict):
    """What :func:`offline_logger`'s middleware keeps between calls."""

    writer: Optional[SummaryWriter]
    tb_failed: bool
    acc: Dict[str, float]  # train scalar -> sum since the last print
    n: int                 # train steps summed in acc
    last_eval: object      # the last eval_output logged (compared by identity)


class OfflineLogger(Protocol):
    """What :func:`offline_logger` returns: the middleware and ``close()`` (closes the TensorBoard writer)."""

    def __call__(self, ctx: OfflineRLContext) -> None: ...

    def close(self) -> None: ...


@for_roles(Role.LEARNER, reads=["train_epoch"], writes=["train_data", "train_epoch"])
def offline_data_fetcher(cfg: Mapping, dataset: MinibatchDataset, drop_last: bool = False,
                         seed: Optional[int] = None, max_epoch: Optional[int] = None) -> OfflineFetcher:
    """One minibatch of ``cfg.policy.learn.batch_size`` rows of ``dataset`` per call, epoch after epoch.

    ``dataset`` is a :class:`pipeline.offline.OfflineDataset` or a
    :class:`pipeline.offline.ChunkedDataset` (anything with ``iter_minibatches(batch_size, rng,
    drop_last)`` and ``num_minibatches(batch_size, drop_last)``). Each epoch visits every row exactly
    once in a fresh random order (numpy generator seeded by ``seed``, default ``cfg.seed``; a chunked
    dataset shuffles chunk order and rows within chunks); an epoch is ``ceil(rows / batch_size)``
    minibatches, the last one holding the remaining ``rows % batch_size`` rows, or ``floor(rows /
    batch_size)`` full minibatches with ``drop_last``.

    Reads ``ctx.train_epoch``. Writes ``ctx.train_data`` (a :class:`~pipeline.data.records.TrainBatch`:
    a dict ``column -> [rows, ...]`` tensor, ``obs``, ``action``, ``reward``, ``next_obs``,
    ``terminated``, ``truncated``) and, after serving
    the last minibatch of an epoch, advances ``ctx.train_epoch`` by one. With ``max_epoch``, sets
    ``task.finish`` once ``ctx.train_epoch`` reaches it (the step still runs to its end).
    Role: LEARNER.
    """
    batch_size = int(cfg['policy']['learn']['batch_size'])
    if batch_size < 1:
        raise ValueError(f'offline_data_fetcher: policy.learn.batch_size must be >= 1, got {batch_size}')
    if not hasattr(dataset, 'iter_minibatches'):
        raise TypeError(f'offline_data_fetcher needs an OfflineDataset or ChunkedDataset (pipeline.offline), got '
                        f'{type(dataset).__name__}; wrap a dict of arrays with pipeline.offline.OfflineDataset')
    per_epoch = int(dataset.num_minibatches(batch_size, drop_last))
    if per_epoch < 1:
        raise ValueError(f'offline_data_fetcher: the dataset has {len(dataset)} rows, fewer than one minibatch of '
                         f'{batch_size} with drop_last=True')
    import torch  # lazy: `import middleware` loads no torch

    rng = np.random.default_rng(int(cfg.get('seed', 0)) if seed is None else seed)
    it: Optional[Iterator[Dict[str, np.ndarray]]] = None
    served = 0

    def _fetch(ctx: OfflineRLContext) -> None:
        nonlocal it, served
        if it is None or served == per_epoch:
            it = dataset.iter_minibatches(batch_size, rng, drop_last)
            served = 0
        mb = next(it)
        served += 1
        # the dataset's columns (obs, action, reward, next_obs, terminated, truncated): a TrainBatch
        ctx.train_data = cast('TrainBatch', {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in mb.items()})
        if served == per_epoch:
            ctx.train_epoch += 1
            if max_epoch is not None and ctx.train_epoch >= max_epoch:
                task.finish = True

    setattr(_fetch, 'minibatches_per_epoch', per_epoch)
    return cast(OfflineFetcher, _fetch)  # a function with a ``minibatches_per_epoch`` attribute


@for_all_roles(reads=["train_iter", "train_epoch", "train_output?", "eval_output?"])
def offline_logger(log_dir: Optional[str] = None, train_show_freq: int = 100, stream: Optional[TextIO] = None
                   ) -> OfflineLogger:
    """Log an offline pipeline against train iterations (an offline run has no env steps).

    Reads ``ctx.train_iter``, ``ctx.train_epoch``, ``ctx.train_output`` (the scalar entries of its
    :class:`~pipeline.data.records.TrainOutput` list; several modules as ``module/metric``) and ``ctx.eval_output``. Writes nothing to the context. Every
    ``train_show_freq`` iterations it writes the mean of each scalar since the last write to
    TensorBoard under ``train/`` (with ``log_dir``; skipped with a warning when tensorboard is not
    installed) and prints one line (iteration, epoch, losses) to ``stream`` (default stderr);
    after every evaluation it writes ``eval/episode_return`` and prints the mean return.
    ``fn.close()`` closes the TensorBoard writer.
    """
    state: _OfflineLogState = {'writer': None, 'tb_failed': log_dir is None, 'acc': {}, 'n': 0, 'last_eval': None}

    def writer() -> Optional[SummaryWriter]:
        if state['writer'] is None and not state['tb_failed']:
            try:
                from torch.utils.tensorboard import SummaryWriter  # optional extra: log (tensorboard)
                state['writer'] = SummaryWriter(log_dir)
            except Exception as e:  # noqa: BLE001 - ImportError without tensorboard
                state['tb_failed'] = True
                log.warning('offline_logger: TensorBoard unavailable (%s); scalars are not written', e)
        return state['writer']

    def _log(ctx: OfflineRLContext) -> None:
        out = stream if stream is not None else sys.stderr
        if ctx.train_output:
            for k, v in scalar_means(ctx.train_output).items():
                state['acc'][k] = state['acc'].get(k, 0.0) + v
            state['n'] += 1
            if train_show_freq and ctx.train_iter % train_show_freq == 0:
                means = {k: v / state['n'] for k, v in state['acc'].items()}
                w = writer()
                if w is not None:
                    for k, v in means.items():
                        w.add_scalar(f'train/{k}', v, ctx.train_iter)
                losses = ' '.join(f'{k} {v:.4g}' for k, v in sorted(means.items()) if k.endswith('total_loss'))
                print(f'train_iter {ctx.train_iter} epoch {ctx.train_epoch} {losses}', file=out)
                state['acc'], state['n'] = {}, 0
        eo = ctx.get('eval_output')
        if eo is not None and eo is not state['last_eval'] and 'episode_return' in eo:
            state['last_eval'] = eo
            mean = float(eo['episode_return'].mean())
            w = writer()
            if w is not None:
                w.add_scalar('eval/episode_return', mean, ctx.train_iter)
            print(f'eval at train_iter {ctx.train_iter}: mean return {mean:.1f} over '
                  f'{len(eo["episode_return"])} episodes', file=out)

    def close() -> None:
        if state['writer'] is not None:
            state['writer'].close()
            state['writer'] = None

    setattr(_log, 'close', close)
    return cast(OfflineLogger, _log)  # a function with a ``close`` attribute
