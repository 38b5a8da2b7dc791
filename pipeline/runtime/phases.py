"""A middleware's two parts and the two phases of a step, written once.

A middleware is ``fn(ctx)``. If it returns a generator (it ``yield``s once), the code before the yield is
its forward part and the code after it its backward part. A step runs every forward part in order, pushing
the backward parts on a stack, then pops and runs the stack (last in first out). ``run_parts`` is that
code; the task's ``run``, ``forward``, ``backward``, ``wrap``, ``serial`` and ``parallel`` all use it.
"""
from __future__ import annotations

from types import GeneratorType
from typing import Any, Callable, ContextManager, Generator, Iterable, List, Optional

from contexts import Context


Middleware = Callable[[Any], object]
"""A middleware: called with the task's context (any ``Context`` subclass, so the parameter is ``Any``: a
middleware written for ``OnlineRLContext`` is one too); returns None or a generator that yields once."""


def run_parts(chain: Iterable[Middleware], ctx: Optional[Context], stack: List[GeneratorType],
              inner: Optional[List[GeneratorType]] = None, backward: bool = True) -> None:
    """Run the forward parts of ``chain`` on ``ctx``, then (if ``backward``) every backward part on ``stack``.

    Forward parts run in order; each backward part is pushed on ``stack``, and after each middleware the
    backward parts it started through ``task.wrap`` (collected in ``inner``) are pushed above it. The
    backward phase pops ``stack`` empty. An exception gets the middleware's name in its notes.
    """
    for fn in chain:
        try:
            g = fn(ctx)
            if type(g) is GeneratorType:
                next(g)
                stack.append(g)
        except StopIteration:
            pass  # a generator that returned before yielding has no backward part
        except BaseException as e:
            note(e, f"raised in middleware {name_of(fn)!r}")
            raise
        if inner:
            stack.extend(inner)
            inner.clear()
    if not backward:
        return
    while stack:
        g = stack.pop()
        try:
            next(g)
        except StopIteration:
            continue
        except BaseException as e:
            note(e, f"raised in the backward part of middleware {g.__qualname__!r}")
            raise
        g.close()
        raise RuntimeError(f"middleware {g.__qualname__} yielded more than once; a middleware yields at most once")


def start(fn: Middleware, ctx: Context) -> Optional[GeneratorType]:
    """Run ``fn``'s forward part; return the generator holding its backward part, if it has one."""
    started: List[GeneratorType] = []
    run_parts((fn,), ctx, started, backward=False)
    return started[0] if started else None


def finish(g: GeneratorType) -> None:
    """Run a generator's backward part (everything after its single yield)."""
    run_parts((), None, [g])


def name_of(fn: object) -> str:
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def note(e: BaseException, message: str) -> None:
    """Add ``message`` to the exception's notes (once)."""
    notes = getattr(e, "__notes__", None)
    if notes is None:
        try:
            notes = []
            e.__notes__ = notes
        except AttributeError:
            return
    if message not in notes:
        notes.append(message)


class Void:
    """A middleware that does nothing; ``task.use`` skips it."""

    __is_void__ = True
    __name__ = "void"

    def __call__(self, ctx: Context) -> None:
        return None

    def __repr__(self) -> str:
        return "task.void()"


def is_void(fn: object) -> bool:
    return getattr(fn, "__is_void__", False)


class Locked:
    """Runs a middleware's forward and backward parts while holding a lock."""

    def __init__(self, fn: Middleware, lock: ContextManager[object]) -> None:
        self.fn, self.lock = fn, lock
        self.__name__ = name_of(fn)
        for mark in ("__roles__", "__fields__", "__provided__", "__branches__", "__concurrent__"):
            if hasattr(fn, mark):
                setattr(self, mark, getattr(fn, mark))

    def __call__(self, ctx: Context) -> object:
        with self.lock:
            g = self.fn(ctx)
        if type(g) is not GeneratorType:
            return g
        return self._locked_generator(g)

    def _locked_generator(self, g: GeneratorType) -> Generator[None, None, None]:
        with self.lock:
            try:
                next(g)
            except StopIteration:
                return
        yield
        with self.lock:
            finish(g)
