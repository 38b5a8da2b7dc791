"""Middleware for :class:`~pipeline.data.DequeBuffer` (``buffer.use(mw)``).

A buffer middleware is ``mw(action, chain, *args, **kwargs)``: ``action`` is one of ``"push"``,
``"sample"``, ``"update"``, ``"update_many"``, ``"delete"``, ``"clear"``; ``chain(*args,
**kwargs)`` runs the rest of the chain. Middleware passes actions it does not handle on unchanged.

Prioritized replay is not a middleware but the buffer's sampler:
``DequeBuffer(size, sampler=PrioritizedSampler(...))`` (:mod:`pipeline.data.prioritized_sampler`).
"""
from __future__ import annotations

import copy
import math
import random
from collections.abc import Mapping
from typing import Callable, Dict, List, Optional, Union, cast

import numpy as np
import torch

from .buffer import BufferedData, DequeBuffer

__all__ = [
    "clone_object",
    "use_time_check",
    "staleness_check",
    "group_sample",
    "padding",
    "sample_range_view",
]


def _is_grouped(kwargs: Dict[str, object]) -> bool:
    return kwargs.get("groupby") is not None


def _flat(result: Union[List[BufferedData], List[List[BufferedData]]], grouped: bool) -> List[BufferedData]:
    if grouped:
        return [it for g in cast(List[List[BufferedData]], result) for it in g]
    return cast(List[BufferedData], result)


class _BufferMiddleware:
    """Base of the small middleware: a picklable, deep-copyable callable ``mw(action, chain, ...)``
    (a deep copy of a buffer copies its middleware, and one that refers to its buffer then refers
    to the copy)."""

    __name__ = "buffer_middleware"

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        raise NotImplementedError


def _clone(item: BufferedData) -> BufferedData:
    return BufferedData(copy.deepcopy(item.data), item.index, copy.deepcopy(item.meta))


class CloneObject(_BufferMiddleware):
    """See :func:`clone_object`."""

    __name__ = "clone_object_mw"

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            return chain(copy.deepcopy(data), copy.deepcopy(meta))
        if action == "sample":
            res = chain(*args, **kwargs)
            if _is_grouped(kwargs):
                return [[_clone(it) for it in g] for g in res]
            return [_clone(it) for it in res]
        if action == "update":
            index, data, meta = _args3(args, kwargs, "index", "data", "meta")
            return chain(index, copy.deepcopy(data), copy.deepcopy(meta))
        if action == "update_many":
            indices, data, meta = _args3(args, kwargs, "indices", "data", "meta")
            return chain(indices, copy.deepcopy(data), copy.deepcopy(meta))
        return chain(*args, **kwargs)


def clone_object() -> Callable:
    """Deep-copy data on the way in (push, update) and items on the way out (sample), so that
    neither the producer nor the consumer can change what the buffer holds by mutating objects.
    Without it a sample hands out the stored items themselves (see :class:`BufferedData`)."""
    return CloneObject()


class UseTimeCheck(_BufferMiddleware):
    """See :func:`use_time_check`."""

    __name__ = "use_time_check_mw"

    def __init__(self, buffer: DequeBuffer, max_use: float) -> None:
        if not (isinstance(max_use, (int, float)) and max_use >= 1):
            raise ValueError(f"use_time_check: max_use must be a number >= 1, got {max_use!r}")
        self.buffer = buffer
        self.max_use = max_use

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            meta = dict(meta) if meta else {}
            meta["use_count"] = 0
            return chain(data, meta)
        if action == "sample":
            res = chain(*args, **kwargs)
            counts: Dict[int, int] = {}
            first: Dict[int, BufferedData] = {}  # the stored item (a repeat in a sample is a copy)
            for it in _flat(res, _is_grouped(kwargs)):
                i = it.index
                c = counts[i] + 1 if i in counts else it.meta.get("use_count", 0) + 1
                counts[i] = c
                first.setdefault(i, it)
                it.meta["use_count"] = c
            dead = []
            for i, c in counts.items():
                first[i].meta["use_count"] = c  # the same item twice in one sample counts twice
                if c >= self.max_use:
                    dead.append(i)
            if dead:
                self.buffer.delete(dead)
            return res
        return chain(*args, **kwargs)


def use_time_check(buffer: DequeBuffer, max_use: float = float("inf")) -> Callable:
    """Delete an item once it has been sampled ``max_use`` times.

    Push sets ``meta["use_count"] = 0``; every time an item is returned by ``sample`` its
    ``meta["use_count"]`` grows by one, and items reaching ``max_use`` are deleted from ``buffer``
    (after being returned by that sample).
    """
    return UseTimeCheck(buffer, max_use)


class StalenessCheck(_BufferMiddleware):
    """See :func:`staleness_check`. ``sample_kwargs(train_iter)`` gives the extra ``sample``
    arguments it needs (what :func:`~middleware.functional.data_processor.offpolicy_data_fetcher`
    passes)."""

    __name__ = "staleness_check_mw"
    KEY = "train_iter_data_collected"

    def __init__(self, buffer: DequeBuffer, max_staleness: float) -> None:
        if not (isinstance(max_staleness, (int, float)) and max_staleness >= 0):
            raise ValueError(f"staleness_check: max_staleness must be a number >= 0, got {max_staleness!r}")
        self.buffer = buffer
        self.max_staleness = max_staleness
        self.last = -math.inf
        self.monotonic = True

    @staticmethod
    def sample_kwargs(train_iter: int) -> Dict[str, int]:
        return {"train_iter_sample_data": train_iter}

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        key = self.KEY
        if action == "push":
            data, meta = _args2(args, kwargs, "data", "meta")
            if not meta or key not in meta:
                raise ValueError(f"staleness_check: push(data, meta={{{key!r}: <train iter>}}) is required")
            it = meta[key]
            if it < self.last:
                self.monotonic = False
            self.last = max(self.last, it)
            return chain(data, meta)
        if action == "sample":
            if "train_iter_sample_data" not in kwargs:
                raise ValueError("staleness_check: call sample(..., train_iter_sample_data=<current train iter>)")
            now = kwargs.pop("train_iter_sample_data")
            buffer, max_staleness = self.buffer, self.max_staleness
            if self.monotonic:
                while buffer.count():
                    oldest = buffer.get(0)
                    c = oldest.meta.get(key)
                    if c is None or now - c <= max_staleness:
                        break
                    buffer.delete(oldest.index)
            else:
                stale = [i for i in _all_items(buffer)
                         if i.meta.get(key) is not None and now - i.meta[key] > max_staleness]
                buffer.delete([i.index for i in stale])
            return chain(*args, **kwargs)
        return chain(*args, **kwargs)


def staleness_check(buffer: DequeBuffer, max_staleness: float = float("inf")) -> Callable:
    """Drop data collected too many training iterations ago.

    Push needs ``meta["train_iter_data_collected"]`` (the learner's train iteration when the data
    was collected); sample needs ``sample(..., train_iter_sample_data=<current train iter>)``.
    Before sampling, items with ``train_iter_sample_data - train_iter_data_collected >
    max_staleness`` are deleted. Stale items are found from the oldest end, so the cost is the
    number deleted as long as pushes come in non-decreasing collection order (otherwise a full scan
    is made).
    """
    return StalenessCheck(buffer, max_staleness)


def _all_items(buffer: DequeBuffer) -> List[BufferedData]:
    return [buffer.get(k) for k in range(buffer.count())]


class GroupSample(_BufferMiddleware):
    """See :func:`group_sample`."""

    __name__ = "group_sample_mw"

    def __init__(self, size_in_group: int, ordered_in_group: bool, max_use_in_group: bool = True) -> None:
        if isinstance(size_in_group, bool) or not isinstance(size_in_group, int) or size_in_group < 1:
            raise ValueError(f"group_sample: size_in_group must be an integer >= 1, got {size_in_group!r}")
        self.size_in_group = size_in_group
        self.ordered_in_group = ordered_in_group
        self.max_use_in_group = bool(max_use_in_group)

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        if action != "sample":
            return chain(*args, **kwargs)
        if not _is_grouped(kwargs):
            raise ValueError("group_sample: call sample(..., groupby=<meta key>)")
        res = chain(*args, **kwargs)
        n = self.size_in_group
        out = []
        for g in res:
            if len(g) <= n and (self.max_use_in_group or not self.ordered_in_group):
                out.append(list(g))
            elif self.ordered_in_group:
                # max_use_in_group: a full window; else the window may start anywhere and end short
                start = random.randint(0, len(g) - n) if self.max_use_in_group else random.randrange(len(g))
                out.append(list(g[start:start + n]))
            else:
                out.append(random.sample(list(g), n))
        return out


def group_sample(size_in_group: int, ordered_in_group: bool = True, max_use_in_group: bool = True) -> Callable:
    """With ``sample(..., groupby=key)``: keep at most ``size_in_group`` items of each group --
    a random contiguous run in push order (``ordered_in_group``) or a random subset in random order.
    Shorter groups are returned whole (combine with :func:`padding` to fill them).

    ``max_use_in_group`` (ordered runs only, DI-engine's option): True (default) takes a full run of
    ``size_in_group`` items whenever the group has them; False starts the run at any item of the
    group, so runs that start near the group's end are shorter."""
    return GroupSample(size_in_group, ordered_in_group, max_use_in_group)


class Padding(_BufferMiddleware):
    """See :func:`padding`."""

    __name__ = "padding_mw"

    def __init__(self, policy: str, size: Optional[int]) -> None:
        if policy not in ("random", "last", "zero", "none"):
            raise ValueError(f"padding: policy must be 'random', 'last', 'zero' or 'none', got {policy!r}")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise ValueError(f"padding: size must be an integer >= 1 or None, got {size!r}")
        self.policy = policy
        self.size = size

    def _make(self, g: List[BufferedData]) -> BufferedData:
        if self.policy == "random":
            src = random.choice(g)
        elif self.policy == "last":
            src = g[-1]
        elif self.policy == "zero":
            return BufferedData(_zeros_like(g[0].data), -1, {"padding": True})
        else:  # "none": a placeholder without data
            return BufferedData(None, -1, {"padding": True})
        # a copy: a padding item never shares data with the item it repeats (or with the buffer)
        return BufferedData(copy.deepcopy(src.data), src.index, {**copy.deepcopy(src.meta), "padding": True})

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        if action != "sample" or not _is_grouped(kwargs):
            return chain(*args, **kwargs)
        res = chain(*args, **kwargs)
        if not res:
            return res
        target = self.size if self.size is not None else max(len(g) for g in res)
        out = []
        for g in res:
            g = list(g)
            if g and len(g) < target:
                g.extend(self._make(g) for _ in range(target - len(g)))
            out.append(g)
        return out


def padding(policy: str = "random", size: Optional[int] = None) -> Callable:
    """With ``sample(..., groupby=key)``: pad every group to ``size`` items (default: the longest
    group of the result).

    ``policy``: ``"random"`` repeats random items of the group, ``"last"`` repeats the last item,
    ``"zero"`` adds items whose data are zeros shaped like the group's first item (index -1),
    ``"none"`` adds placeholders whose data is ``None`` (index -1; DI-engine's ``"none"`` also sets
    index and meta to None: here meta stays a dict so ``meta["padding"]`` can be read).
    Padding items are new :class:`BufferedData` with ``meta["padding"] = True`` holding deep copies
    of the repeated item's data (the real items are returned unchanged). Other samples pass through.
    """
    return Padding(policy, size)


def _zeros_like(x: object) -> object:
    if isinstance(x, torch.Tensor):
        return torch.zeros_like(x)
    if isinstance(x, np.ndarray):
        return np.zeros_like(x)
    if isinstance(x, np.generic):
        return type(x)(0)
    if isinstance(x, bool):
        return False
    if isinstance(x, (int, float)):
        return type(x)(0)
    if isinstance(x, Mapping):
        return {k: _zeros_like(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_zeros_like(v) for v in x)
    return None


class SampleRangeView(_BufferMiddleware):
    """See :func:`sample_range_view`."""

    __name__ = "sample_range_view_mw"

    def __init__(self, start: Optional[int], stop: Optional[int]) -> None:
        for name, v in (("start", start), ("stop", stop)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                raise ValueError(f"sample_range_view: {name} must be an integer or None, got {v!r}")
        self.range = slice(start, stop)

    def __call__(self, action: str, chain: Callable, *args: object, **kwargs: object) -> object:
        if action == "sample" and kwargs.get("sample_range") is None:
            kwargs["sample_range"] = self.range
        return chain(*args, **kwargs)


def sample_range_view(buffer: DequeBuffer, start: Optional[int], stop: Optional[int] = None) -> Callable:
    """Restrict sampling to ``slice(start, stop)`` of the items in push order (oldest first) unless
    the caller passes its own ``sample_range``. E.g. ``buf.view().use(sample_range_view(buf, -1000))``
    is a view that samples only the newest 1000 items."""
    return SampleRangeView(start, stop)


def _args2(args: tuple, kwargs: dict, a: str, b: str) -> tuple:
    x = args[0] if len(args) > 0 else kwargs.get(a)
    y = args[1] if len(args) > 1 else kwargs.get(b)
    return x, y


def _args3(args: tuple, kwargs: dict, a: str, b: str, c: str) -> tuple:
    x = args[0] if len(args) > 0 else kwargs.get(a)
    y = args[1] if len(args) > 1 else kwargs.get(b)
    z = args[2] if len(args) > 2 else kwargs.get(c)
    return x, y, z
