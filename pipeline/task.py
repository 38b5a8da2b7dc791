"""The task runtime: middleware composed over one shared context per step.

A middleware is ``fn(ctx)``. If it returns a generator (it ``yield``s), the code before the yield is its
forward part and runs in registration order; the code after it is its backward part and runs after all
forward parts of the step, last in first out. A step is: forward parts, backward parts, ``ctx.renew()``.
"""
from __future__ import annotations

import fnmatch
import logging
import sys
import threading
import time
from collections import defaultdict, deque
from concurrent.futures import Future, ThreadPoolExecutor
from types import GeneratorType
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from contexts import Context

from .roles import Role, RoleLike, as_role, normalize_roles, roles_of
from .router import LocalRouter, Router, default_router

Middleware = Callable[[Context], Any]
FINISH_EVENT = "__finish__"
UNCLAIMED_LIMIT = 1024  # remote events kept per event name until a listener appears
log = logging.getLogger(__name__)


class _Void:
    """A middleware that does nothing; ``task.use`` skips it."""

    __is_void__ = True
    __name__ = "void"

    def __call__(self, ctx: Context) -> None:
        return None

    def __repr__(self) -> str:
        return "task.void()"


def _name_of(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _start(fn: Middleware, ctx: Context) -> Optional[GeneratorType]:
    """Run ``fn``'s forward part; return the generator holding its backward part, if it has one."""
    g = fn(ctx)
    if g is not None and type(g) is GeneratorType:
        try:
            next(g)
        except StopIteration:
            return None
        return g
    return None


def _finish_generator(g: GeneratorType) -> None:
    """Run a generator's backward part (everything after its single yield)."""
    try:
        next(g)
    except StopIteration:
        return
    g.close()
    raise RuntimeError(f"middleware {g.__qualname__} yielded more than once; a middleware yields at most once")


class _Locked:
    """Runs a middleware's forward and backward parts while holding a lock."""

    def __init__(self, fn: Middleware, lock: Any) -> None:
        self.fn, self.lock = fn, lock
        self.__name__ = _name_of(fn)
        roles = roles_of(fn)
        if roles is not None:
            self.__roles__ = roles

    def __call__(self, ctx: Context) -> Any:
        with self.lock:
            g = self.fn(ctx)
        if type(g) is not GeneratorType:
            return g
        return self._locked_generator(g)

    def _locked_generator(self, g: GeneratorType):
        with self.lock:
            try:
                next(g)
            except StopIteration:
                return
        yield
        with self.lock:
            _finish_generator(g)


class Task:
    """One pipeline runtime per process (``from pipeline import task``)."""

    role = Role

    def __init__(self) -> None:
        self._running = False
        self._reset()

    # ------------------------------------------------------------------ lifecycle
    def _reset(self, async_mode: bool = False, n_async_workers: int = 3, ctx: Optional[Context] = None,
               labels: Optional[Iterable[str]] = None, roles: Optional[Iterable[RoleLike]] = None,
               router: Optional[Router] = None) -> None:
        self.ctx: Context = ctx if ctx is not None else Context()
        self._middleware: List[Middleware] = []
        self._wrappers: List[Callable[[Middleware], Middleware]] = []
        self._backward_stack: List[GeneratorType] = []
        self._inner: List[GeneratorType] = []  # backward parts from task.wrap during a forward part
        self._finish = False
        self._listeners: Dict[str, List[Tuple[Callable, bool]]] = defaultdict(list)
        # Remote events that arrived before anyone listened (a peer may send as soon as it is connected,
        # before this node's middleware registered their listeners): replayed to the first listener.
        self._unclaimed: Dict[str, deque] = {}
        self._listeners_lock = threading.RLock()
        self._errors: List[BaseException] = []
        self._pending: List[Future] = []
        self._roles = normalize_roles(roles)
        self._lock = threading.Lock()
        self.async_mode = async_mode
        self._executor: Optional[ThreadPoolExecutor] = (
            ThreadPoolExecutor(max_workers=n_async_workers, thread_name_prefix="rlpipe-async")
            if async_mode else None
        )
        self.router: Router = router if router is not None else LocalRouter()
        if labels is not None:
            self.router.labels = set(labels)

    def start(self, async_mode: bool = False, n_async_workers: int = 3, ctx: Optional[Context] = None,
              labels: Optional[Iterable[str]] = None, roles: Optional[Iterable[RoleLike]] = None,
              router: Optional[Router] = None) -> "Task":
        """Reset all state and start. Use as a context manager: ``with task.start(ctx=...):``.

        ``roles`` (e.g. ``[Role.LEARNER]``) are known from here on, before middleware are constructed.
        ``router`` defaults to the one the launcher configured (a ``LocalRouter`` in a single process).
        """
        if self._running:
            self.stop()
        router = router if router is not None else default_router()
        if roles is None:  # a launcher gives the node's roles to its router
            roles = getattr(router, "roles", None) or None
        self._reset(async_mode, n_async_workers, ctx, labels, roles, router)
        self._running = True
        try:
            self.router.start(self._on_remote)
        except BaseException:
            self._running = False
            raise
        return self

    def stop(self) -> None:
        """Stop: close pending generators, shut the thread pool and the router. Idempotent."""
        self._flush_inner()
        for g in reversed(self._backward_stack):
            g.close()
        self._backward_stack.clear()
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        if self._running:
            self._running = False
            self.router.stop()

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._running

    # ------------------------------------------------------------------ registration
    def use(self, fn: Middleware, lock: Union[bool, Any] = False) -> "Task":
        """Register a middleware. ``lock=True`` runs it under the task's lock; a lock object may be given."""
        if getattr(fn, "__is_void__", False):
            return self
        if not callable(fn):
            raise TypeError(f"task.use expects a middleware fn(ctx), got {fn!r} of type {type(fn).__name__}")
        if lock:
            fn = _Locked(fn, self._lock if lock is True else lock)
        self._middleware.append(fn)
        return self

    def use_wrapper(self, wrapper: Callable[[Middleware], Middleware]) -> "Task":
        """Wrap every middleware (also those registered before) with ``wrapper(fn) -> fn``."""
        self._wrappers.append(wrapper)
        return self

    def void(self) -> _Void:
        return _Void()

    def _active(self, fn: Any) -> bool:
        wanted = roles_of(fn)
        return wanted is None or not self._roles or not self._roles.isdisjoint(wanted)

    def _chain(self) -> List[Middleware]:
        chain = [fn for fn in self._middleware if self._active(fn)]
        for wrapper in self._wrappers:
            chain = [wrapper(fn) for fn in chain]
        return chain

    # ------------------------------------------------------------------ running
    def run(self, max_step: int = sys.maxsize) -> None:
        """Run steps until ``max_step`` steps ran or ``task.finish`` is set.

        A step that sets ``finish`` runs to its end (all forward and backward parts) before the run stops.
        A middleware that raises stops the run: the exception propagates with the middleware's name in
        its notes, and the task is stopped (``start`` again to reuse it).
        """
        if not self._running:
            raise RuntimeError("task is not started: use `with task.start(ctx=...):` before task.run()")
        chain = self._chain()
        if not chain:
            raise RuntimeError("task.run() with no middleware: register some with task.use(fn) first")
        stack = self._backward_stack
        inner = self._inner
        errors = self._errors
        has_pool = self._executor is not None
        try:
            for _ in range(max_step):
                if self._finish:
                    break
                ctx = self.ctx
                for fn in chain:
                    try:
                        g = fn(ctx)
                        if g is not None and type(g) is GeneratorType:
                            next(g)
                            stack.append(g)
                    except StopIteration:
                        pass  # a generator that returned before yielding has no backward part
                    except BaseException as e:
                        _note(e, f"raised in middleware {_name_of(fn)!r}")
                        raise
                    if inner:  # backward parts of middleware it called through task.wrap: they run first
                        stack.extend(inner)
                        inner.clear()
                if has_pool and self._pending:
                    self._wait_pending()
                while stack:  # the backward phase, last in first out
                    g = stack.pop()
                    try:
                        next(g)
                    except StopIteration:
                        continue
                    except BaseException as e:
                        _note(e, f"raised in the backward part of middleware {g.__qualname__!r}")
                        raise
                    g.close()
                    raise RuntimeError(f"middleware {g.__qualname__} yielded more than once; "
                                       "a middleware yields at most once")
                if has_pool and self._pending:
                    self._wait_pending()
                if errors:
                    self._raise_listener_error()
                self.ctx = ctx.renew()
        except BaseException:
            self.stop()
            raise

    def forward(self, fn: Middleware, ctx: Optional[Context] = None) -> Optional[GeneratorType]:
        """Run ``fn``'s forward part; its backward part joins the step's backward stack."""
        g = _start(fn, self.ctx if ctx is None else ctx)
        if g is not None:
            self._backward_stack.append(g)
        self._flush_inner()
        return g

    def _flush_inner(self) -> None:
        if self._inner:
            self._backward_stack.extend(self._inner)
            self._inner.clear()

    def backward(self) -> None:
        """Run every pending backward part, last in first out."""
        self._flush_inner()
        stack = self._backward_stack
        while stack:
            g = stack.pop()
            try:
                _finish_generator(g)
            except BaseException as e:
                _note(e, f"raised in the backward part of middleware {g.__qualname__!r}")
                raise

    def renew(self) -> Context:
        """Replace ``task.ctx`` with ``ctx.renew()`` (kept keys carried, ``total_step`` + 1)."""
        self.ctx = self.ctx.renew()
        return self.ctx

    def wrap(self, fn: Middleware, lock: Union[bool, Any] = False) -> Callable[[Context], Callable[[], None]]:
        """Let one middleware call another.

        Calling the result with a context runs ``fn``'s forward part and returns a closure that runs its
        backward part. A backward part whose closure is never called runs in the step's backward phase.
        """
        if lock:
            fn = _Locked(fn, self._lock if lock is True else lock)

        def forward_part(ctx: Context) -> Callable[[], None]:
            g = _start(fn, ctx)
            if g is None:
                return _noop
            # Held aside until the calling middleware's forward part ends, then stacked above it, so
            # that (if never called by hand) it runs in the backward phase before its caller's.
            self._inner.append(g)

            def backward_part() -> None:
                for pending in (self._inner, self._backward_stack):
                    try:
                        pending.remove(g)
                        break
                    except ValueError:
                        continue
                else:  # already run in the step's backward phase
                    return
                _finish_generator(g)

            return backward_part

        forward_part.__name__ = f"wrapped({_name_of(fn)})"
        return forward_part

    def serial(self, *fns: Middleware) -> Middleware:
        """Combine middleware into one that runs them in order (backward parts in reverse)."""
        fns = tuple(f for f in fns if not getattr(f, "__is_void__", False))

        def _serial(ctx: Context):
            gens = [_start(fn, ctx) for fn in fns]
            yield
            for g in reversed(gens):
                if g is not None:
                    _finish_generator(g)

        _serial.__name__ = "serial(" + ", ".join(_name_of(f) for f in fns) + ")"
        return _serial

    def parallel(self, *fns: Middleware) -> Middleware:
        """Combine middleware into one that runs their forward parts concurrently in async mode.

        Without async mode they run in order. Backward parts run in reverse order after the step's
        forward phase, like any other middleware.
        """
        fns = tuple(f for f in fns if not getattr(f, "__is_void__", False))

        def _parallel(ctx: Context):
            if self._executor is not None:
                futures = [self._executor.submit(_start, fn, ctx) for fn in fns]
                gens = [f.result() for f in futures]
            else:
                gens = [_start(fn, ctx) for fn in fns]
            yield
            for g in reversed(gens):
                if g is not None:
                    _finish_generator(g)

        _parallel.__name__ = "parallel(" + ", ".join(_name_of(f) for f in fns) + ")"
        return _parallel

    def async_executor(self, fn: Callable, *args: Any, **kwargs: Any) -> Future:
        """Run ``fn(*args, **kwargs)`` on the thread pool; the step waits for it before its backward phase.

        Without async mode, ``fn`` runs at once. Exceptions surface in the pipeline at the end of the step.
        """
        if self._executor is None:
            fut: Future = Future()
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:
                fut.set_exception(e)
                self._errors.append(e)
            return fut
        fut = self._executor.submit(fn, *args, **kwargs)
        self._pending.append(fut)
        return fut

    def _wait_pending(self) -> None:
        pending, self._pending = self._pending, []
        for fut in pending:
            exc = fut.exception()
            if exc is not None:
                raise exc

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

    # ------------------------------------------------------------------ events
    def on(self, event: str, fn: Callable) -> None:
        """Call ``fn(*args, **kwargs)`` every time ``event`` is emitted (locally or by a peer).

        Remote events that arrived before the first listener of ``event`` are replayed to it at once.
        """
        self._listen(event, fn, False)

    def once(self, event: str, fn: Callable) -> None:
        """Like ``on``, for the next emission only."""
        self._listen(event, fn, True)

    def _listen(self, event: str, fn: Callable, once: bool) -> None:
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

    def off(self, event: str, fn: Optional[Callable] = None) -> None:
        """Remove ``fn`` (or every listener) from ``event``."""
        with self._listeners_lock:
            if fn is None:
                self._listeners.pop(event, None)
            else:
                self._listeners[event] = [(f, o) for f, o in self._listeners[event] if f != fn]

    def emit(self, event: str, *args: Any, only_remote: bool = False, only_local: bool = False,
             **kwargs: Any) -> None:
        """Emit ``event`` to the local listeners and, when the router is active, to every peer.

        A local listener that raises propagates the exception to the emitter.
        """
        if only_remote and only_local:
            raise ValueError("emit: only_remote and only_local exclude each other")
        if not only_local and self.router.is_active:
            self.router.emit(event, args, kwargs)
        if not only_remote:
            self._dispatch(event, args, kwargs)

    def emit_to(self, node_id: int, event: str, *args: Any, **kwargs: Any) -> None:
        """Send ``event`` to the node ``node_id`` only (not to local listeners)."""
        if not self.router.is_active:
            raise RuntimeError(f"emit_to({node_id}, {event!r}): this task has no peers (single process)")
        self.router.emit(event, args, kwargs, to=node_id)

    def _dispatch(self, event: str, args: tuple, kwargs: dict) -> None:
        with self._listeners_lock:
            listeners = self._listeners.get(event)
            if not listeners:
                return
            if any(o for _, o in listeners):
                self._listeners[event] = [(f, o) for f, o in listeners if not o]
            listeners = list(listeners)
        for fn, _ in listeners:
            fn(*args, **kwargs)

    def _on_remote(self, event: str, args: tuple, kwargs: dict) -> None:
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
            _note(e, f"raised by a listener of remote event {event!r}")
            self._errors.append(e)

    def _raise_listener_error(self) -> None:
        error = self._errors[0]
        self._errors.clear()
        raise error

    def wait_for(self, event: str, timeout: float = float("inf"),
                 ignore_timeout_exception: bool = True) -> Optional[Tuple[tuple, dict]]:
        """Block until ``event`` is emitted; return its ``(args, kwargs)``.

        On timeout return None, or raise ``TimeoutError`` with ``ignore_timeout_exception=False``. The
        wait is also released (returning None) when the task finishes.

        With a ``ZmqRouter`` the waiting thread reads the peers' messages itself while it waits and runs the
        listeners of the remote events that arrive meanwhile (a reply then needs no thread switch), so do not
        call it while holding a lock that such a listener takes.
        """
        received: List[Tuple[tuple, dict]] = []
        done = threading.Event()
        # A router that can (ZmqRouter) lets this thread read the peers' messages itself while it waits, so
        # a remote reply reaches it without a thread switch.
        router_wait = getattr(self.router, "wait", None) if self.router.is_active else None

        def listener(*args: Any, **kwargs: Any) -> None:
            received.append((args, kwargs))
            done.set()
            if router_wait is not None:
                self._wake_router_waits()

        def on_finish(*_: Any, **__: Any) -> None:
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

    # ------------------------------------------------------------------ roles and labels
    @property
    def roles(self) -> set:
        return set(self._roles)

    def add_role(self, role: RoleLike) -> None:
        self._roles.add(as_role(role))

    def has_role(self, role: RoleLike) -> bool:
        """True if this node has ``role``; a node with no roles has every role."""
        return not self._roles or as_role(role) in self._roles

    @property
    def labels(self) -> set:
        return self.router.labels

    def match_labels(self, patterns: Union[str, Iterable[str]]) -> bool:
        """True if any of this node's labels matches any of the glob ``patterns``."""
        if isinstance(patterns, str):
            patterns = [patterns]
        patterns = list(patterns)
        return any(fnmatch.fnmatch(label, p) for label in self.router.labels for p in patterns)


def _note(e: BaseException, message: str) -> None:
    notes = getattr(e, "__notes__", None)
    if notes is None:
        try:
            e.__notes__ = notes = []
        except AttributeError:
            return
    if message not in notes:
        notes.append(message)


def _noop() -> None:
    return None


task = Task()
