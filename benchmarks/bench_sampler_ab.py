"""Paired A/B of prioritized replay: a checkout from before the sampler component (its buffers use the
``PriorityExperienceReplay`` middleware, since removed) against this one's ``PrioritizedSampler``.

Both ``pipeline.data`` packages load side by side in one process under different names, and chunks of
calls alternate old/new, so a shared machine's load hits both alike.

    git worktree add --detach ../old f85f945 && (cd ../old && python setup.py build_ext --inplace)
    python benchmarks/bench_sampler_ab.py ../old

Prints new/old speed ratios (median over chunks, and of the summed times) of ``sample_batch`` +
priority update and of DI-engine-style ``sample`` + ``update_many``, for batches of 32 and 256 from a
100k buffer. ``CHUNKS`` and ``CALLS`` (environment variables) set the number of chunks and calls per chunk.
"""
import argparse
import importlib.util
import os
import sys
import time

import numpy as np
from typing import Dict, List


def load(name, root):
    spec = importlib.util.spec_from_file_location(name, os.path.join(root, "pipeline/data/__init__.py"),
                                                  submodule_search_locations=[os.path.join(root, "pipeline/data")])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("old_root", help="a checkout from before the sampler component, its C extension built")
args = ap.parse_args()
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
old = load("old_data", os.path.abspath(args.old_root))
new = load("new_data", HERE)
print("kernels:", old._accel.EXT is not None, new._accel.EXT is not None, old._accel.EXT is not new._accel.EXT)
SIZE = 100_000

def transition(i):
    return {"obs": np.full(4, i % 97, np.float32), "next_obs": np.zeros(4, np.float32), "action": i % 2,
            "reward": 1.0, "done": False}

data = [transition(i) for i in range(SIZE)]
def filled(kind):
    if kind == "old":
        b = old.DequeBuffer(SIZE, columnar=True, seed=0); b.use(old.PriorityExperienceReplay(b))  # old: no sampler
    else:
        b = new.DequeBuffer(SIZE, columnar=True, seed=0, sampler=new.PrioritizedSampler())
    for d in data: b.push(d)
    return b

bufs = {k: filled(k) for k in ("old", "new_sampler")}
rng = np.random.default_rng(0)

def make(kind, B, how):
    b = bufs[kind]; r0 = np.random.default_rng(B); pri = [r0.random(B) + 0.01 for _ in range(64)]; it = iter(range(10**9))
    if how == "batch":
        if kind == "old":
            def f():
                sb = b.sample_batch(B); b.update_many(sb.index, meta={"priority": pri[next(it) % 64]})
        else:
            def f():
                sb = b.sample_batch(B); b.update_priority(sb["indices"], pri[next(it) % 64])
    else:  # sample() items + update_many (DI-engine style), same call on both
        def f():
            items = b.sample(B); b.update_many([x.index for x in items], meta={"priority": pri[next(it) % 64]})
    return f

def rate(fn, sec):
    for _ in range(20): fn()
    n, t0 = 0, time.process_time()
    while True:
        for _ in range(20): fn()
        n += 20
        dt = time.process_time() - t0
        if dt >= sec: return n / dt

CHUNKS, CALLS = int(os.environ.get("CHUNKS", 300)), int(os.environ.get("CALLS", 10))
for B in (32, 256):
    for how in ("batch", "items"):
        fns = {k: make(k, B, how) for k in bufs}
        for f in fns.values():
            for _ in range(50): f()
        tot = {k: 0.0 for k in fns}; rat: Dict[str, List[float]] = {k: [] for k in ("new_sampler",)}
        keys = list(fns)
        for c in range(CHUNKS):
            order = keys if c % 2 == 0 else keys[::-1]
            t = {}
            for k in order:
                f = fns[k]; t0 = time.perf_counter()
                for _ in range(CALLS): f()
                t[k] = time.perf_counter() - t0; tot[k] += t[k]
            for k in rat: rat[k].append(t["old"] / t[k])
        name = "sample_batch+update_priority" if how == "batch" else "sample+update_many"
        print(f"B={B:3d} {name:30s} new/old speed: sampler= {np.median(rat['new_sampler']):.3f} (sum {tot['old']/tot['new_sampler']:.3f}); "
              f"old {tot['old']/CHUNKS/CALLS*1e6:.1f} us/call", flush=True)
