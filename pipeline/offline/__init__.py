"""Offline RL: datasets (in memory, chunked from disk, from replay buffers and Minari) and learners
(behaviour cloning, discrete CQL, IQL). The middleware is :mod:`middleware.offline`.

Importing this package loads numpy only; the readers and learners import torch (and minari) when
their modules are imported.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping, Optional, Union

import numpy as np

from .chunked import ChunkedDataset, load_npz, open_directory, save_chunks
from .dataset import REQUIRED_KEYS, DatasetError, OfflineDataset, validate_columns

if TYPE_CHECKING:  # loaded on first use (__getattr__ below): they import torch (and minari)
    from .buffer_reader import from_buffer, from_buffer_file
    from .minari_reader import from_minari

__all__ = ['OfflineDataset', 'ChunkedDataset', 'DatasetError', 'REQUIRED_KEYS', 'validate_columns', 'save_chunks',
           'open_directory', 'load_npz', 'load_dataset', 'from_buffer', 'from_buffer_file', 'from_minari']


def __getattr__(name: str) -> object:
    if name in ('from_buffer', 'from_buffer_file'):
        from . import buffer_reader  # lazy: this package loads numpy only (docstring)
        return getattr(buffer_reader, name)
    if name == 'from_minari':
        from .minari_reader import from_minari  # lazy: this package loads numpy only (docstring)
        return from_minari
    raise AttributeError(f"module 'pipeline.offline' has no attribute {name!r}")


def load_dataset(columns_or_path: Union[str, 'os.PathLike[str]', Mapping[str, np.ndarray]],
                 memory_cap_bytes: Optional[int] = None, unfinished: str = 'error') -> Union[OfflineDataset, ChunkedDataset]:
    """A dataset from a dict of arrays, an ``.npz`` file, a directory written by :func:`save_chunks`
    or a ``DequeBuffer.save_data`` file (any other path). ``memory_cap_bytes`` applies to
    directories (streamed when larger); ``unfinished`` to buffer files (see :func:`from_buffer`)."""
    if not isinstance(columns_or_path, (str, os.PathLike)):
        return OfflineDataset(columns_or_path)
    path = os.fspath(columns_or_path)
    if os.path.isdir(path):
        return open_directory(path, memory_cap_bytes)
    if path.endswith('.npz'):
        return OfflineDataset(load_npz(path), path)
    from .buffer_reader import from_buffer_file  # lazy: this package loads numpy only (docstring)
    return from_buffer_file(path, unfinished)
