"""Learning benchmark for HER and RND: success with and without them, side by side (not run in CI).

    python benchmarks/bench_her_rnd.py                  # everything (CPU heavy: tens of minutes)
    python benchmarks/bench_her_rnd.py --only bitflip   # or: point, deepsea
    python benchmarks/bench_her_rnd.py --seeds 0 1 2 --deepsea-seeds 0 1 2 3 4

- bitflip: DQN + HER on 15 bits vs. DQN alone, same budget (40k env steps); eval success rate.
- point: SAC + HER vs. SAC alone on the 2-D point env (30k env steps); eval success rate.
- deepsea: DQN + RND vs. DQN on DeepSea 20 (2000 episodes); whether/when the treasure is found.
Each run is the example script's ``main`` in this process, run one after another.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_goal(name, flag, label_on, label_off, seeds, budget):
    ex = load(name)
    rows = []
    for seed in seeds:
        common = ["--seed", str(seed), "--max-env-step", str(budget), "--quiet", "--stop-success", "2"]
        on = ex.main(common)
        off = ex.main(common + [flag])
        rows.append((seed, on, off))
    print(f"\n{name}: eval success rate after {budget} env steps")
    print(f"{'seed':>4}  {label_on:>10}  {label_off:>12}  {'time on/off (s)':>16}")
    for seed, on, off in rows:
        print(f"{seed:>4}  {on['success_rate']:>10.2f}  {off['success_rate']:>12.2f}  "
              f"{on['wall_time']:>7.1f}/{off['wall_time']:<7.1f}")
    m_on = statistics.mean(r[1]["success_rate"] for r in rows)
    m_off = statistics.mean(r[2]["success_rate"] for r in rows)
    print(f"mean  {m_on:>10.2f}  {m_off:>12.2f}")


def bench_deepsea(seeds, episodes):
    ex = load("dqn_rnd")
    rows = []
    for seed in seeds:
        common = ["--seed", str(seed), "--max-episodes", str(episodes), "--quiet"]
        rows.append((seed, ex.main(common), ex.main(common + ["--no-rnd"])))
    print(f"\ndeepsea 20: episode of the first treasure within {episodes} episodes (- = never)")
    print(f"{'seed':>4}  {'DQN+RND':>8}  {'DQN':>8}")
    for seed, on, off in rows:
        f = lambda r: str(r["found_at_episode"]) if r["found"] else "-"  # noqa: E731
        print(f"{seed:>4}  {f(on):>8}  {f(off):>8}")
    print(f"found {sum(r[1]['found'] for r in rows)}/{len(rows)} with RND, "
          f"{sum(r[2]['found'] for r in rows)}/{len(rows)} without")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["bitflip", "point", "deepsea"], nargs="*")
    p.add_argument("--seeds", type=int, nargs="*", default=[0])
    p.add_argument("--deepsea-seeds", type=int, nargs="*", default=[0, 1, 2, 3, 4])
    p.add_argument("--bitflip-steps", type=int, default=40_000)
    p.add_argument("--point-steps", type=int, default=30_000)
    p.add_argument("--deepsea-episodes", type=int, default=2000)
    args = p.parse_args()
    only = set(args.only or ["bitflip", "point", "deepsea"])
    if "bitflip" in only:
        bench_goal("her_bitflip", "--no-her", "DQN+HER", "DQN", args.seeds, args.bitflip_steps)
    if "point" in only:
        bench_goal("her_point", "--no-her", "SAC+HER", "SAC", args.seeds, args.point_steps)
    if "deepsea" in only:
        bench_deepsea(args.deepsea_seeds, args.deepsea_episodes)


if __name__ == "__main__":
    main()
