"""Whether the launcher restarts nodes that die, as every node of a launch sees it.

``rlpipe run --auto-recover`` and ``rlpipe run --backend ray --max-restarts N`` set ``RLPIPE_MAX_RESTARTS``
for every node. While restarts are possible, the nodes wait for a lost peer's restart instead of giving up
on it; the launcher ends the job when it cannot restart a node any more.
"""
from __future__ import annotations

import os

__all__ = ["MAX_RESTARTS_ENV", "RESTART_PEERLESS_TIMEOUT", "restarts_expected"]

MAX_RESTARTS_ENV = "RLPIPE_MAX_RESTARTS"

# the peerless bound of a node while restarts are expected: a restarted peer needs its interpreter, imports
# and checkpoint (with the replay buffer) before it listens again, which can take far longer than the bound
# of a job without restarts
RESTART_PEERLESS_TIMEOUT = 120.0


def restarts_expected() -> bool:
    """True when the launcher restarts a node that dies (``RLPIPE_MAX_RESTARTS`` > 0)."""
    try:
        return int(os.environ.get(MAX_RESTARTS_ENV, "0") or 0) > 0
    except ValueError:
        return False
