"""Loading a large Minari dataset: rlpipe's reader (in memory, and streamed under a memory cap) against doing it by hand.

    python benchmarks/bench_offline_load.py                   # 1,000,000 Hopper-shaped transitions
    python benchmarks/bench_offline_load.py --rows 20000      # quick

The dataset is synthetic (random numbers in Hopper-v5's shapes: 11 observation and 3 action dims, episodes
of ``--episode-len`` steps, the last one of each truncated), written once with
``minari.create_dataset_from_buffers`` into a temporary ``MINARI_DATASETS_PATH``. Each way of loading then runs
in a fresh process that reports its wall time and its peak resident memory above the process's resident
memory after its imports (resident memory sampled every 2 ms by a thread):

- ``by hand``: ``minari.load_dataset``, then ``obs[:-1]`` / ``obs[1:]``, actions, rewards, terminations and
  truncations of every episode concatenated with numpy (what a user writes without a reader);
- ``from_minari``: :func:`pipeline.offline.from_minari` (the same arrays, checked, in training dtypes);
- ``from_minari, cap``: ``from_minari(..., memory_cap_bytes=--cap-mb MB)`` (a ``ChunkedDataset``: its check
  reads every chunk once) followed by one epoch of 256-row minibatches.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Optional, Sequence

DATASET_ID = 'synthetic/hopper-shaped-v0'

CHILD = r'''
import json, os, sys, threading, time
import numpy as np
import minari
from pipeline.offline import from_minari
page = os.sysconf('SC_PAGE_SIZE')
def rss():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * page
peak = [rss()]
base = peak[0]
done = threading.Event()
def poll():
    while not done.is_set():
        peak[0] = max(peak[0], rss())
        time.sleep(0.002)
threading.Thread(target=poll, daemon=True).start()
mode, cap = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
if mode == 'hand':
    ds = minari.load_dataset(sys.argv[3])
    eps = list(ds.iterate_episodes())
    cols = {'obs': np.concatenate([e.observations[:-1] for e in eps]),
            'next_obs': np.concatenate([e.observations[1:] for e in eps]),
            'action': np.concatenate([e.actions for e in eps]), 'reward': np.concatenate([e.rewards for e in eps]),
            'terminated': np.concatenate([e.terminations for e in eps]),
            'truncated': np.concatenate([e.truncations for e in eps])}
    del eps
    rows = len(cols['reward'])
elif mode == 'rlpipe':
    rows = len(from_minari(sys.argv[3]))
else:
    d = from_minari(sys.argv[3], memory_cap_bytes=cap)
    rows = sum(len(mb['reward']) for mb in d.iter_minibatches(256, np.random.default_rng(0)))
wall = time.perf_counter() - t0
done.set()
peak[0] = max(peak[0], rss())
print(json.dumps({'mode': mode, 'rows': rows, 'seconds': wall, 'peak_mb_above_imports': (peak[0] - base) / 2 ** 20}))
'''


def make_dataset(rows: int, episode_len: int) -> None:
    import gymnasium as gym
    import numpy as np
    import minari
    from minari.data_collector import EpisodeBuffer

    obs_space = gym.spaces.Box(-np.inf, np.inf, (11,), np.float64)
    act_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    rng = np.random.default_rng(0)
    buffers = []
    for i in range(rows // episode_len):
        t = episode_len
        trunc = np.zeros(t, bool)
        trunc[-1] = True
        buffers.append(EpisodeBuffer(id=i, observations=rng.normal(size=(t + 1, 11)),
                                     actions=rng.uniform(-1, 1, (t, 3)).astype(np.float32),
                                     rewards=rng.normal(size=t), terminations=np.zeros(t, bool), truncations=trunc,
                                     infos={}))
    minari.create_dataset_from_buffers(DATASET_ID, buffers, observation_space=obs_space, action_space=act_space,
                                       algorithm_name='synthetic')


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rows', type=int, default=1_000_000)
    p.add_argument('--episode-len', type=int, default=1000)
    p.add_argument('--cap-mb', type=int, default=64)
    args = p.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, MINARI_DATASETS_PATH=tmp, PYTHONPATH=os.pathsep.join([root, os.environ.get('PYTHONPATH', '')]))
        os.environ['MINARI_DATASETS_PATH'] = tmp
        t0 = time.perf_counter()
        make_dataset(args.rows, args.episode_len)
        print(f'dataset: {args.rows} rows written in {time.perf_counter() - t0:.1f} s')
        for mode in ('hand', 'rlpipe', 'cap'):
            out = subprocess.run([sys.executable, '-c', CHILD, mode, str(args.cap_mb << 20), DATASET_ID],
                                 capture_output=True, text=True, env=env, check=False)
            if out.returncode != 0:
                print(out.stderr[-2000:])
                return 1
            r = json.loads(out.stdout.strip().splitlines()[-1])
            name = {'hand': 'by hand', 'rlpipe': 'from_minari', 'cap': f'from_minari, cap {args.cap_mb} MB + 1 epoch'}[mode]
            print(f'{name:34s} {r["rows"]} rows in {r["seconds"]:6.2f} s, peak memory {r["peak_mb_above_imports"]:7.1f} MB '
                  f'above the imports')
    return 0


if __name__ == '__main__':
    sys.exit(main())
