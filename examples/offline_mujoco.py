"""Offline RL on MuJoCo (Hopper-v5 by default): a "medium-replay" dataset from a SAC run's replay buffer, then IQL
and continuous CQL. Needs the mujoco extra (``pip install -e '.[mujoco]'``).

    python examples/offline_mujoco.py                     # SAC 50k env steps -> buffer file -> IQL and CQL
    python examples/offline_mujoco.py --smoke             # a tiny budget (seconds): checks that it all runs
    python examples/offline_mujoco.py --buffer run.pt     # train on a saved replay buffer instead

1. SAC (``pipeline.run.recipes.use_sac`` with the MuJoCo settings) runs ``--sac-steps`` env steps; its replay
   buffer -- every transition of the run, from random actions to the policy it reached -- is saved with
   ``DequeBuffer.save_data`` (``--buffer`` names the file; an existing file is used as it is).
2. ``pipeline.offline.from_buffer_file`` reads it back (transitions regrouped per env, the unfinished last
   episode left out) into an ``OfflineDataset``.
3. IQL and continuous CQL, each ``--train-iters`` minibatch updates (the offline pipeline:
   ``offline_data_fetcher`` -> ``trainer`` -> ``interaction_evaluator`` on an ``OfflineRLContext``), then the
   mean return of their deterministic policies over ``--eval-episodes`` episodes, next to the dataset's.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, Optional, Sequence

from pipeline.run import add_device_flags  # no torch


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--smoke', action='store_true', help='tiny budget: checks that everything runs (seconds)')
    p.add_argument('--env', default='Hopper-v5')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--sac-steps', type=int, default=50_000, help='env steps of the SAC run that fills the buffer')
    p.add_argument('--buffer', default='offline_mujoco_buffer.pt', help='the replay buffer file (made when missing)')
    p.add_argument('--algos', nargs='+', default=['iql', 'cql_continuous'], choices=['iql', 'cql_continuous'])
    p.add_argument('--train-iters', type=int, default=20_000, help='minibatch updates per algorithm')
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--eval-episodes', type=int, default=5)
    p.add_argument('--threads', type=int, default=1, help='torch threads')
    add_device_flags(p)
    return p


def sac_buffer(args: Any) -> str:
    """Run SAC for ``--sac-steps`` env steps and save its replay buffer to ``--buffer``; returns the path."""
    from contexts import OnlineRLContext
    from middleware import termination_checker
    from pipeline import task
    from pipeline.config import compile_config
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.envs.mujoco import MujocoEnvFn
    from pipeline.policy.common import vector_size
    from pipeline.policy.sac import SACPolicy
    from pipeline.run.recipes import sac_policy_settings, use_sac

    policy_cfg = sac_policy_settings(1)
    warmup = min(10_000, max(args.sac_steps // 5, 100))
    policy_cfg['learn']['learning_starts'] = warmup
    policy_cfg['collect']['random_collect_size'] = warmup
    policy_cfg['eval']['evaluator']['eval_freq'] = 10 ** 9  # no evaluation during the run
    cfg = compile_config({'seed': args.seed, 'env': {'env_id': args.env, 'evaluator_env_num': 1,
                                                      'n_evaluator_episode': 1}, 'policy': policy_cfg}, 'sac')
    collector_env = EnvManager(MujocoEnvFn(args.env), 1, seed=args.seed)
    evaluator_env = EnvManager(MujocoEnvFn(args.env), 1, seed=args.seed + 10_000)
    policy = SACPolicy(cfg, obs_shape=vector_size(collector_env.observation_space, 'observation', 'SAC'),
                       action_shape=vector_size(collector_env.action_space, 'action', 'SAC'), seed=args.seed,
                       device=args.device)
    buffer_ = DequeBuffer(args.sac_steps + 10, seed=args.seed)
    t0 = time.perf_counter()
    with task.start(ctx=OnlineRLContext()):
        use_sac(cfg, policy, buffer_, collector_env, evaluator_env)
        task.use(termination_checker(max_env_step=args.sac_steps))
        task.run()
    collector_env.close()
    evaluator_env.close()
    buffer_.save_data(args.buffer)
    print(f'SAC: {buffer_.count()} transitions in {time.perf_counter() - t0:.0f} s, saved to {args.buffer}')
    return args.buffer


def train_one(algo: str, dataset: Any, obs_dim: int, act_dim: int, args: Any) -> Dict[str, Any]:
    from pipeline.config import compile_config
    from pipeline.envs import EnvManager
    from pipeline.envs.mujoco import MujocoEnvFn
    from pipeline.offline.cql_continuous import ContinuousCQLPolicy
    from pipeline.offline.iql import IQLPolicy
    from pipeline.run.offline_recipe import train_offline

    cfg = compile_config({'seed': args.seed, 'env': {'env_id': args.env, 'evaluator_env_num': 1,
                                                      'n_evaluator_episode': args.eval_episodes},
                          'policy': {'learn': {'batch_size': args.batch_size},
                                     'eval': {'evaluator': {'eval_freq': max(args.train_iters // 4, 1)}}}}, algo)
    cls = IQLPolicy if algo == 'iql' else ContinuousCQLPolicy
    policy = cls(cfg, obs_shape=obs_dim, action_shape=act_dim, seed=args.seed, device=args.device)
    env = EnvManager(MujocoEnvFn(args.env), 1, seed=args.seed + 20_000)
    try:
        t0 = time.perf_counter()
        out: Dict[str, Any] = dict(train_offline(cfg, policy, dataset, args.train_iters, env))
        out['seconds'] = time.perf_counter() - t0
    finally:
        env.close()
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.sac_steps, args.train_iters, args.eval_episodes = 400, 30, 1
        args.batch_size = min(args.batch_size, 64)
    import torch

    from pipeline.offline import DatasetError, from_buffer_file

    torch.set_num_threads(args.threads)
    path = args.buffer if os.path.exists(args.buffer) and not args.smoke else sac_buffer(args)
    try:
        dataset = from_buffer_file(path, unfinished='drop')
    except DatasetError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    rets = dataset.episode_returns()
    print(f'dataset: {len(dataset)} transitions, {len(rets)} episodes, mean episode return {rets.mean():.1f} '
          f'(max {rets.max():.1f})')
    obs_dim, act_dim = dataset['obs'].shape[1], dataset['action'].shape[1]
    for algo in args.algos:
        out = train_one(algo, dataset, obs_dim, act_dim, args)
        r = out['eval_returns']
        print(f'{algo:14s} {out["train_iter"]} updates ({out["train_epoch"]} epochs, {out["seconds"]:.0f} s): '
              f'mean return {r.mean():.1f} +- {r.std():.1f} over {len(r)} episodes')
    return 0


if __name__ == '__main__':
    sys.exit(main())
