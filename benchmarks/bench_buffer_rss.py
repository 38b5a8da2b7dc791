"""Resident memory of a replay buffer holding 100k CartPole transitions.

Pushes 100,000 CartPole-shaped transitions (obs and next_obs float32[4], action, reward, flags, env id)
into a ``DequeBuffer(100_000)``, sampling a batch of 64 every 1,000 pushes as training does, and prints
how much the process's resident set grew.

    python benchmarks/bench_buffer_rss.py [--repo PATH]

``--repo`` imports ``pipeline`` from another checkout (e.g. an older commit in a git worktree, built
with ``python setup.py build_ext --inplace``) to compare layouts. RSS does not depend on machine load.
"""
from __future__ import annotations

import argparse
import gc
import os
import sys


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--repo', default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                    help='the checkout whose pipeline package is measured (default: this one)')
    ap.add_argument('--items', type=int, default=100_000)
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.abspath(args.repo))
    import numpy as np
    import psutil

    from pipeline.data import DequeBuffer

    proc = psutil.Process()
    rng = np.random.default_rng(0)

    def transition(i: int) -> dict:
        return {'obs': rng.random(4, dtype=np.float32), 'action': i % 2, 'reward': 1.0,
                'next_obs': rng.random(4, dtype=np.float32), 'terminated': False, 'truncated': False,
                'env_id': i % 8}

    buf = DequeBuffer(args.items, seed=0)
    for i in range(64):  # the columns exist before the measured span
        buf.push(transition(i))
    buf.sample_batch(32)
    buf.clear()
    gc.collect()
    before = proc.memory_info().rss
    for i in range(args.items):
        buf.push(transition(i))
        if i % 1000 == 999:
            buf.sample_batch(64)
    buf.sample_batch(64)
    gc.collect()
    grew = proc.memory_info().rss - before
    print(f'pipeline from {os.path.abspath(args.repo)}: {args.items:,} CartPole transitions, RSS grew by '
          f'{grew / 1e6:.1f} MB ({grew / args.items:.0f} bytes per transition)')


if __name__ == '__main__':
    main()
