"""``groupby`` support for a buffer's storage: meta value -> live item ids (the storage samples the groups:
:func:`pipeline.data.storage.sample_groups`).

A :class:`GroupIndex` (one per meta key) is built on the first ``sample(groupby=key)`` and then kept
up to date incrementally by the storage's push/remove/update.
"""
from __future__ import annotations

import bisect
from typing import Dict, List

from .item import BufferedData

#: meta has no value for the key
MISSING = object()


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
        v = item.meta.get(self.key, MISSING)
        if v is MISSING:
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
        v = self.value_of.pop(index, MISSING)
        if v is MISSING:
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
        old = self.value_of.get(item.index, MISSING)
        new = item.meta.get(self.key, MISSING)
        if old is not MISSING:
            try:
                if new is not MISSING and old == new:
                    return
            except Exception:  # noqa: BLE001 - odd __eq__; re-file to be safe
                pass
            g = self.groups[old]
            g.ids.remove(item.index)
            del self.value_of[item.index]
            if g.live() == 0:
                del self.groups[old]
        if new is not MISSING:
            self.add(item)

    def live_ids(self, g: _Group) -> List[int]:
        if g.dead:
            raise AssertionError("compact first")
        return g.ids[g.head:]
