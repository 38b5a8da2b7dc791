"""rlpipe's offline pipeline next to d3rlpy: discrete CQL and BC on one CartPole-v1 dataset.

    python benchmarks/bench_offline.py                       # 5,000 updates, seeds 0-2, CQL and BC
    python benchmarks/bench_offline.py --smoke               # a tiny budget (checks that it runs)
    python benchmarks/bench_offline.py --dataset cartpole_medium.npz   # e.g. from examples/offline_cartpole.py

Both frameworks get the same dataset (by default: 100 episodes of a pole-angle controller that acts at
random with probability ``--eps``, a "medium" policy), the same networks (an MLP 4 -> 256 -> 256 -> 2, ReLU),
batch size, learning rate, discount and Adam, one torch thread, and the same number of updates:

- discrete CQL: double-DQN targets with a Huber TD loss, a hard target update every
  ``--target-update`` updates, ``alpha * (logsumexp Q - Q(s, a_data))`` with alpha 1 (d3rlpy's
  ``DiscreteCQLConfig``; rlpipe's ``compile_config(..., 'cql')`` with ``loss='huber'``, no dueling head);
- BC: cross-entropy on the dataset's actions (d3rlpy's ``DiscreteBCConfig`` with ``beta=0``, no logit penalty).

Timed: rlpipe's offline pipeline (``offline_data_fetcher`` -> ``trainer`` on an ``OfflineRLContext``, one
epoch-shuffled minibatch per update) against d3rlpy's ``fit`` (which samples its minibatches with
replacement), the network build excluded for both; updates per wall-clock second and per CPU second of
the process (the latter moves less on a shared machine). Then both greedy policies play ``--eval-episodes``
CartPole-v1 episodes with the same env seeds. Prints one line per (algorithm, framework, seed) and the means.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, Union, cast

import numpy as np

ENV_ID = 'CartPole-v1'


def heuristic_dataset(episodes: int, eps: float, seed: int) -> Dict[str, np.ndarray]:
    """``episodes`` CartPole-v1 episodes of ``action = [angle + angular velocity > 0]``, random with probability ``eps``."""
    import gymnasium as gym

    env = gym.make(ENV_ID)
    rng = np.random.default_rng(seed)
    rows: Dict[str, list] = {k: [] for k in ('obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated')}
    for ep in range(episodes):
        obs, _ = env.reset(seed=seed + ep)
        done = False
        while not done:
            a = int(rng.integers(2)) if rng.random() < eps else int(obs[2] + obs[3] > 0)
            nxt, r, term, trunc, _ = env.step(a)
            for k, v in zip(rows, (obs, a, r, nxt, term, trunc)):
                rows[k].append(v)
            obs, done = nxt, term or trunc
    env.close()
    return {k: np.asarray(v) for k, v in rows.items()}


def evaluate(act: Any, episodes: int, seed: int = 10_000) -> float:
    """Mean return of the greedy ``act(obs [1, 4]) -> [1]`` over ``episodes`` CartPole-v1 episodes (seeds ``seed + i``)."""
    import gymnasium as gym

    env = gym.make(ENV_ID)
    total = 0.0
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        done = False
        while not done:
            obs, r, term, trunc, _ = env.step(int(act(obs[None].astype(np.float32))[0]))
            total += float(r)
            done = term or trunc
    env.close()
    return total / episodes


def run_rlpipe(algo: str, ds: Any, args: Any, seed: int) -> Dict[str, float]:
    from contexts import OfflineRLContext
    from middleware import offline_data_fetcher, termination_checker, trainer
    from pipeline import task
    from pipeline.config import compile_config
    from pipeline.offline.bc import BCPolicy
    from pipeline.offline.cql import DiscreteCQLPolicy

    policy: Union[DiscreteCQLPolicy, BCPolicy]
    if algo == 'cql':
        cfg = compile_config({'seed': seed, 'policy': {
            'discount_factor': args.gamma,
            'model': {'encoder_hidden_size_list': args.hidden, 'dueling': False, 'head_layer_num': 0},
            'learn': {'batch_size': args.batch_size, 'learning_rate': args.lr, 'loss': 'huber', 'double_dqn': True,
                      'target_update_type': 'hard', 'target_update_freq': args.target_update, 'cql_alpha': 1.0,
                      'truncation_as_terminal': False}}}, 'cql')
        policy = DiscreteCQLPolicy(cfg, obs_shape=4, action_shape=2, seed=seed, device=args.device)
    else:
        cfg = compile_config({'seed': seed, 'policy': {
            'model': {'hidden_size_list': args.hidden},
            'learn': {'batch_size': args.batch_size, 'learning_rate': args.lr}}}, 'bc')
        policy = BCPolicy(cfg, obs_shape=4, action_shape=2, seed=seed, device=args.device)
    learner = policy.learn_mode  # built before the clock starts, as d3rlpy's build_with_dataset
    with task.start(ctx=OfflineRLContext()):
        task.use(offline_data_fetcher(cfg, ds))
        task.use(trainer(cfg, learner, log_freq=0))
        task.use(termination_checker(max_train_iter=args.updates))
        t0, c0 = time.perf_counter(), time.process_time()
        task.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        assert cast(OfflineRLContext, task.ctx).train_iter == args.updates
    return {'updates_per_s': args.updates / wall, 'updates_per_cpu_s': args.updates / cpu,
            'return': evaluate(policy.eval_mode, args.eval_episodes)}


def _quiet_d3rlpy() -> None:
    """d3rlpy logs every fit through structlog at INFO: keep errors only."""
    import logging

    import structlog
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))


def _d3rlpy_device(device: Optional[str]) -> str:
    """d3rlpy's spelling (``'cpu:0'``, ``'cuda:N'``) of the device rlpipe runs on for ``--device`` (default auto,
    as rlpipe's), so that both train on the same device."""
    from pipeline.device import resolve_device

    dev = resolve_device(device or 'auto')
    return f'{dev.type}:{dev.index or 0}'


def run_d3rlpy(algo: str, columns: Dict[str, np.ndarray], args: Any, seed: int) -> Dict[str, float]:
    import d3rlpy
    from d3rlpy.algos import DiscreteBCConfig, DiscreteCQLConfig
    from d3rlpy.dataset import MDPDataset
    from d3rlpy.logging import NoopAdapterFactory
    from d3rlpy.models.encoders import VectorEncoderFactory

    _quiet_d3rlpy()
    d3rlpy.seed(seed)
    dataset = MDPDataset(observations=columns['obs'].astype(np.float32), actions=columns['action'].astype(np.int64),
                         rewards=columns['reward'].astype(np.float32),
                         terminals=columns['terminated'].astype(np.float32),
                         timeouts=columns['truncated'].astype(np.float32))
    enc = VectorEncoderFactory(hidden_units=list(args.hidden))
    if algo == 'cql':
        algo_ = DiscreteCQLConfig(batch_size=args.batch_size, gamma=args.gamma, learning_rate=args.lr,
                                  encoder_factory=enc, target_update_interval=args.target_update,
                                  alpha=1.0).create(device=_d3rlpy_device(args.device))
    else:
        algo_ = DiscreteBCConfig(batch_size=args.batch_size, learning_rate=args.lr, encoder_factory=enc,
                                 beta=0.0).create(device=_d3rlpy_device(args.device))
    algo_.build_with_dataset(dataset)
    t0, c0 = time.perf_counter(), time.process_time()
    algo_.fit(dataset, n_steps=args.updates, n_steps_per_epoch=args.updates, show_progress=False,
              logger_adapter=NoopAdapterFactory(), save_interval=10 ** 9)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {'updates_per_s': args.updates / wall, 'updates_per_cpu_s': args.updates / cpu,
            'return': evaluate(algo_.predict, args.eval_episodes)}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--smoke', action='store_true')
    p.add_argument('--dataset', help='an .npz dataset (default: the heuristic dataset, made here)')
    p.add_argument('--episodes', type=int, default=100)
    p.add_argument('--eps', type=float, default=0.5, help='random-action probability of the heuristic')
    p.add_argument('--algos', nargs='+', default=['cql', 'bc'], choices=['cql', 'bc'])
    p.add_argument('--frameworks', nargs='+', default=['rlpipe', 'd3rlpy'], choices=['rlpipe', 'd3rlpy'])
    p.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    p.add_argument('--updates', type=int, default=5000)
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--hidden', type=int, nargs='+', default=[256, 256])
    p.add_argument('--lr', type=float, default=3e-4)
    p.add_argument('--gamma', type=float, default=0.99)
    p.add_argument('--target-update', type=int, default=1000)
    p.add_argument('--eval-episodes', type=int, default=10)
    p.add_argument('--json', help='also write the results here')
    from pipeline.run import add_device_flags  # no torch

    add_device_flags(p)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.updates, args.episodes, args.eval_episodes, args.seeds = 50, 5, 1, args.seeds[:1]
    if 'd3rlpy' in args.frameworks and importlib.util.find_spec('d3rlpy') is None:
        print('d3rlpy is not installed (pip install torch==2.13.0 d3rlpy): its rows are left out')
        args.frameworks = [fw for fw in args.frameworks if fw != 'd3rlpy']
    import torch

    from pipeline.offline import ChunkedDataset, OfflineDataset, load_dataset

    torch.set_num_threads(1)
    loaded = load_dataset(args.dataset) if args.dataset else OfflineDataset(heuristic_dataset(args.episodes, args.eps, 0))
    ds = loaded.to_memory() if isinstance(loaded, ChunkedDataset) else loaded  # d3rlpy is given arrays in memory
    rets = ds.episode_returns()
    print(f'dataset: {len(ds)} transitions, {len(rets)} episodes, mean return {rets.mean():.1f}; '
          f'{args.updates} updates of batch {args.batch_size}, MLP {args.hidden}, 1 torch thread; '
          f'{platform.processor() or platform.machine()}, python {platform.python_version()}, torch {torch.__version__}')
    results: List[Dict[str, Any]] = []
    for algo in args.algos:
        for fw in args.frameworks:
            for seed in args.seeds:
                r = run_rlpipe(algo, ds, args, seed) if fw == 'rlpipe' else run_d3rlpy(algo, ds.columns, args, seed)
                r.update(algo=algo, framework=fw, seed=seed)
                results.append(r)
                print(f'{algo:4s} {fw:7s} seed {seed}: {r["updates_per_s"]:8.1f} updates/s '
                      f'({r["updates_per_cpu_s"]:.1f} per CPU s), final return {r["return"]:6.1f}', flush=True)
    for algo in args.algos:
        means = {}
        for fw in args.frameworks:
            rs = [r for r in results if r['algo'] == algo and r['framework'] == fw]
            means[fw] = (np.mean([r['updates_per_s'] for r in rs]), np.mean([r['return'] for r in rs]),
                         np.mean([r['updates_per_cpu_s'] for r in rs]), np.std([r['return'] for r in rs]))
            print(f'{algo:4s} {fw:7s} mean over {len(rs)} seeds: {means[fw][0]:8.1f} updates/s '
                  f'({means[fw][2]:.1f} per CPU s), final return {means[fw][1]:6.1f} (std over seeds {means[fw][3]:.1f})')
        if len(means) == 2:
            print(f'{algo:4s} rlpipe / d3rlpy updates/s: {means["rlpipe"][0] / means["d3rlpy"][0]:.2f}x wall, '
                  f'{means["rlpipe"][2] / means["d3rlpy"][2]:.2f}x CPU')
    if args.json:
        with open(args.json, 'w') as f:
            json.dump({'args': vars(args), 'results': results}, f, indent=1)
    return 0


if __name__ == '__main__':
    sys.exit(main())
