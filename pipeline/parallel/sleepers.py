"""Threads of ``ZmqRouter`` in ``wait`` that do not read: ``Sleepers`` (see ``reader``).

The reader counts and wakes them, and the delivery wakes them after each message. This module imports
nothing of the bus.
"""
from __future__ import annotations

import threading


class Sleepers:
    """Threads in ``wait`` that are not reading: they sleep on ``cond`` until a message was delivered,
    ``wake()``, ``stop`` or a slice of 50 ms ends. Owns ``lock`` (the condition's, which also guards the
    reader's count of threads in ``wait``) and ``count``, how many sleep now (read without the lock by
    whoever may notify them: no notify when nobody sleeps)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.count = 0

    def notify(self) -> None:
        with self.cond:
            self.cond.notify_all()
