"""Replay-buffer checkpoint files: columnar (format 2, now) against one object per item (format 1, before).

Run: ``python benchmarks/bench_buffer_io.py [--n 20000] [--frames 2000] [--rounds 5]``. A buffer of
``n`` SAC transitions as ``StepCollector`` + ``data_pusher`` store them on HalfCheetah (17-dim float32
observations, 6-dim actions, Python reward / flags / env id; meta with the env, the train iteration
and PER priorities) is saved and loaded both ways in this process, interleaved, ``rounds`` times;
then ``frames`` Atari transitions in a ``FrameStorage`` (the file holds each frame once).
Times are CPU seconds of this process (medians), so other jobs on a shared machine count little;
compare the ratios. The format-1 writer is kept here as the baseline (``save_v1``); the library
still reads format-1 files, with the same code as before, so "load v1" is the old load path.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.data import DequeBuffer, PrioritizedSampler  # noqa: E402
from pipeline.data.frame_storage import FrameStorage  # noqa: E402
from pipeline.data.serialization import encode  # noqa: E402


def save_v1(buf: DequeBuffer, path: str) -> None:
    """The writer before columnar files: every item's data and meta encoded and pickled on its own."""
    s = buf.storage
    with s.lock:
        if s.syncers:
            s.sync(s.ordered_slots().copy())
        order = s.ordered_slots().tolist()
        payload = {"format": "rlpipe.DequeBuffer", "version": 1, "size": s.size, "next_id": s.next_id,
                   "ids": [s.items[k].index for k in order],
                   "data": [encode(s.items[k].data, "data") for k in order],
                   "meta": [encode(s.items[k].meta, "meta") for k in order]}
    torch.save(payload, path)


def filled(n: int) -> DequeBuffer:
    rng = np.random.default_rng(0)
    buf = DequeBuffer(n, seed=0, sampler=PrioritizedSampler())
    obs = rng.standard_normal((n + 1, 17)).astype(np.float32)
    act = rng.uniform(-1, 1, (n, 6)).astype(np.float32)
    for i in range(n):
        buf.push({"obs": obs[i], "action": act[i], "reward": float(rng.standard_normal()), "next_obs": obs[i + 1],
                  "terminated": False, "truncated": i % 1000 == 999, "env_id": 0},
                 {"env": 0, "train_iter_data_collected": i})
    b = buf.sample_batch(256)
    buf.update_many(b["indices"], meta={"priority": np.linspace(0.1, 3.0, 256)})
    return buf


def filled_frames(n: int) -> DequeBuffer:
    """``n`` Atari transitions (4 stacked 84x84 frames for obs and next_obs, one new frame per step) in a
    FrameStorage, as examples/dqn_atari.py keeps them."""
    rng = np.random.default_rng(1)
    frames = rng.integers(0, 255, (n + 4, 84, 84), dtype=np.uint8)
    buf = DequeBuffer(n, storage=FrameStorage(n), seed=0, sampler=PrioritizedSampler())
    for t in range(n):
        buf.push({"obs": frames[t:t + 4], "action": t % 6, "reward": 0.0, "next_obs": frames[t + 1:t + 5],
                  "terminated": False, "truncated": False, "env_id": 0}, {"env": 0, "train_iter_data_collected": t})
    return buf


def cpu(fn) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def measure(buf: DequeBuffer, make_empty, rounds: int) -> tuple:
    times: Dict[str, List[float]] = {k: [] for k in ("save v1", "save v2", "load v1", "load v2")}
    with tempfile.TemporaryDirectory() as d:
        p1, p2 = os.path.join(d, "v1.pt"), os.path.join(d, "v2.pt")
        for _ in range(rounds):
            times["save v1"].append(cpu(lambda: save_v1(buf, p1)))
            times["save v2"].append(cpu(lambda: buf.save_data(p2)))
            for key, path in (("load v1", p1), ("load v2", p2)):
                other = make_empty()
                times[key].append(cpu(lambda: other.load_data(path)))
                assert other.indices() == buf.indices()
        sizes = os.path.getsize(p1), os.path.getsize(p2)
    return {k: statistics.median(v) for k, v in times.items()}, sizes


def report(title: str, med: dict, sizes: tuple) -> None:
    print(title)
    print(f"{'':6} {'v1 (per item, before)':>22} {'v2 (columnar, now)':>20} {'ratio':>8}")
    for op in ("save", "load"):
        a, b = med[f"{op} v1"], med[f"{op} v2"]
        print(f"{op:6} {a:>20.3f} s {b:>18.3f} s {a / b:>7.1f}x")
    print(f"{'size':6} {sizes[0] / 1e6:>19.1f} MB {sizes[1] / 1e6:>17.1f} MB {sizes[0] / sizes[1]:>7.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20_000, help="SAC transitions in the buffer (default 20000)")
    ap.add_argument("--frames", type=int, default=2_000, help="Atari transitions in the FrameStorage buffer "
                                                              "(default 2000; 0 skips it)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(1)

    def per_buffer(storage=None):
        def make():
            return DequeBuffer(args.n, storage=storage() if storage else None, sampler=PrioritizedSampler())
        return make

    med, sizes = measure(filled(args.n), per_buffer(), args.rounds)
    print(f"CPU s, median of {args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}")
    report(f"buffer file, {args.n} SAC transitions with PER meta", med, sizes)
    if args.frames:
        def make_frames():
            return DequeBuffer(args.frames, storage=FrameStorage(args.frames), sampler=PrioritizedSampler())

        med, sizes = measure(filled_frames(args.frames), make_frames, args.rounds)
        report(f"buffer file, {args.frames} Atari transitions (4x84x84 stacks) in a FrameStorage", med, sizes)


if __name__ == "__main__":
    main()
