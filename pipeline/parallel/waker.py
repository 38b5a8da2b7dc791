"""The in-process wake-up of a reader of ``ZmqRouter`` blocked in ``recv``: ``Waker`` (see ``reader``).

The reader, the heartbeat thread and the ending send it. This module imports nothing of the bus.
"""
from __future__ import annotations

import secrets
import threading
from typing import Any

import zmq as _zmq

_NOBLOCK = _zmq.NOBLOCK


class Waker:
    """The in-process wake-up of a reader blocked in ``recv``: a PUSH socket (connected once the router
    started, ``connect``; closed by ``stop``) to the router's own PULL socket that sends ``msg``, which the
    reader recognises and skips. Owns the socket and the lock that serialises its use."""

    def __init__(self) -> None:
        self.msg = secrets.token_bytes(16)
        self._sock: Any = None
        self._lock = threading.Lock()

    def connect(self, ctx: _zmq.Context) -> None:
        self._sock = ctx.socket(_zmq.PUSH)
        self._sock.setsockopt(_zmq.SNDHWM, 2)
        self._sock.setsockopt(_zmq.LINGER, 0)
        self._sock.connect("inproc://rlpipe-wake")

    def send(self) -> None:
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.send(self.msg, _NOBLOCK)
                except _zmq.ZMQError:
                    pass  # a wake-up is already queued (or the router is closing)

    def close(self) -> None:
        with self._lock:
            self._sock.close(0)
            self._sock = None
