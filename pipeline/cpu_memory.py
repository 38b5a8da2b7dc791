"""The C allocator of a CPU training process: keep freed memory for reuse instead of handing it back.

A CPU update allocates and frees the same few large tensors every step (a batch of 32 Atari frames as float32 is
3.6 MB; its channels-last copy, the conv activations and their gradients are of that order). glibc's ``malloc``
serves a block above its *mmap threshold* with a fresh ``mmap`` that ``free`` unmaps, and it returns the free top
of its heap to the kernel once that exceeds its *trim threshold*. Both thresholds start low (128 KiB) and only
creep up as blocks are freed, so a training loop can go on receiving fresh pages, each one a page fault and a
page of zeroes when first written, for every large tensor of every update.

:func:`retain_freed_memory` raises both thresholds once, for the whole process: blocks up to ``mmap_threshold``
come from the heap and freed heap memory stays with the process, so the next update reuses it. The numbers a
program computes do not change, only where its temporaries live. The cost: the process keeps its peak heap
(up to ``trim_threshold`` more than it uses) until it exits.

Only glibc has these settings (Linux with glibc); elsewhere the call changes nothing and returns False.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import platform
from typing import Optional

#: ``mallopt`` parameters (glibc's ``malloc.h``)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3

#: glibc's largest mmap threshold on 64-bit systems (``DEFAULT_MMAP_THRESHOLD_MAX``): 32 MiB
MAX_MMAP_THRESHOLD = 32 * 1024 * 1024


def _glibc() -> Optional[ctypes.CDLL]:
    """The process's glibc, or None when the C library is another one (musl, macOS, Windows)."""
    if platform.system() != 'Linux' or platform.libc_ver()[0] != 'glibc':
        return None
    name = ctypes.util.find_library('c') or 'libc.so.6'
    try:
        return ctypes.CDLL(name)
    except OSError:
        return None


def retain_freed_memory(mmap_threshold: int = MAX_MMAP_THRESHOLD, trim_threshold: int = 1 << 30) -> bool:
    """Make glibc's ``malloc`` serve blocks up to ``mmap_threshold`` bytes from its heap and keep up to
    ``trim_threshold`` bytes of freed heap memory, for the rest of the process (see the module docstring).

    Returns True when both settings were applied, False on a system without glibc (nothing changes).
    Raises ValueError for a threshold out of range (``mmap_threshold`` in 0..32 MiB, ``trim_threshold`` >= 0).
    """
    if not 0 <= mmap_threshold <= MAX_MMAP_THRESHOLD:
        raise ValueError(f'mmap_threshold must be 0..{MAX_MMAP_THRESHOLD} bytes (glibc\'s maximum), got {mmap_threshold}')
    if trim_threshold < 0:
        raise ValueError(f'trim_threshold must be >= 0 bytes, got {trim_threshold}')
    libc = _glibc()
    if libc is None:
        return False
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # mallopt takes an int: a trim threshold above 2 GiB - 1 is capped there (the same for any realistic process)
    trim = min(int(trim_threshold), 2 ** 31 - 1)
    return bool(mallopt(M_MMAP_THRESHOLD, int(mmap_threshold))) and bool(mallopt(M_TRIM_THRESHOLD, trim))
