"""An offline dataset held in memory: a dict of equal-length arrays, checked before any training.

Columns (one row per transition, episodes stored one after another in time order):

- ``obs`` ``[N, ...]`` and ``next_obs`` ``[N, ...]`` (the same shape): the observation before and
  after the step, kept exactly as recorded (``next_obs`` of an episode's last row is its final
  observation, never the next episode's first one);
- ``action`` ``[N]`` (integer: discrete) or ``[N, act_dim]`` (float: continuous);
- ``reward`` ``[N]``; ``terminated`` ``[N]`` and ``truncated`` ``[N]`` (bool).

An episode ends at a row whose ``terminated`` or ``truncated`` is set; the next row starts the next
episode. :func:`validate_columns` refuses a dataset whose last episode has no end.
"""
from __future__ import annotations

from typing import Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

__all__ = ['DatasetError', 'REQUIRED_KEYS', 'OfflineDataset', 'validate_columns', 'normalise_columns',
           'iter_permuted_minibatches']

#: the columns every offline dataset must have
REQUIRED_KEYS = ('obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated')


class DatasetError(ValueError):
    """A dataset that cannot be trained on; the message names the problem (and the column, row)."""


def normalise_columns(columns: Mapping[str, object]) -> Dict[str, np.ndarray]:
    """The columns as numpy arrays with training dtypes: float32 observations and rewards, int64
    discrete actions (float32 continuous ones), bool ``terminated``/``truncated``. Extra columns are
    kept as they are; arrays already in those dtypes are not copied. Call :func:`validate_columns` first
    (this does not check anything)."""
    out = {k: np.asarray(v) for k, v in columns.items()}
    for k in ('obs', 'next_obs', 'reward'):
        out[k] = out[k].astype(np.float32, copy=False)
    out['reward'] = out['reward'].reshape(len(out['reward']))
    a = out['action']
    if np.issubdtype(a.dtype, np.integer) or a.dtype == np.bool_:
        out['action'] = a.astype(np.int64, copy=False).reshape(len(a))
    else:
        out['action'] = a.astype(np.float32, copy=False)
    for k in ('terminated', 'truncated'):
        out[k] = out[k].astype(bool, copy=False).reshape(len(out[k]))
    return out


def validate_columns(columns: object, where: str = 'dataset', require_end: bool = True) -> int:
    """Check a dict of arrays and return its number of rows.

    Raises :class:`DatasetError` with one message naming the first problem found: not a mapping,
    missing columns, columns of different lengths, ``obs``/``next_obs`` of different shapes,
    ``reward``/``terminated``/``truncated`` that are not one value per row, non-finite values in
    ``reward``, ``obs``, ``next_obs`` or a float ``action`` (with the first bad row), an empty
    dataset, or (``require_end``) a last episode without an end (neither ``terminated`` nor
    ``truncated`` on the last row).
    """
    if not isinstance(columns, Mapping):
        raise DatasetError(f'{where}: expected a dict of arrays, got {type(columns).__name__}')
    missing = [k for k in REQUIRED_KEYS if k not in columns]
    if missing:
        raise DatasetError(f'{where}: missing column(s) {", ".join(map(repr, missing))}; an offline dataset needs '
                           f'{", ".join(REQUIRED_KEYS)}')
    arrays = {k: np.asarray(columns[k]) for k in REQUIRED_KEYS}
    for k, a in arrays.items():
        if a.ndim == 0:
            raise DatasetError(f'{where}: column {k!r} is a scalar; every column needs one entry per row')
    n = len(arrays['reward'])
    lengths = {k: len(a) for k, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        detail = ', '.join(f'{k}={v}' for k, v in lengths.items())
        raise DatasetError(f'{where}: shape mismatch, the columns have different numbers of rows ({detail})')
    if n == 0:
        raise DatasetError(f'{where}: the dataset is empty (0 rows)')
    if arrays['obs'].shape != arrays['next_obs'].shape:
        raise DatasetError(f'{where}: shape mismatch, obs is {arrays["obs"].shape} but next_obs is '
                           f'{arrays["next_obs"].shape}')
    for k in ('reward', 'terminated', 'truncated'):
        if arrays[k].shape != (n,) and arrays[k].shape != (n, 1):
            raise DatasetError(f'{where}: shape mismatch, {k!r} must hold one value per row ([{n}]), got '
                               f'{arrays[k].shape}')
    checked = ['reward', 'obs', 'next_obs']
    if np.issubdtype(arrays['action'].dtype, np.floating):
        checked.append('action')
    for k in checked:
        a = arrays[k]
        if not np.issubdtype(a.dtype, np.number) or np.issubdtype(a.dtype, np.integer):
            continue
        finite = np.isfinite(a.reshape(n, -1)).all(axis=1)
        if not finite.all():
            row = int(np.flatnonzero(~finite)[0])
            kind = 'NaN' if np.isnan(a.reshape(n, -1)[row]).any() else 'infinite'
            raise DatasetError(f'{where}: {kind} {"rewards" if k == "reward" else "values in " + repr(k)} '
                               f'({int((~finite).sum())} row(s), the first is row {row})')
    for k in ('terminated', 'truncated'):
        a = arrays[k]
        if a.dtype != np.bool_ and not np.isin(a, (0, 1)).all():
            raise DatasetError(f'{where}: {k!r} must be booleans (0/1), found other values')
    if require_end:
        last_end = bool(arrays['terminated'].reshape(n)[-1]) or bool(arrays['truncated'].reshape(n)[-1])
        if not last_end:
            ends = np.flatnonzero(arrays['terminated'].reshape(n).astype(bool) |
                                  arrays['truncated'].reshape(n).astype(bool))
            start = int(ends[-1]) + 1 if len(ends) else 0
            raise DatasetError(f'{where}: an episode without an end (rows {start}..{n - 1}: neither terminated nor '
                               f'truncated on its last row); drop the unfinished episode or mark its last row '
                               f'truncated')
    return n


def iter_permuted_minibatches(columns: Mapping[str, np.ndarray], batch_size: int, rng: Optional[np.random.Generator],
                              drop_last: bool = False) -> Iterator[Dict[str, np.ndarray]]:
    """One pass over all rows of ``columns``: minibatches of ``batch_size`` rows in a random order
    (``rng``; in row order when None). Every row appears exactly once; the last minibatch holds the
    ``n % batch_size`` remaining rows unless ``drop_last``."""
    n = len(columns['reward'])
    order = rng.permutation(n) if rng is not None else np.arange(n)
    stop = n - n % batch_size if drop_last else n
    for lo in range(0, stop, batch_size):
        idx = order[lo:lo + batch_size]
        yield {k: v[idx] for k, v in columns.items()}


class OfflineDataset:
    """A validated in-memory dataset (see the module docstring for the columns).

    Args:
        columns: a dict of arrays with at least :data:`REQUIRED_KEYS`; checked by
            :func:`validate_columns` (a :class:`DatasetError` names the problem) and converted by
            :func:`normalise_columns`.
        name: shown in error messages.
    """

    in_memory = True

    def __init__(self, columns: Mapping[str, object], name: str = 'dataset') -> None:
        self.num_rows = validate_columns(columns, name)
        self.name = name
        self.columns: Dict[str, np.ndarray] = normalise_columns(columns)

    def __len__(self) -> int:
        return self.num_rows

    def __getitem__(self, key: str) -> np.ndarray:
        return self.columns[key]

    @property
    def nbytes(self) -> int:
        """Bytes held by the columns."""
        return int(sum(a.nbytes for a in self.columns.values()))

    @property
    def discrete(self) -> bool:
        """True when actions are integers (one per row)."""
        return self.columns['action'].dtype == np.int64

    def episode_bounds(self) -> Tuple[np.ndarray, np.ndarray]:
        """``(starts, ends)``: the first and last row of every episode (``ends`` inclusive)."""
        done = self.columns['terminated'] | self.columns['truncated']
        ends = np.flatnonzero(done)
        starts = np.concatenate([[0], ends[:-1] + 1]).astype(np.int64)
        return starts, ends.astype(np.int64)

    def episode_returns(self) -> np.ndarray:
        """The undiscounted return of every episode."""
        starts, ends = self.episode_bounds()
        csum = np.concatenate([[0.0], np.cumsum(self.columns['reward'], dtype=np.float64)])
        return csum[ends + 1] - csum[starts]

    def iter_minibatches(self, batch_size: int, rng: Optional[np.random.Generator] = None,
                         drop_last: bool = False) -> Iterator[Dict[str, np.ndarray]]:
        """One epoch (see :func:`iter_permuted_minibatches`)."""
        return iter_permuted_minibatches(self.columns, batch_size, rng, drop_last)

    def num_minibatches(self, batch_size: int, drop_last: bool = False) -> int:
        """Minibatches per epoch: ``ceil(n / batch_size)`` (``floor`` with ``drop_last``)."""
        return self.num_rows // batch_size if drop_last else -(-self.num_rows // batch_size)

    def save(self, path: str) -> None:
        """Write the columns to an ``.npz`` file (read back with :func:`pipeline.offline.load_npz`)."""
        # the columns as keyword arrays: numpy's stub types **kwds as its allow_pickle flag too
        np.savez(path, **self.columns)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        starts, _ = self.episode_bounds()
        return (f'OfflineDataset({self.name!r}, {self.num_rows} rows, {len(starts)} episodes, '
                f'{"discrete" if self.discrete else "continuous"} actions)')
