"""The buffer base class: public API, locking and the middleware chain (``buffer.use(mw)``).

Which items are drawn is not a middleware's business but the buffer's sampler's (:mod:`.sampler`),
given to the buffer when it is made (``DequeBuffer(size, sampler=...)``).
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np
import torch

from .item import BufferedData

__all__ = ["Buffer", "Middleware", "ACTIONS"]

#: The actions that go through a buffer's middleware chain.
ACTIONS = ("push", "sample", "update", "update_many", "delete", "clear")

#: ``mw(action, chain, *args, **kwargs)``: handle (or just pass on via ``chain(*args, **kwargs)``)
#: one buffer action and return its result.
Middleware = Callable[..., Any]


def _check_size(name: str, value: Any, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


class Buffer:
    """Base class of replay buffers: public API, locking and the middleware chain.

    A middleware is ``mw(action, chain, *args, **kwargs)`` where ``action`` is one of
    :data:`ACTIONS`; it must call ``chain(*args, **kwargs)`` (possibly with changed arguments) to
    run the rest of the chain and return a result. Middleware that does not handle an action must
    pass it on unchanged. Arguments reaching the chain: ``push(data, meta)``,
    ``sample(size, indices=, replace=, sample_range=, ignore_insufficient=, groupby=, unroll_len=,
    **extra)``, ``update(index, data, meta)``, ``update_many(indices, data, meta)``,
    ``delete(indices)`` (always a list), ``clear()``.
    """

    def __init__(self, size: int, lock: Optional[threading.RLock] = None) -> None:
        self.size = _check_size("buffer size", size, 1)
        self._lock = lock if lock is not None else threading.RLock()
        self._middleware: List[Middleware] = []
        self._build_chains()

    # ------------------------------------------------------------------ copies
    _NOT_COPIED = ("_lock", "_chained", "_c_push", "_c_sample", "_c_update", "_c_update_many", "_c_delete", "_c_clear")

    def __getstate__(self) -> dict:
        """``copy.deepcopy`` / ``pickle`` (in-process use): the copy is an independent buffer with
        its own lock; its middleware are copied with it (middleware that refer to the buffer refer
        to the copy). Middleware that cannot be copied (e.g. closures for pickle) raise."""
        state = self.__dict__.copy()
        for k in self._NOT_COPIED:
            state.pop(k, None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = self._copied_lock()
        self._build_chains()

    def _copied_lock(self) -> Any:
        return threading.RLock()

    # ------------------------------------------------------------------ middleware
    def use(self, middleware: Middleware) -> "Buffer":
        """Append ``middleware`` to this buffer's chain (the first one used runs first); returns self."""
        if not callable(middleware):
            hint = " (a sampler is given to the buffer: DequeBuffer(size, sampler=...))" \
                if hasattr(middleware, "draw") else ""
            raise TypeError(f"use() needs a callable middleware(action, chain, *args, **kwargs), "
                            f"got {type(middleware).__name__}{hint}")
        with self._lock:
            self._middleware.append(middleware)
            self._build_chains()
        return self

    @property
    def middleware(self) -> List[Middleware]:
        """The middleware in use, in call order (a copy)."""
        return list(self._middleware)

    def _build_chains(self) -> None:
        chained = self._middleware
        self._chained = bool(chained)

        def build(action: str, core: Callable) -> Callable:
            fn = core
            for mw in reversed(chained):
                fn = functools.partial(mw, action, fn)
            return fn

        self._c_push = build("push", self._push)
        self._c_sample = build("sample", self._sample)
        self._c_update = build("update", self._update)
        self._c_update_many = build("update_many", self._update_many)
        self._c_delete = build("delete", self._delete)
        self._c_clear = build("clear", self._clear)

    # ------------------------------------------------------------------ public API
    def push(self, data: Any, meta: Optional[Dict[str, Any]] = None) -> BufferedData:
        """Store ``data`` (with a copy of ``meta``); returns the stored item with its new ``index``.
        When the buffer is full the oldest item is evicted first."""
        with self._lock:
            return self._c_push(data, meta)

    def sample(self, size: Optional[int] = None, indices: Optional[Sequence[int]] = None,
               replace: bool = False, sample_range: Optional[slice] = None,
               ignore_insufficient: bool = False, groupby: Optional[str] = None,
               unroll_len: Optional[int] = None, **kwargs: Any
               ) -> Union[List[BufferedData], List[List[BufferedData]]]:
        """Sample items.

        - ``size``: how many items (or groups with ``groupby``); ``indices``: take exactly these
          items instead (``KeyError`` for missing ones unless ``ignore_insufficient``).
        - ``replace``: with replacement; without it no item is returned twice.
        - ``sample_range``: a ``slice`` over the items in push order (oldest first), e.g.
          ``slice(-1000, None)`` for the newest 1000.
        - ``ignore_insufficient``: return fewer items instead of raising ``ValueError`` when there is
          not enough data.
        - ``groupby``: a meta key; returns a list of groups (lists of items in push order) instead;
          with ``unroll_len`` each group is a random contiguous run of exactly ``unroll_len`` items
          (groups shorter than that are not eligible); ``size=None`` returns every eligible group.
        - extra keyword arguments are for middleware (e.g. ``train_iter_sample_data``).
        """
        with self._lock:
            return self._c_sample(size, indices=indices, replace=replace, sample_range=sample_range,
                                  ignore_insufficient=ignore_insufficient, groupby=groupby,
                                  unroll_len=unroll_len, **kwargs)

    def update(self, index: int, data: Any = None, meta: Optional[Dict[str, Any]] = None) -> bool:
        """Replace the data (if not None) and merge ``meta`` into the meta of item ``index``.
        Returns False if there is no such item (deleted or evicted)."""
        with self._lock:
            return self._c_update(index, data, meta)

    def update_many(self, indices: Sequence[int], data: Optional[Sequence[Any]] = None,
                    meta: Union[None, Sequence[Dict[str, Any]], Dict[str, Sequence[Any]]] = None
                    ) -> List[bool]:
        """Batched :meth:`update`. ``data``: one value per index or None; ``meta``: one dict per
        index, or one dict of columns (``{"priority": array_of_len_n}``). Returns one bool per index."""
        with self._lock:
            return self._c_update_many(indices, data, meta)

    def delete(self, indices: Union[int, Iterable[int]]) -> int:
        """Delete one index or an iterable of indices; unknown ones are ignored. Returns how many
        items were deleted."""
        if isinstance(indices, (int, np.integer)):
            ids = [int(indices)]
        elif isinstance(indices, (np.ndarray, torch.Tensor)):
            ids = indices.tolist()
        else:
            ids = list(indices)
        with self._lock:
            return self._c_delete(ids)

    def clear(self) -> None:
        """Delete everything."""
        with self._lock:
            self._c_clear()

    def __len__(self) -> int:
        return self.count()

    # ------------------------------------------------------------------ to implement
    def count(self) -> int:
        raise NotImplementedError

    def get(self, offset: int) -> BufferedData:
        raise NotImplementedError

    def view(self) -> "Buffer":
        raise NotImplementedError

    def save_data(self, path: str) -> None:
        raise NotImplementedError

    def load_data(self, path: str) -> None:
        raise NotImplementedError

    def _push(self, data: Any, meta: Optional[Mapping]) -> BufferedData:
        raise NotImplementedError

    def _sample(self, size: Optional[int] = None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _update(self, index: int, data: Any, meta: Optional[Mapping]) -> bool:
        raise NotImplementedError

    def _update_many(self, indices: Sequence[int], data: Any, meta: Any) -> List[bool]:
        return [self._update(i, None if data is None else d, m)
                for i, d, m in zip(indices, data if data is not None else [None] * len(indices),
                                   _meta_rows(meta, len(indices)))]

    def _delete(self, indices: List[int]) -> int:
        raise NotImplementedError

    def _clear(self) -> None:
        raise NotImplementedError


def _meta_cols(meta: Mapping, n: int) -> Dict[str, List[Any]]:
    """``update_many``'s dict-of-columns meta, validated, as lists."""
    cols = {}
    for k, v in meta.items():
        if isinstance(v, (np.ndarray, torch.Tensor)):
            v = v.tolist()
        elif isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
            raise TypeError(f"update_many(meta={{{k!r}: ...}}) needs one value per index (a list or array), "
                            f"got {type(v).__name__}")
        v = list(v)
        if len(v) != n:
            raise ValueError(f"update_many(meta={{{k!r}: ...}}) has {len(v)} values for {n} indices")
        cols[k] = v
    return cols


def _meta_rows(meta: Any, n: int) -> List[Optional[Mapping]]:
    """Normalise ``update_many``'s meta argument to one dict (or None) per index."""
    if meta is None:
        return [None] * n
    if isinstance(meta, Mapping):
        cols = _meta_cols(meta, n)
        keys = list(cols)
        return [dict(zip(keys, row)) for row in zip(*cols.values())] if keys else [None] * n
    rows = list(meta)
    if len(rows) != n:
        raise ValueError(f"update_many got {len(rows)} meta dicts for {n} indices")
    return rows


def _args2(args: tuple, kwargs: dict, a: str, b: str) -> tuple:
    x = args[0] if len(args) > 0 else kwargs.get(a)
    y = args[1] if len(args) > 1 else kwargs.get(b)
    return x, y


def _args3(args: tuple, kwargs: dict, a: str, b: str, c: str) -> tuple:
    x = args[0] if len(args) > 0 else kwargs.get(a)
    y = args[1] if len(args) > 1 else kwargs.get(b)
    z = args[2] if len(args) > 2 else kwargs.get(c)
    return x, y, z

