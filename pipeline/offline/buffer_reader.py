"""Offline datasets from rlpipe's own replay buffers: a buffer in memory or a ``DequeBuffer.save_data`` file.

A replay buffer holds transitions of several envs interleaved (``StepCollector`` pushes one per env
and step, each with an ``env_id``), and a full buffer has dropped its oldest items. The transitions
are regrouped per env, keeping their order inside each env, so that every env's transitions form
consecutive episodes. The first episode of an env may have lost its start (dropped by the buffer:
its rows are kept, ``next_obs`` are exact); its last one may have no end yet (the run stopped
mid-episode): ``unfinished='drop'`` removes those rows, ``'error'`` refuses the buffer.

Files are read with ``DequeBuffer.load_data``, which loads with ``torch.load(weights_only=True)``:
a file cannot run code.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np
import torch

from pipeline.data import DequeBuffer

from .dataset import REQUIRED_KEYS, DatasetError, OfflineDataset

__all__ = ['from_buffer', 'from_buffer_file']


def _column(values: List[object], key: str, where: str) -> np.ndarray:
    try:
        return np.stack([np.asarray(v.numpy() if hasattr(v, 'numpy') else v) for v in values])
    except ValueError as e:
        raise DatasetError(f'{where}: shape mismatch, the items\' {key!r} have different shapes ({e})') from None


def from_buffer(buffer_: DequeBuffer, unfinished: str = 'error', name: Optional[str] = None) -> OfflineDataset:
    """An :class:`OfflineDataset` of the 1-step transitions in ``buffer_`` (oldest first, grouped per
    ``env_id``; see the module docstring). ``unfinished``: ``'error'`` or ``'drop'``, what to do
    with an env's last episode when it has no end.

    Raises :class:`DatasetError` for an empty buffer, items that are not dicts or lack columns,
    n-step transitions (an ``nstep`` column other than 1: their ``reward``/``next_obs`` are not one
    step's) and what :func:`validate_columns` refuses.
    """
    where = name or 'replay buffer'
    if unfinished not in ('error', 'drop'):
        raise ValueError(f"unfinished must be 'error' or 'drop', got {unfinished!r}")
    n = buffer_.count()
    if n == 0:
        raise DatasetError(f'{where}: the buffer is empty')
    items = [buffer_.get(i).data for i in range(n)]
    first = items[0]
    if not isinstance(first, dict):
        raise DatasetError(f'{where}: items are {type(first).__name__}, not transition dicts')
    missing = [k for k in REQUIRED_KEYS if k not in first]
    if missing:
        raise DatasetError(f'{where}: missing column(s) {", ".join(map(repr, missing))} in the buffer\'s items; an '
                           f'offline dataset needs {", ".join(REQUIRED_KEYS)}')
    if 'nstep' in first and any(int(np.asarray(it.get('nstep', 1))) != 1 for it in items):
        raise DatasetError(f'{where}: holds n-step transitions (an "nstep" column other than 1); their reward and '
                           f'next_obs span several steps: save a buffer of 1-step transitions')
    env_ids = np.asarray([int(np.asarray(it.get('env_id', 0))) for it in items])
    order = np.argsort(env_ids, kind='stable')
    keys = [k for k in REQUIRED_KEYS]
    cols: Dict[str, np.ndarray] = {}
    for k in keys:
        try:
            cols[k] = _column([items[i][k] for i in order], k, where)
        except KeyError:
            raise DatasetError(f'{where}: missing column {k!r} in some of the buffer\'s items') from None
    for k in ('reward', 'terminated', 'truncated'):
        cols[k] = cols[k].reshape(len(order))
    env_sorted = env_ids[order]
    done = cols['terminated'].astype(bool) | cols['truncated'].astype(bool)
    keep = np.ones(len(order), dtype=bool)
    for env in np.unique(env_sorted):
        rows = np.flatnonzero(env_sorted == env)
        ends = rows[done[rows]]
        tail_start = int(ends[-1]) + 1 if len(ends) else int(rows[0])
        if tail_start <= rows[-1]:
            if unfinished == 'error':
                raise DatasetError(f'{where}: an episode without an end (env {int(env)}: its last '
                                   f'{int(rows[-1]) - tail_start + 1} transitions are neither terminated nor '
                                   f'truncated); pass unfinished="drop" to leave them out')
            keep[tail_start:int(rows[-1]) + 1] = False
    if not keep.any():
        raise DatasetError(f'{where}: no finished episode in the buffer')
    cols = {k: v[keep] for k, v in cols.items()}
    return OfflineDataset(cols, where)


def from_buffer_file(path: str, unfinished: str = 'error') -> OfflineDataset:
    """:func:`from_buffer` of the items a ``DequeBuffer.save_data`` file holds."""


    try:
        payload = torch.load(path, map_location='cpu', weights_only=True)
        size = int(payload.get('count') or payload.get('size') or 0) if isinstance(payload, dict) else 0
    except Exception as e:  # noqa: BLE001 - UnpicklingError, OSError, RuntimeError...
        raise DatasetError(f'{path}: not a replay buffer file saved by DequeBuffer.save_data '
                           f'({type(e).__name__}: {e})') from None
    if size < 1:
        raise DatasetError(f'{path}: not a replay buffer file saved by DequeBuffer.save_data, or it is empty')
    buf = DequeBuffer(size, columnar=False)
    try:
        buf.load_data(path)
    except ValueError as e:
        raise DatasetError(str(e)) from None
    return from_buffer(buf, unfinished, name=path)
