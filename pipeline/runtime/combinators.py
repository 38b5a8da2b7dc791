"""``task.serial`` and ``task.parallel``: several middleware combined into one.

``serial(a, b)`` runs ``a`` then ``b`` in the calling thread (backward parts in reverse). ``parallel(a, b)``
runs the branches concurrently on a thread pool of its own (one thread per branch, so branches that wait
for each other cannot starve, and a parallel nested in another has its own threads): first every branch's
forward part, then, in the step's backward phase, every branch's backward part. A branch that raises is
reported once all branches have ended. Branches gated to roles this node lacks are skipped.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from types import GeneratorType
from typing import Callable, Generator, List, Optional, Sequence, Tuple, TypeVar

from contexts import Context

from .phases import Middleware, finish, is_void, name_of, run_parts, start
from .roles import roles_of

R = TypeVar("R")


def _on_this_node(fns: Sequence[Middleware], active: Optional[Callable[[object], bool]]) -> Sequence[Middleware]:
    """The branches the node's roles run (``active`` is the task's role test; None: all)."""
    return fns if active is None else [f for f in fns if active(f)]


def serial(*fns: Middleware, active: Optional[Callable[[object], bool]] = None) -> Middleware:
    """One middleware that runs ``fns`` in order, their backward parts in reverse.

    ``active(fn)``: whether this node runs ``fn`` (role-gated branches are skipped like any middleware).
    """
    parts = tuple(f for f in fns if not is_void(f))
    gate = active if any(roles_of(f) for f in parts) else None

    def _serial(ctx: Context) -> Generator[None, None, None]:
        stack: List[GeneratorType] = []
        run_parts(_on_this_node(parts, gate), ctx, stack, backward=False)
        yield
        run_parts((), None, stack)

    _serial.__name__ = _serial.__qualname__ = "serial(" + ", ".join(name_of(f) for f in parts) + ")"
    setattr(_serial, "__branches__", parts)
    return _serial


class Parallel:
    """One middleware that runs its branches concurrently (see the module docstring)."""

    def __init__(self, fns: Sequence[Middleware], active: Optional[Callable[[object], bool]] = None) -> None:
        self.branches = tuple(f for f in fns if not is_void(f))
        self._active = active if any(roles_of(f) for f in self.branches) else None
        self.__name__ = self.__qualname__ = "parallel(" + ", ".join(name_of(f) for f in self.branches) + ")"
        self.__branches__ = self.branches
        self.__concurrent__ = True  # for the fields check: branches do not see each other's writes
        self._pool: Optional[ThreadPoolExecutor] = None
        self._pool_lock = threading.Lock()

    def __call__(self, ctx: Context) -> Generator[None, None, None]:
        results, error = self._on_all(start, [(fn, ctx) for fn in _on_this_node(self.branches, self._active)])
        started = [g for g in results if g is not None]
        if error is not None:
            for g in started:
                g.close()
            raise error
        return self._backward(started)

    def _backward(self, started: List[GeneratorType]) -> Generator[None, None, None]:
        yield
        _, error = self._on_all(finish, [(g,) for g in started])
        if error is not None:
            raise error

    def _on_all(self, fn: Callable[..., Optional[R]],
                calls: List[Tuple[object, ...]]) -> Tuple[List[Optional[R]], Optional[BaseException]]:
        """``fn(*args)`` for every ``args`` in ``calls`` at once: the results (None where it raised) and the
        first error, once all calls ended."""
        if not calls:
            return [], None
        if len(calls) == 1:  # one branch: no thread needed
            try:
                return [fn(*calls[0])], None
            except BaseException as e:
                return [None], e
        pool = self._threads()
        futures = [pool.submit(fn, *args) for args in calls]
        errors = [f.exception() for f in futures]
        results: List[Optional[R]] = [None if e is not None else f.result() for f, e in zip(futures, errors)]
        return results, next((e for e in errors if e is not None), None)

    def _threads(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=len(self.branches), thread_name_prefix="rlpipe-parallel")
            return self._pool

    def close(self) -> None:
        """Let the pool's threads end (``task.stop`` calls it); the next call starts new ones."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
