"""Events between middleware and between nodes: ``on`` / ``once`` / ``off`` / ``emit`` / ``wait_for``.

``TaskEvents`` is the event half of ``Task`` (``pipeline.runtime.task``): local listeners, the delivery of a
peer's events that the router hands over (``_on_remote``), and the ``finish`` flag, which is itself an
event (``FINISH_EVENT``) so that setting it on one node reaches every node.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict, deque
from typing import Callable, Deque, Dict, List, Optional, Tuple

from .phases import note
from .router import EventArgs, EventKwargs, Router

Listener = Callable[..., object]
"""A listener: called with the event's arguments."""

FINISH_EVENT = "__finish__"
UNCLAIMED_LIMIT = 1024  # remote events kept per event name until a listener appears
log = logging.getLogger(__name__)


class TaskEvents:
    """Listeners, local and remote event delivery, ``finish`` and ``wait_for`` (mixed into ``Task``)."""

    router: Router

    def _reset_events(self) -> None:
        self._finish = False
        self._listeners: Dict[str, List[Tuple[Listener, bool]]] = defaultdict(list)
        # Remote events that arrived before anyone listened (a peer may send as soon as it is connected,
        # before this node's middleware registered their listeners): replayed to the first listener.
        self._unclaimed: Dict[str, Deque[Tuple[EventArgs, EventKwargs]]] = {}
        self._listeners_lock = threading.RLock()
        self._errors: List[BaseException] = []  # raised by listeners of remote events; raised at step end

    # ------------------------------------------------------------------ finish
    @property
    def finish(self) -> bool:
        return self._finish

    @finish.setter
    def finish(self, value: bool) -> None:
        value = bool(value)
        if value and not self._finish and self.router.is_active:
            self.router.emit(FINISH_EVENT, (), {})
        self._finish = value
        if value:
            self._wake_router_waits()

    def _wake_router_waits(self) -> None:
        """A thread blocked in ``router.wait`` (see ``wait_for``) re-checks its condition now."""
        wake = getattr(self.router, "wake", None)
        if wake is not None and self.router.is_active:
            wake()

    # ------------------------------------------------------------------ listeners
    def on(self, event: str, fn: Listener) -> None:
        """Call ``fn(*args, **kwargs)`` every time ``event`` is emitted (locally or by a peer).

        Remote events that arrived before the first listener of ``event`` are replayed to it at once.
        """
        self._listen(event, fn, False)

    def once(self, event: str, fn: Listener) -> None:
        """Like ``on``, for the next emission only."""
        self._listen(event, fn, True)

    def _listen(self, event: str, fn: Listener, once: bool) -> None:
        with self._listeners_lock:
            backlog = self._unclaimed.pop(event, None)
            if not backlog:
                self._listeners[event].append((fn, once))
                return
            if once:
                args, kwargs = backlog.popleft()
                if backlog:
                    self._unclaimed[event] = backlog
                replay = [(args, kwargs)]
            else:
                self._listeners[event].append((fn, once))
                replay = list(backlog)
        for args, kwargs in replay:
            fn(*args, **kwargs)

    def off(self, event: str, fn: Optional[Listener] = None) -> None:
        """Remove ``fn`` (or every listener) from ``event``."""
        with self._listeners_lock:
            if fn is None:
                self._listeners.pop(event, None)
            else:
                self._listeners[event] = [(f, o) for f, o in self._listeners[event] if f != fn]

    # ------------------------------------------------------------------ emitting
    def emit(self, event: str, *args: object, only_remote: bool = False, only_local: bool = False,
             **kwargs: object) -> None:
        """Emit ``event`` to the local listeners and, when the router is active, to every peer.

        A local listener that raises propagates the exception to the emitter.
        """
        if only_remote and only_local:
            raise ValueError("emit: only_remote and only_local exclude each other")
        if not only_local and self.router.is_active:
            self.router.emit(event, args, kwargs)
        if not only_remote:
            self._dispatch(event, args, kwargs)

    def emit_to(self, node_id: int, event: str, *args: object, **kwargs: object) -> None:
        """Send ``event`` to the node ``node_id`` only (not to local listeners)."""
        if not self.router.is_active:
            raise RuntimeError(f"emit_to({node_id}, {event!r}): this task has no peers (single process)")
        self.router.emit(event, args, kwargs, to=node_id)

    def _dispatch(self, event: str, args: EventArgs, kwargs: EventKwargs) -> None:
        with self._listeners_lock:
            listeners = self._listeners.get(event)
            if not listeners:
                return
            if any(o for _, o in listeners):
                self._listeners[event] = [(f, o) for f, o in listeners if not o]
            listeners = list(listeners)
        for fn, _ in listeners:
            fn(*args, **kwargs)

    def _on_remote(self, event: str, args: EventArgs, kwargs: EventKwargs) -> None:
        """Entry point for the router: deliver a peer's event once to each local listener."""
        if event == FINISH_EVENT:
            self._finish = True
        if not event.startswith("__"):
            with self._listeners_lock:
                if not self._listeners.get(event):
                    backlog = self._unclaimed.get(event)
                    if backlog is None:
                        backlog = self._unclaimed[event] = deque(maxlen=UNCLAIMED_LIMIT)
                    if len(backlog) == UNCLAIMED_LIMIT:
                        log.warning("remote event %r: %d arrived with no listener; dropping the oldest",
                                    event, UNCLAIMED_LIMIT)
                    backlog.append((args, kwargs))
                    return
        try:
            self._dispatch(event, args, kwargs)
        except BaseException as e:  # surfaces in the pipeline at the end of the current step
            note(e, f"raised by a listener of remote event {event!r}")
            self._errors.append(e)

    def _raise_listener_error(self) -> None:
        error = self._errors[0]
        self._errors.clear()
        raise error

    # ------------------------------------------------------------------ waiting
    def wait_for(self, event: str, timeout: float = float("inf"),
                 ignore_timeout_exception: bool = True) -> Optional[Tuple[EventArgs, EventKwargs]]:
        """Block until ``event`` is emitted; return its ``(args, kwargs)``.

        On timeout return None, or raise ``TimeoutError`` with ``ignore_timeout_exception=False``. The
        wait is also released (returning None) when the task finishes.

        With a ``ZmqRouter`` the waiting thread reads the peers' messages itself while it waits and runs the
        listeners of the remote events that arrive meanwhile (a reply then needs no thread switch), so do not
        call it while holding a lock that such a listener takes.
        """
        received: List[Tuple[EventArgs, EventKwargs]] = []
        done = threading.Event()
        # A router that can (ZmqRouter) lets this thread read the peers' messages itself while it waits, so
        # a remote reply reaches it without a thread switch.
        router_wait = getattr(self.router, "wait", None) if self.router.is_active else None

        def listener(*args: object, **kwargs: object) -> None:
            received.append((args, kwargs))
            done.set()
            if router_wait is not None:
                self._wake_router_waits()

        def on_finish(*_: object, **__: object) -> None:
            done.set()
            if router_wait is not None:
                self._wake_router_waits()

        self.once(event, listener)
        self.once(FINISH_EVENT, on_finish)
        try:
            if router_wait is not None:
                router_wait(lambda: done.is_set() or (self._finish and event != FINISH_EVENT), timeout)
            else:
                deadline = time.monotonic() + timeout
                while not done.is_set():
                    if self._finish and event != FINISH_EVENT:
                        break
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    done.wait(min(0.05, left))
        finally:
            self.off(event, listener)
            self.off(FINISH_EVENT, on_finish)
        if received:
            return received[0]
        if not self._finish and not ignore_timeout_exception:
            raise TimeoutError(f"task.wait_for({event!r}) timed out after {timeout} s")
        return None
