"""Datasets larger than the memory allowed for them: whole episodes in chunks, read from disk one at a time.

A :class:`ChunkedDataset` holds only a list of chunk loaders (each returns a dict of arrays with
whole episodes) and their row counts. An epoch visits the chunks in a random order and the rows of
each chunk in a random order, so every row is used exactly once per epoch while at most two chunks
(the one being read and the rows left over from the previous one) are in memory.

:func:`save_chunks` writes any dataset as a directory of ``.npz`` chunks, :func:`open_directory`
reads one back (in memory when it fits under ``memory_cap_bytes``, else chunked), and
:func:`load_npz` reads one ``.npz`` file. ``.npz`` files are read with ``allow_pickle=False``: a file
cannot run code.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Union

import numpy as np

from .dataset import DatasetError, OfflineDataset, iter_permuted_minibatches, normalise_columns, validate_columns

__all__ = ['ChunkedDataset', 'save_chunks', 'open_directory', 'load_npz', 'INDEX_FILE']

ChunkLoader = Callable[[], Dict[str, np.ndarray]]

#: the index file of a chunk directory (chunk file names and row counts)
INDEX_FILE = 'chunks.json'


def load_npz(path: str) -> Dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file (no pickled objects allowed)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except (OSError, ValueError) as e:
        raise DatasetError(f'{path}: not a readable .npz dataset file ({type(e).__name__}: {e})') from None


class ChunkedDataset:
    """A dataset streamed chunk by chunk (see the module docstring).

    Args:
        loaders: one callable per chunk returning that chunk's columns (whole episodes).
        rows: the number of rows of each chunk.
        name: shown in error messages.
        validate: read every chunk once now and check it with :func:`validate_columns` (each chunk
            must end with an episode end), so that a bad dataset is refused before training.
    """

    in_memory = False

    def __init__(self, loaders: Sequence[ChunkLoader], rows: Sequence[int], name: str = 'dataset',
                 validate: bool = True) -> None:
        if len(loaders) != len(rows) or not loaders:
            raise DatasetError(f'{name}: needs one row count per chunk and at least one chunk')
        self.loaders = list(loaders)
        self.rows = [int(r) for r in rows]
        self.name = name
        self.num_rows = int(sum(self.rows))
        self.discrete: Optional[bool] = None
        if validate:
            for i in range(len(self.loaders)):
                cols = self.load_chunk(i)
                self.discrete = cols['action'].dtype == np.int64

    def __len__(self) -> int:
        return self.num_rows

    def load_chunk(self, i: int) -> Dict[str, np.ndarray]:
        """Chunk ``i``'s columns, checked and converted to training dtypes."""
        cols = self.loaders[i]()
        n = validate_columns(cols, f'{self.name} (chunk {i})')
        if n != self.rows[i]:
            raise DatasetError(f'{self.name} (chunk {i}): holds {n} rows, its index says {self.rows[i]}')
        return normalise_columns(cols)

    def num_minibatches(self, batch_size: int, drop_last: bool = False) -> int:
        """Minibatches per epoch: ``ceil(n / batch_size)`` (``floor`` with ``drop_last``)."""
        return self.num_rows // batch_size if drop_last else -(-self.num_rows // batch_size)

    def iter_minibatches(self, batch_size: int, rng: Optional[np.random.Generator] = None,
                         drop_last: bool = False) -> Iterator[Dict[str, np.ndarray]]:
        """One epoch: chunks in a random order, rows of each chunk shuffled; rows left over at the end
        of a chunk start the next minibatch. Every row appears exactly once; the last minibatch holds
        ``n % batch_size`` rows unless ``drop_last``."""
        order = rng.permutation(len(self.loaders)) if rng is not None else np.arange(len(self.loaders))
        carry: Optional[Dict[str, np.ndarray]] = None
        for i in order:
            cols = self.load_chunk(int(i))
            if rng is not None:
                perm = rng.permutation(len(cols['reward']))
                cols = {k: v[perm] for k, v in cols.items()}
            if carry is not None:
                cols = {k: np.concatenate([carry[k], cols[k]]) for k in cols}
            n = len(cols['reward'])
            full = n - n % batch_size
            for mb in iter_permuted_minibatches({k: v[:full] for k, v in cols.items()}, batch_size, None):
                yield mb
            carry = {k: v[full:] for k, v in cols.items()} if full < n else None
        if carry is not None and not drop_last:
            yield carry

    def to_memory(self) -> OfflineDataset:
        """All chunks concatenated into one :class:`OfflineDataset`."""
        parts = [self.load_chunk(i) for i in range(len(self.loaders))]
        return OfflineDataset({k: np.concatenate([p[k] for p in parts]) for k in parts[0]}, self.name)

    def __repr__(self) -> str:
        return f'ChunkedDataset({self.name!r}, {self.num_rows} rows in {len(self.loaders)} chunks)'


def _episode_cuts(terminated: np.ndarray, truncated: np.ndarray, rows_per_chunk: int) -> List[int]:
    """Row offsets where chunks end: after whole episodes, each chunk about ``rows_per_chunk`` rows
    (a longer episode gets a chunk of its own)."""
    ends = np.flatnonzero(np.asarray(terminated, bool) | np.asarray(truncated, bool)) + 1
    cuts, start = [], 0
    for i, e in enumerate(ends):
        nxt = ends[i + 1] if i + 1 < len(ends) else None
        if nxt is None or nxt - start > rows_per_chunk:
            cuts.append(int(e))
            start = int(e)
    return cuts


def save_chunks(dataset: Union[OfflineDataset, Dict[str, object]], directory: str, rows_per_chunk: int) -> List[str]:
    """Write ``dataset`` to ``directory`` as ``.npz`` chunks of whole episodes of about
    ``rows_per_chunk`` rows each, plus :data:`INDEX_FILE`. Returns the chunk paths."""
    ds = dataset if isinstance(dataset, OfflineDataset) else OfflineDataset(dataset)
    if rows_per_chunk < 1:
        raise ValueError(f'rows_per_chunk must be >= 1, got {rows_per_chunk}')
    os.makedirs(directory, exist_ok=True)
    cuts = _episode_cuts(ds['terminated'], ds['truncated'], rows_per_chunk)
    files, rows, lo = [], [], 0
    for j, hi in enumerate(cuts):
        fname = f'chunk_{j:05d}.npz'
        # the columns as keyword arrays: numpy's stub types **kwds as its allow_pickle flag too
        np.savez(os.path.join(directory, fname), **{k: v[lo:hi] for k, v in ds.columns.items()})  # type: ignore[arg-type]
        files.append(fname)
        rows.append(hi - lo)
        lo = hi
    with open(os.path.join(directory, INDEX_FILE), 'w') as f:
        json.dump({'files': files, 'rows': rows}, f)
    return [os.path.join(directory, x) for x in files]


def open_directory(directory: str, memory_cap_bytes: Optional[int] = None) -> Union[OfflineDataset, ChunkedDataset]:
    """The dataset :func:`save_chunks` wrote to ``directory``: an :class:`OfflineDataset` when the
    files' total size is at most ``memory_cap_bytes`` (or no cap), else a :class:`ChunkedDataset`."""
    index = os.path.join(directory, INDEX_FILE)
    try:
        with open(index) as f:
            meta = json.load(f)
        files, rows = list(meta['files']), [int(r) for r in meta['rows']]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DatasetError(f'{directory}: not a chunked dataset directory ({INDEX_FILE}: {type(e).__name__}: {e})') \
            from None
    paths = [os.path.join(directory, os.path.basename(x)) for x in files]
    size = sum(os.path.getsize(p) for p in paths if os.path.exists(p))
    loaders = [lambda p=p: load_npz(p) for p in paths]
    ds = ChunkedDataset(loaders, rows, name=directory)
    if memory_cap_bytes is None or size <= memory_cap_bytes:
        return ds.to_memory()
    return ds
