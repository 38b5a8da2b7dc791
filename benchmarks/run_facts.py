"""What a benchmark result records about where it ran: package versions, the rlpipe commit, the machine and its load."""
from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def versions(packages: Sequence[str]) -> Dict[str, str]:
    """Python's and each package's version ('missing' when it does not import) and the checkout's commit."""
    out = {'python': platform.python_version()}
    for name in packages:
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001  (a missing or odd package: say so, do not fail the run)
            out[name] = 'missing'
    try:
        out['rlpipe_commit'] = subprocess.run(['git', '-C', ROOT, 'rev-parse', 'HEAD'], capture_output=True,
                                              text=True, timeout=10).stdout.strip() or 'unknown'
    except Exception:  # noqa: BLE001
        out['rlpipe_commit'] = 'unknown'
    return out


def load_average() -> Optional[List[float]]:
    """The 1, 5 and 15 minute load averages (None where the system has none)."""
    return list(os.getloadavg()) if hasattr(os, 'getloadavg') else None


def machine(load_at_start: Optional[List[float]]) -> Dict[str, Any]:
    """Processor, its model name and whether it has AVX-512 BF16 (Linux; None elsewhere), CPU count, system, and the
    load average at the start of the run and now."""
    model, bf16 = cpu_model()
    return {'processor': platform.processor() or platform.machine(), 'cpu_model': model, 'avx512_bf16': bf16,
            'cpus': os.cpu_count(), 'system': platform.system(), 'load_at_start': load_at_start,
            'load_at_end': load_average()}


def cpu_model(cpuinfo: str = '/proc/cpuinfo') -> Tuple[Optional[str], Optional[bool]]:
    """(model name, has the avx512_bf16 flag) of the first CPU in ``cpuinfo``; (None, None) where it cannot be read."""
    model: Optional[str] = None
    flags: Optional[List[str]] = None
    try:
        with open(cpuinfo) as f:
            for line in f:
                key, _, value = line.partition(':')
                key = key.strip()
                if key == 'model name' and model is None:
                    model = value.strip()
                elif key == 'flags' and flags is None:
                    flags = value.split()
                if model is not None and flags is not None:
                    break
    except OSError:
        return None, None
    return model, (None if flags is None else 'avx512_bf16' in flags)


def weights_sha256(tensors: Iterable[Any]) -> str:
    """SHA-256 of the bytes of ``tensors`` (torch tensors), in the order given: the digest of a trained network's
    ``state_dict().values()`` that a result records, so two runs can be told to have ended on the same weights."""
    digest = hashlib.sha256()
    for t in tensors:
        digest.update(t.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()
