"""Switch prioritized replay between its compiled kernels ("C") and numpy ("numpy") in tests.

The compiled extension is built by ``pip install -e .`` (or ``python setup.py build_ext
--inplace``). If it is missing, "C" fails with that advice; with ``RLPIPE_NO_EXT=1`` (the
extension deliberately disabled) "C" is skipped and only the numpy runs count.
"""
import contextlib
import os

import pytest

from pipeline.data import _accel


def disabled() -> bool:
    """True when RLPIPE_NO_EXT switches the compiled kernels off."""
    return os.environ.get("RLPIPE_NO_EXT", "") not in ("", "0")


def available():
    """The kernel names a test should cover: both, or "numpy" alone under RLPIPE_NO_EXT."""
    return ["numpy"] if disabled() else ["C", "numpy"]


def kernels(name: str):
    """The module ``_accel.EXT`` must hold for kernel ``name`` ("C" or "numpy")."""
    if name == "numpy":
        return None
    if disabled():
        pytest.skip("RLPIPE_NO_EXT is set: the compiled kernels are disabled")
    ext = _accel.load()
    if ext is None:
        pytest.fail("pipeline/data/_per_kernels is not built: run `pip install -e .` (needs a C compiler) "
                    "or `python setup.py build_ext --inplace`, or set RLPIPE_NO_EXT=1 to test numpy only")
    return ext


@contextlib.contextmanager
def use_kernel(name: str):
    """Buffers, PERs and trees created inside use kernel ``name``."""
    old = _accel.EXT
    _accel.EXT = kernels(name)
    try:
        yield
    finally:
        _accel.EXT = old
