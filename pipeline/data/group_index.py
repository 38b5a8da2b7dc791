"""``groupby`` support for a buffer's storage: meta value -> live item ids, and group sampling.

A :class:`GroupIndex` (one per meta key) is built on the first ``sample(groupby=key)`` and then kept
up to date incrementally by the storage's push/remove/update.
"""
from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

import numpy as np

from .item import BufferedData, copy_repeats

if TYPE_CHECKING:
    from .storage import SlotStorage  # which imports this module

_MISSING = object()


class _Group:
    __slots__ = ("ids", "head", "dead")

    def __init__(self) -> None:
        self.ids: List[int] = []  # ascending == push order
        self.head = 0
        self.dead = 0

    def live(self) -> int:
        return len(self.ids) - self.head - self.dead


class GroupIndex:
    """meta[key] value -> ids of the live items with that value, in push order."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.groups: Dict[object, _Group] = {}
        self.value_of: Dict[int, object] = {}

    def add(self, item: BufferedData) -> None:
        v = item.meta.get(self.key, _MISSING)
        if v is _MISSING:
            return
        try:
            g = self.groups.get(v)
        except TypeError:
            raise TypeError(f"meta[{self.key!r}] = {v!r} is not hashable; groupby needs hashable values") from None
        if g is None:
            g = self.groups[v] = _Group()
        if g.ids and g.ids[-1] > item.index:
            bisect.insort(g.ids, item.index, lo=g.head)
        else:
            g.ids.append(item.index)
        self.value_of[item.index] = v

    def remove(self, index: int, alive: Dict[int, int]) -> None:
        v = self.value_of.pop(index, _MISSING)
        if v is _MISSING:
            return
        g = self.groups[v]
        g.dead += 1
        ids = g.ids
        while g.head < len(ids) and ids[g.head] not in alive:
            g.head += 1
            g.dead -= 1
        if g.live() == 0:
            del self.groups[v]
        elif g.head > 32 and g.head * 2 > len(ids):
            del ids[: g.head]
            g.head = 0

    def move(self, item: BufferedData) -> None:
        """Re-file ``item`` after its meta changed."""
        old = self.value_of.get(item.index, _MISSING)
        new = item.meta.get(self.key, _MISSING)
        if old is not _MISSING:
            try:
                if new is not _MISSING and old == new:
                    return
            except Exception:  # noqa: BLE001 - odd __eq__; re-file to be safe
                pass
            g = self.groups[old]
            g.ids.remove(item.index)
            del self.value_of[item.index]
            if g.live() == 0:
                del self.groups[old]
        if new is not _MISSING:
            self.add(item)

    def live_ids(self, g: _Group) -> List[int]:
        if g.dead:
            raise AssertionError("compact first")
        return g.ids[g.head:]


def sample_groups(st: SlotStorage, size: Optional[int], key: str, unroll_len: Optional[int], replace: bool,
                  sample_range: Optional[slice], ignore_insufficient: bool) -> List[List[BufferedData]]:
    """``sample(groupby=key)``: groups of live items by ``meta[key]`` (see ``DequeBuffer.sample``)."""
    need = 1 if unroll_len is None else unroll_len
    cand: List[Tuple[List[int], int]] = []  # each eligible group: its ids in push order, from position head on
    if sample_range is None:
        gi = st.group_index(key)
        for g in gi.groups.values():
            if g.live() >= need:
                if g.dead:
                    alive = st.id2slot
                    g.ids = [i for i in g.ids[g.head:] if i in alive]
                    g.head = 0
                    g.dead = 0
                cand.append((g.ids, g.head))
    else:
        by: Dict[object, List[int]] = {}
        for s in st.ordered_slots()[sample_range].tolist():
            it = st.item(s)
            v = it.meta.get(key, _MISSING)
            if v is _MISSING:
                continue
            try:
                by.setdefault(v, []).append(it.index)
            except TypeError:
                raise TypeError(f"meta[{key!r}] = {v!r} is not hashable; groupby needs hashable values") from None
        cand = [(ids, 0) for ids in by.values() if len(ids) >= need]
    n = len(cand)
    if size is None:
        chosen = range(n)
    else:
        k = size
        if k > 0 and (n == 0 or (not replace and k > n)):
            if not ignore_insufficient:
                raise ValueError(f"cannot sample {k} groups by meta[{key!r}]"
                                 f"{'' if unroll_len is None else f' with at least {unroll_len} items'}: "
                                 f"only {n} such groups; push more data first or pass "
                                 "ignore_insufficient=True")
            k = 0 if n == 0 else (k if replace else n)
        if k == 0:
            return []
        chosen = (st.rng.integers(0, n, k) if replace else st.rng.choice(n, k, replace=False)).tolist()
    id2slot = st.id2slot
    out: List[List[BufferedData]] = []
    for c in chosen:
        ids, head = cand[c]
        if unroll_len is None:
            window = ids[head:]
        else:
            start = head + int(st.rng.integers(0, len(ids) - head - unroll_len + 1))
            window = ids[start:start + unroll_len]
        out.append([st.item(id2slot[i]) for i in window])
    if st.syncers and out:
        st.sync(np.array([id2slot[it.index] for g in out for it in g], dtype=np.int64))
    if replace and len(out) > 1:  # a group (or overlapping windows) drawn twice: copies, not aliases
        seen = 0
        flat = [it for g in out for it in g]
        copy_repeats(flat)
        for window_items in out:
            window_items[:] = flat[seen:seen + len(window_items)]
            seen += len(window_items)
    return out


