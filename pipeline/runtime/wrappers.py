"""Wrappers that apply to every middleware (``task.use_wrapper(w)``)."""
from __future__ import annotations

import time
from collections import defaultdict
from types import GeneratorType
from typing import Dict, Generator, List

from contexts import Context

from .phases import Middleware


class StepTimer:
    """Records the wall time of every middleware, forward and backward parts together, per step.

    ``timer.records[name]`` is the list of per-step seconds; ``timer.summary()`` gives mean/total/count.
    Use: ``timer = StepTimer(); task.use_wrapper(timer)``.
    """

    def __init__(self, print_per_step: int = 0) -> None:
        self.records: Dict[str, List[float]] = defaultdict(list)
        self.print_per_step = print_per_step
        self._steps = 0

    def __call__(self, fn: Middleware) -> Middleware:
        name = getattr(fn, "__name__", None) or type(fn).__name__
        records = self.records[name]

        def timed(ctx: Context) -> object:
            t0 = time.perf_counter()
            g = fn(ctx)
            if type(g) is not GeneratorType:
                records.append(time.perf_counter() - t0)
                return g
            return self._timed_generator(g, t0, records)

        timed.__name__ = name
        timed.__qualname__ = name
        roles = getattr(fn, "__roles__", None)
        if roles is not None:
            setattr(timed, "__roles__", roles)
        return timed

    @staticmethod
    def _timed_generator(g: GeneratorType, t0: float, records: List[float]) -> Generator[None, None, None]:
        try:
            next(g)
        except StopIteration:
            records.append(time.perf_counter() - t0)
            return
        forward = time.perf_counter() - t0
        yield
        t1 = time.perf_counter()
        try:
            next(g)
        except StopIteration:
            pass
        else:
            raise RuntimeError(f"middleware {g.__qualname__} yielded more than once")
        records.append(forward + time.perf_counter() - t1)

    def summary(self) -> Dict[str, Dict[str, float]]:
        """Per middleware: mean and total seconds, and the number of timed calls."""
        return {
            name: {"mean": sum(v) / len(v), "total": sum(v), "count": float(len(v))}
            for name, v in self.records.items() if v
        }
