"""Learning benchmark for HER and RND: success with and without them, side by side (not run in CI).

    python benchmarks/bench_her_rnd.py                  # everything (CPU heavy: ~30 minutes)
    python benchmarks/bench_her_rnd.py --only bitflip   # or: point, deepsea
    python benchmarks/bench_her_rnd.py --bitflip-seeds 0 1 2 --deepsea-seeds 0 1 2 3 4

- bitflip: DQN + HER on 15 bits vs. DQN alone, same budget (40k env steps); eval success rate.
- point: SAC + HER vs. SAC alone on the 2-D point env (success radius 0.05, 15k env steps); eval
  success rate over 100 episodes.
- deepsea: DQN + RND vs. DQN on DeepSea 20 (EPISODES episodes); whether/when the treasure is found.
Each run is the example script's ``main`` in this process with one torch thread, run one after
another. Runs are reproducible per seed.

Measured (2 shared CPU cores, about 5 minutes for the default set):
- bitflip seed 0: DQN+HER 1.00, DQN 0.00.
- point seeds 0-2: SAC+HER 1.00/1.00/1.00, SAC 0.03/0.00/0.05 (equal gradient steps; SAC alone
  is still at 0.07 after 30k steps).
- deepsea seeds 0-4: DQN+RND finds the treasure at episode 686/885/627/-/711 (seed 3: at 1628),
  DQN never (0/5).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import statistics
import sys

import torch

EPISODES = 1000  # DeepSea budget per run (episodes)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from pipeline.run import add_device_flags, device_argv  # noqa: E402 - no torch


OUT = tempfile.mkdtemp(prefix="bench-her-rnd-")  # the examples' run folders


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_goal(name, flag, label_on, label_off, seeds, budget, extra=()):
    ex = load(name)
    rows = []
    for seed in seeds:
        common = ["--seed", str(seed), "--max-env-step", str(budget), "--quiet", "--stop-success", "2",
                  "--exp-name", os.path.join(OUT, name), *extra]
        on = ex.main(common)
        off = ex.main(common + [flag])
        rows.append((seed, on, off))
    print(f"\n{name}: eval success rate after {budget} env steps")
    print(f"{'seed':>4}  {label_on:>10}  {label_off:>12}  {'train iters on/off':>18}  {'time on/off (s)':>16}")
    for seed, on, off in rows:
        print(f"{seed:>4}  {on['success_rate']:>10.2f}  {off['success_rate']:>12.2f}  "
              f"{on['train_iter']:>9}/{off['train_iter']:<8}  {on['wall_time']:>7.1f}/{off['wall_time']:<7.1f}")
    m_on = statistics.mean(r[1]["success_rate"] for r in rows)
    m_off = statistics.mean(r[2]["success_rate"] for r in rows)
    print(f"mean  {m_on:>10.2f}  {m_off:>12.2f}")


def bench_deepsea(seeds, episodes, size, extra=()):
    ex = load("dqn_rnd")
    rows = []
    for seed in seeds:
        common = ["--seed", str(seed), "--max-episodes", str(episodes), "--size", str(size), "--quiet",
                  "--exp-name", os.path.join(OUT, "deepsea"), *extra]
        rows.append((seed, ex.main(common), ex.main(common + ["--no-rnd"])))
    print(f"\ndeepsea {size}: episode of the first treasure within {episodes} episodes (- = never)")
    print(f"{'seed':>4}  {'DQN+RND':>8}  {'DQN':>8}  {'time on/off (s)':>16}")
    for seed, on, off in rows:
        f = lambda r: str(r["found_at_episode"]) if r["found"] else "-"  # noqa: E731
        print(f"{seed:>4}  {f(on):>8}  {f(off):>8}  {on['wall_time']:>7.1f}/{off['wall_time']:<7.1f}")
    print(f"found {sum(r[1]['found'] for r in rows)}/{len(rows)} with RND, "
          f"{sum(r[2]['found'] for r in rows)}/{len(rows)} without")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["bitflip", "point", "deepsea"], nargs="*")
    p.add_argument("--bitflip-seeds", type=int, nargs="*", default=[0])
    p.add_argument("--point-seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--deepsea-seeds", type=int, nargs="*", default=[0, 1, 2])
    p.add_argument("--bitflip-steps", type=int, default=40_000)
    p.add_argument("--point-steps", type=int, default=15_000)
    p.add_argument("--point-radius", type=float, default=0.05)
    p.add_argument("--deepsea-size", type=int, default=20)
    p.add_argument("--deepsea-episodes", type=int, default=EPISODES)
    add_device_flags(p)
    args = p.parse_args()
    dev = device_argv(args)  # passed on to the examples
    torch.set_num_threads(1)
    only = set(args.only or ["bitflip", "point", "deepsea"])
    if "bitflip" in only:
        bench_goal("her_bitflip", "--no-her", "DQN+HER", "DQN", args.bitflip_seeds, args.bitflip_steps, extra=dev)
    if "point" in only:
        bench_goal("her_point", "--no-her", "SAC+HER", "SAC", args.point_seeds, args.point_steps,
                   extra=["--eval-episodes", "100", "--distance-threshold", str(args.point_radius), *dev])
    if "deepsea" in only:
        bench_deepsea(args.deepsea_seeds, args.deepsea_episodes, args.deepsea_size, extra=dev)


if __name__ == "__main__":
    main()
