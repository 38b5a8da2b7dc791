"""What a buffer stores and returns: :class:`BufferedData` and the sample lists the storage builds."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict

__all__ = ["BufferedData"]


@dataclass(slots=True, eq=False)
class BufferedData:
    """One stored item: ``data`` (what was pushed), ``index`` (stable unique id) and ``meta`` (dict).

    Sampled items are the stored objects themselves (no copy); change them through
    :meth:`Buffer.update`, or use the ``clone_object()`` middleware to get private copies.
    """

    data: Any
    index: int
    meta: Dict[str, Any]


class _Sampled(list):
    """List of sampled items that remembers where they came from (for the fast batch path)."""

    __slots__ = ("slots", "ref", "pushes", "version", "columns")


class _SlotIds(list):
    """A list of indices that also carries their slots (a shortcut for middleware such as PER)."""

    __slots__ = ("slots", "version")
