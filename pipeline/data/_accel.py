"""Which kernels prioritized replay uses: the compiled ``_per_kernels`` extension or numpy.

``EXT`` is the extension module, or ``None`` when it is not built (an install without a C
compiler) or when the environment variable ``RLPIPE_NO_EXT`` is set to anything but ``""``/``"0"``.
:class:`~pipeline.data.PrioritizedSampler` and :class:`~pipeline.data.segment_tree.SumMinTree`
read it when they are created, so tests can switch paths by setting ``EXT`` before building a
buffer. Both paths draw from the same laws; for one seed they return different samples.
"""
from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Optional

from .item import BufferedData

__all__ = ["EXT", "kernel_name", "load", "state_without_ext", "ext_from_state"]


def load() -> Optional[ModuleType]:
    """The compiled kernels, or None (not built, or disabled by ``RLPIPE_NO_EXT``)."""
    if os.environ.get("RLPIPE_NO_EXT", "") not in ("", "0"):
        return None
    try:
        _per_kernels = importlib.import_module(f"{__package__}._per_kernels")  # optional: built by setup.py build_ext
    except ImportError:
        return None

    _per_kernels.set_item_type(BufferedData)
    return _per_kernels


EXT: Optional[ModuleType] = load()


def kernel_name(ext: Optional[ModuleType]) -> str:
    """``"C"`` or ``"numpy"``."""
    return "numpy" if ext is None else "C"


def state_without_ext(obj: object) -> dict:
    """``obj.__dict__`` with its ``_ext`` module replaced by a flag (modules cannot be copied or
    pickled): for ``__getstate__`` of objects that hold the kernels."""
    state = obj.__dict__.copy()
    state["_ext"] = state.get("_ext") is not None
    return state


def ext_from_state(state: dict) -> dict:
    """Inverse of :func:`state_without_ext` (the kernels of this process, if they were in use)."""
    state = dict(state)
    state["_ext"] = EXT if state.get("_ext") else None
    return state
