"""pipeline.cpu_memory: after retain_freed_memory() a large tensor freed and allocated again reuses the process's
memory instead of new pages from the kernel (counted as minor page faults)."""
import os
import platform
import subprocess
import sys
import textwrap

import pytest

from pipeline.cpu_memory import MAX_MMAP_THRESHOLD, retain_freed_memory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLIBC = platform.system() == 'Linux' and platform.libc_ver()[0] == 'glibc'

# In a child process: glibc's default thresholds pinned at 128 KiB (as a fresh process starts), then 20 rounds of
# allocating, writing and freeing an 8 MiB tensor, counted in minor page faults; then the same after
# retain_freed_memory().
_CHILD = textwrap.dedent('''
    import ctypes, resource, sys, torch
    from pipeline import cpu_memory
    libc = ctypes.CDLL('libc.so.6')
    assert libc.mallopt(cpu_memory.M_MMAP_THRESHOLD, 128 * 1024) == 1
    assert libc.mallopt(cpu_memory.M_TRIM_THRESHOLD, 128 * 1024) == 1

    def faults():
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(20):
            t = torch.empty(2 * 1024 * 1024)  # 8 MiB of float32
            t.fill_(1.0)
            del t
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

    faults()  # torch's own first-use allocations out of the way
    default = faults()
    applied = cpu_memory.retain_freed_memory()
    retained = faults()
    print(default, retained, applied)
''')


@pytest.mark.multiprocess
@pytest.mark.skipif(not GLIBC, reason='glibc only (Linux): elsewhere retain_freed_memory() changes nothing')
def test_freed_large_tensors_are_reused_not_faulted_in_again():
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get('PYTHONPATH', ''))
    out = subprocess.run([sys.executable, '-c', _CHILD], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    default, retained, applied = out.stdout.split()
    assert applied == 'True'
    # default: each 8 MiB tensor is a fresh mapping, 2,048 pages faulted in every round (about 40,000 in all)
    assert int(default) > 20 * 1000, out.stdout
    # retained: the first round's pages are reused by the other 19
    assert int(retained) < int(default) // 4, out.stdout


def test_not_glibc_changes_nothing(monkeypatch):
    from pipeline import cpu_memory

    monkeypatch.setattr(cpu_memory.platform, 'libc_ver', lambda: ('musl', '1.2'))
    assert retain_freed_memory() is False


@pytest.mark.parametrize('kwargs, words', [
    (dict(mmap_threshold=MAX_MMAP_THRESHOLD + 1), 'mmap_threshold must be 0..'),
    (dict(mmap_threshold=-1), 'mmap_threshold must be 0..'),
    (dict(trim_threshold=-5), 'trim_threshold must be >= 0'),
])
def test_bad_thresholds_are_refused_with_one_line(kwargs, words):
    with pytest.raises(ValueError, match=words):
        retain_freed_memory(**kwargs)
