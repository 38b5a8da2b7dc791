"""Runtime overhead: ``task.run`` for N steps of 5 trivial middleware vs a bare Python loop.

Prints µs/step for (a) plain functions, (b) generator middleware, (c) plain functions over an
``OnlineRLContext``, each next to its baseline measured in the same run, and the import cost of
``pipeline, middleware, contexts`` over ``torch``. Targets (issue 2): (a) <= 4x, (b) <= 1.6x, import
<= +0.3 s. DI-engine 0.5.3 on this kind of machine: (a) 21x, (b) 4.4x, import +2.4 s.

    python benchmarks/bench_task.py [--steps 100000]
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from contexts import Context, OnlineRLContext  # noqa: E402
from pipeline import task  # noqa: E402


def plain_fns():
    def m(ctx):
        ctx.x = 1
    return [m for _ in range(5)]


def gen_fns():
    def m(ctx):
        ctx.x = 1
        yield
        ctx.y = 2
    return [m for _ in range(5)]


def bare_plain(fns, steps):
    ctx = Context()
    t0 = time.perf_counter()
    for _ in range(steps):
        for f in fns:
            f(ctx)
    return time.perf_counter() - t0


def bare_gen(fns, steps):
    ctx = Context()
    t0 = time.perf_counter()
    for _ in range(steps):
        stack = []
        for f in fns:
            g = f(ctx)
            next(g)
            stack.append(g)
        while stack:
            try:
                next(stack.pop())
            except StopIteration:
                pass
    return time.perf_counter() - t0


def with_task(fns, steps, ctx_cls=Context):
    with task.start(ctx=ctx_cls()):
        for f in fns:
            task.use(f)
        t0 = time.perf_counter()
        task.run(steps)
        return time.perf_counter() - t0


def best_of(n, fn, *args):
    return min(fn(*args) for _ in range(n))


def import_cost() -> tuple:
    def t(stmt):
        code = f"import time; t=time.perf_counter(); {stmt}; print(time.perf_counter()-t)"
        runs = [float(subprocess.check_output([sys.executable, "-c", code], cwd=os.path.dirname(
            os.path.dirname(os.path.abspath(__file__))))) for _ in range(3)]
        return min(runs)
    base = t("import torch")
    ours = t("import torch; import pipeline, middleware, contexts")
    return base, ours


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    n = a.steps
    us = lambda s: s / n * 1e6  # noqa: E731
    rows = [
        ("(a) plain functions, Context", best_of(a.repeat, with_task, plain_fns(), n),
         best_of(a.repeat, bare_plain, plain_fns(), n), 4.0),
        ("(b) generator middleware, Context", best_of(a.repeat, with_task, gen_fns(), n),
         best_of(a.repeat, bare_gen, gen_fns(), n), 1.6),
        ("(c) plain functions, OnlineRLContext", best_of(a.repeat, with_task, plain_fns(), n, OnlineRLContext),
         best_of(a.repeat, bare_plain, plain_fns(), n), None),
    ]
    print(f"{n} steps of 5 trivial middleware")
    print(f"{'case':40s} {'task µs/step':>13s} {'bare µs/step':>13s} {'ratio':>7s} {'target':>7s}")
    for name, ours, base, target in rows:
        print(f"{name:40s} {us(ours):13.3f} {us(base):13.3f} {ours / base:7.2f} "
              f"{'<= %.1f' % target if target else '-':>7s}")
    base, ours = import_cost()
    print(f"import torch: {base:.2f} s; + pipeline, middleware, contexts: {ours:.2f} s "
          f"(adds {ours - base:+.2f} s; target <= +0.30 s)")


if __name__ == "__main__":
    main()
