"""The task runtime: middleware composed over one shared context per step.

A middleware is ``fn(ctx)``. If it returns a generator (it ``yield``s), the code before the yield is its
forward part and runs in registration order; the code after it is its backward part and runs after all
forward parts of the step, last in first out. A step is: forward parts, backward parts, ``ctx.renew()``.
The two phases are written once, in ``pipeline.runtime.phases``; events (``on``/``emit``/``wait_for``,
``finish``) live in ``pipeline.runtime.events``.
"""
from __future__ import annotations

import fnmatch
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from types import GeneratorType
from typing import TYPE_CHECKING, Callable, ContextManager, Dict, Iterable, List, Optional, Set, TextIO, Type, TypeVar, Union

from contexts import Context

from . import combinators
from .contracts import check_chain, check_mode, report
from .events import FINISH_EVENT, UNCLAIMED_LIMIT, TaskEvents
from .phases import Locked, Middleware, Void, finish, is_void, name_of, run_parts, start
from .roles import Role, RoleLike, as_role, normalize_roles, roles_of
from .router import LocalRouter, Router, default_router

if TYPE_CHECKING:
    from .describe import Description

R = TypeVar("R")
C = TypeVar("C", bound=Context)

__all__ = ["Task", "task", "Middleware", "FINISH_EVENT", "UNCLAIMED_LIMIT"]


class Task(TaskEvents):
    """One pipeline runtime per process (``from pipeline import task``)."""

    role = Role

    def __init__(self) -> None:
        self._running = False
        # ``rlpipe describe`` sets it: ``run`` calls it (it describes the pipeline and raises) instead of stepping
        self.instead_of_run: Optional[Callable[["Task"], None]] = None
        self._reset()

    # ------------------------------------------------------------------ lifecycle
    def _reset(self, async_mode: bool = False, n_async_workers: int = 3, ctx: Optional[Context] = None,
               labels: Optional[Iterable[str]] = None, roles: Optional[Iterable[RoleLike]] = None,
               router: Optional[Router] = None, fields_check: Optional[str] = None) -> None:
        self.ctx: Context = ctx if ctx is not None else Context()
        self._ran_ctx: Optional[Context] = None  # the context of the last step run (task.ctx after run)
        self._middleware: List[Middleware] = []
        self._wrappers: List[Callable[[Middleware], Middleware]] = []
        self._backward_stack: List[GeneratorType] = []
        self._inner: List[GeneratorType] = []  # backward parts from task.wrap during a forward part
        self._reset_events()
        self._pending: List[Future] = []
        self._roles = normalize_roles(roles)
        self._lock = threading.Lock()
        self.async_mode = async_mode
        self._executor: Optional[ThreadPoolExecutor] = (
            ThreadPoolExecutor(max_workers=n_async_workers, thread_name_prefix="rlpipe-async")
            if async_mode else None
        )
        self.router: Router = router if router is not None else LocalRouter()
        self.router.labels = set(labels if labels is not None else self.router.labels) | self._automatic_labels()
        self._parallels: List[combinators.Parallel] = []
        self._fields_check = check_mode(fields_check)
        self._checked: Optional[tuple] = None  # the registrations the fields check last ran on

    def start(self, async_mode: bool = False, n_async_workers: int = 3, ctx: Optional[Context] = None,
              labels: Optional[Iterable[str]] = None, roles: Optional[Iterable[RoleLike]] = None,
              router: Optional[Router] = None, fields_check: Optional[str] = None) -> "Task":
        """Reset all state and start. Use as a context manager: ``with task.start(ctx=...):``.

        ``roles`` (e.g. ``[Role.LEARNER]``) are known from here on, before middleware are constructed.
        ``router`` defaults to the one the launcher configured (a ``LocalRouter`` in a single process).
        ``fields_check``: what ``run`` does with a miswired chain (``pipeline.runtime.contracts``): ``"warn"``
        (default, or ``$RLPIPE_FIELDS_CHECK``), ``"error"`` or ``"off"``.
        """
        if self._running:
            self.stop()
        router = router if router is not None else default_router()
        if roles is None:  # a launcher gives the node's roles to its router
            roles = getattr(router, "roles", None) or None
        self._reset(async_mode, n_async_workers, ctx, labels, roles, router, fields_check)
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
        for p in self._parallels:
            p.close()
        if self._running:
            self._running = False
            self.router.stop()

    def __enter__(self) -> "Task":
        return self

    def __exit__(self, exc_type: Optional[type], *exc: object) -> None:
        if exc_type is None and self._running and not self._finish and self.router.is_active:
            self.finish = True  # a node that leaves normally ends the run of its peers too
        self.stop()

    @property
    def running(self) -> bool:
        return self._running

    def context(self, cls: Type[C]) -> C:
        """``task.ctx`` typed as ``cls`` (e.g. ``task.context(OnlineRLContext).env_step``).

        ``task.ctx`` is typed as the base ``Context``; this returns the same object with its own type, and
        raises ``TypeError`` if it is not a ``cls`` (for example, the task was started without ``ctx=``).
        """
        ctx = self.ctx
        if not isinstance(ctx, cls):
            raise TypeError(f"task.context({cls.__name__}): task.ctx is a {type(ctx).__name__}, not a "
                            f"{cls.__name__}; start the task with `task.start(ctx={cls.__name__}())`")
        return ctx

    # ------------------------------------------------------------------ registration
    def use(self, fn: Middleware, lock: Union[bool, ContextManager[object]] = False) -> "Task":
        """Register a middleware. ``lock=True`` runs it under the task's lock; a lock object may be given."""
        if not self._running:
            raise RuntimeError(f"task.use({name_of(fn)}) before task.start(): start() resets the task, so the "
                               "middleware would be lost. Register it inside `with task.start(ctx=...):`")
        if is_void(fn):
            return self
        if not callable(fn):
            raise TypeError(f"task.use expects a middleware fn(ctx), got {fn!r} of type {type(fn).__name__}")
        if lock:
            fn = Locked(fn, self._lock if lock is True else lock)
        self._middleware.append(fn)
        return self

    def use_wrapper(self, wrapper: Callable[[Middleware], Middleware]) -> "Task":
        """Wrap every middleware (also those registered before) with ``wrapper(fn) -> fn``."""
        self._wrappers.append(wrapper)
        return self

    def void(self) -> Void:
        return Void()

    def _active(self, fn: object) -> bool:
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

        Afterwards ``task.ctx`` is the last step's context (read its results there); the next ``run``
        starts from its renewal. A step that sets ``finish`` runs to its end (all forward and backward
        parts) before the run stops.
        A middleware that raises stops the run: the exception propagates with the middleware's name in
        its notes, and the task is stopped (``start`` again to reuse it).
        """
        if not self._running:
            raise RuntimeError("task is not started: use `with task.start(ctx=...):` before task.run()")
        chain = self._chain()
        if not chain:
            raise RuntimeError("task.run() with no middleware: register some with task.use(fn) first")
        if self.instead_of_run is not None:
            self.instead_of_run(self)
        self._check_fields()
        has_pool = self._executor is not None
        if has_pool:  # the forward phase ends by waiting for the work handed to the thread pool
            chain.append(self._wait_pending_middleware)
        stack, inner, errors = self._backward_stack, self._inner, self._errors
        ctx = self.ctx if self.ctx is not self._ran_ctx else self.ctx.renew()
        steps = 0
        try:
            for steps in range(max_step):
                if self._finish:
                    break
                self.ctx = ctx
                run_parts(chain, ctx, stack, inner, True)
                if errors or has_pool and self._pending:
                    self._end_step_checks()
                ctx = ctx.renew()
            else:
                steps = max_step
        except BaseException:
            self.stop()
            raise
        if steps:
            self._ran_ctx = self.ctx

    def _check_fields(self) -> None:
        """Once per set of registrations: report reads that nothing before them provides on this node."""
        registered = tuple(self._middleware)
        if registered == self._checked or self._fields_check == "off":
            return
        self._checked = registered
        active = [fn for fn in registered if self._active(fn)]
        skipped = [fn for fn in registered if not self._active(fn)]
        provided = set(getattr(self.ctx, "_kept_keys", ())) | {"total_step"}
        report(check_chain(active, provided, self._roles, skipped), self._fields_check)

    def describe(self, nodes: Optional[Dict[int, Iterable[RoleLike]]] = None, out: Optional[str] = None,
                 stream: Optional[TextIO] = None) -> "Description":
        """Print the pipeline as a table (middleware in order, roles, reads/writes, wiring problems).

        ``nodes`` ({node id: roles}) describes a multi-node run of this pipeline: which node runs what and
        which fields cross the bus. ``out`` writes ``<out>.mmd`` (Mermaid; with graphviz also ``.dot`` and
        ``.svg``). Prints to ``stream`` (default ``sys.stdout``). Returns the ``pipeline.runtime.describe.Description``.
        """
        from .describe import describe_registered  # lazy: describe loads subprocess; import pipeline stays light

        d = describe_registered(list(self._middleware), set(getattr(self.ctx, "_kept_keys", ())) | {"total_step"},
                                nodes, (self.router.node_id, self._roles))
        stream = stream if stream is not None else sys.stdout
        print(d.table(), file=stream)
        if out:
            for path in d.write(out):
                print(f"wrote {path}", file=stream)
        return d

    def forward(self, fn: Middleware, ctx: Optional[Context] = None) -> Optional[GeneratorType]:
        """Run ``fn``'s forward part; its backward part joins the step's backward stack."""
        stack = self._backward_stack
        depth = len(stack)
        run_parts((fn,), self.ctx if ctx is None else ctx, stack, self._inner, backward=False)
        return stack[depth] if len(stack) > depth else None

    def backward(self) -> None:
        """Run every pending backward part, last in first out."""
        self._flush_inner()
        run_parts((), None, self._backward_stack)

    def _flush_inner(self) -> None:
        if self._inner:
            self._backward_stack.extend(self._inner)
            self._inner.clear()

    def renew(self) -> Context:
        """Replace ``task.ctx`` with ``ctx.renew()`` (kept keys carried, ``total_step`` + 1), for steps run by
        hand with ``forward``/``backward``."""
        self.ctx = self.ctx.renew()
        return self.ctx

    def wrap(self, fn: Middleware,
             lock: Union[bool, ContextManager[object]] = False) -> Callable[[Context], Callable[[], None]]:
        """Let one middleware call another.

        Calling the result with a context runs ``fn``'s forward part and returns a closure that runs its
        backward part. A backward part whose closure is never called runs in the step's backward phase.
        """
        if lock:
            fn = Locked(fn, self._lock if lock is True else lock)

        def forward_part(ctx: Context) -> Callable[[], None]:
            g = start(fn, ctx)
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
                finish(g)

            return backward_part

        forward_part.__name__ = f"wrapped({name_of(fn)})"
        return forward_part

    # ------------------------------------------------------------------ combinators and the thread pool
    def serial(self, *fns: Middleware) -> Middleware:
        """Combine middleware into one that runs them in order (backward parts in reverse)."""
        return combinators.serial(*fns, active=self._active)

    def parallel(self, *fns: Middleware) -> Middleware:
        """Combine middleware into one whose branches run concurrently on threads (in every mode).

        Forward parts run concurrently; in the step's backward phase the branches' backward parts do too.
        Use ``serial`` when the order matters.
        """
        combined = combinators.Parallel(fns, active=self._active)
        self._parallels.append(combined)
        return combined

    def async_executor(self, fn: Callable[..., R], *args: object, **kwargs: object) -> "Future[R]":
        """Run ``fn(*args, **kwargs)`` on the thread pool; the step waits for it before its backward phase.

        Without async mode, ``fn`` runs at once. Exceptions surface in the pipeline at the end of the step.
        """
        if self._executor is None:
            fut: Future[R] = Future()
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

    def _wait_pending_middleware(self, ctx: Context) -> None:
        """The last forward part of a step in async mode: the ``task.async_executor`` jobs finish first."""
        if self._pending:
            self._wait_pending()

    _wait_pending_middleware.__qualname__ = "wait for task.async_executor jobs"

    def _end_step_checks(self) -> None:
        """At the end of a step: wait for work the backward parts handed to the pool; raise listener errors."""
        if self._pending:
            self._wait_pending()
        if self._errors:
            self._raise_listener_error()

    # ------------------------------------------------------------------ roles and labels
    @property
    def roles(self) -> Set[Role]:
        return set(self._roles)

    def add_role(self, role: RoleLike) -> None:
        self._roles.add(as_role(role))

    def has_role(self, role: RoleLike) -> bool:
        """True if this node has ``role``; a node with no roles has every role."""
        return not self._roles or as_role(role) in self._roles

    def _automatic_labels(self) -> Set[str]:
        """``node.<id>``, ``standalone`` or ``distributed``, and ``async`` in async mode."""
        auto = {f"node.{self.router.node_id}", "distributed" if self.router.is_active else "standalone"}
        if self.async_mode:
            auto.add("async")
        return auto

    @property
    def labels(self) -> Set[str]:
        return self.router.labels

    def match_labels(self, patterns: Union[str, Iterable[str]]) -> bool:
        """True if any of this node's labels matches any of the glob ``patterns``."""
        if isinstance(patterns, str):
            patterns = [patterns]
        patterns = list(patterns)
        return any(fnmatch.fnmatch(label, p) for label in self.router.labels for p in patterns)


def _noop() -> None:
    return None


task = Task()
