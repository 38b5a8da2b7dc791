"""Offline RL on CartPole-v1: a dataset of a medium policy's episodes, then discrete CQL and behaviour cloning.

    python examples/offline_cartpole.py                  # DQN to a medium policy, 100 episodes, CQL + BC
    python examples/offline_cartpole.py --smoke          # a tiny budget (seconds): checks that it all runs
    python examples/offline_cartpole.py --save-dataset cartpole_medium.npz
    python examples/offline_cartpole.py --dataset cartpole_medium.npz   # train on a saved dataset

1. A medium policy: ``pipeline.run.agents.DQN`` trained until an evaluation's mean return reaches
   ``--medium-return`` (or ``--dqn-steps`` env steps pass), then acting at random with probability
   ``--eps`` (the DQN often evaluates far above ``--medium-return`` at its first evaluation: the random
   actions are what make the policy medium; the example prints the dataset's mean return).
2. The dataset: ``--episodes`` episodes of that policy, one row per step with
   ``terminated``/``truncated`` and the exact next observation (a dict of arrays ->
   ``pipeline.offline.OfflineDataset``). ``--dataset`` loads one instead (``.npz``, a chunk directory or a
   ``DequeBuffer.save_data`` file).
3. Discrete CQL and BC, each ``--train-iters`` minibatch updates over the dataset in epochs
   (``middleware.offline.offline_data_fetcher`` -> ``trainer`` -> ``interaction_evaluator`` on an
   ``OfflineRLContext``), then the mean return of their greedy policies over ``--eval-episodes`` episodes,
   printed next to the dataset's mean episode return.
"""
from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, Optional, Sequence

from pipeline.run import add_device_flags  # no torch

ENV_ID = 'CartPole-v1'


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--smoke', action='store_true', help='tiny budget: checks that everything runs (seconds)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--medium-return', type=float, default=200.0, help='stop training the DQN once it evaluates this')
    p.add_argument('--dqn-steps', type=int, default=40_000, help='at most this many DQN env steps')
    p.add_argument('--episodes', type=int, default=100, help='episodes in the dataset')
    p.add_argument('--eps', type=float, default=0.5, help='random-action probability of the medium policy')
    p.add_argument('--dataset', help='train on this dataset (.npz, chunk directory, replay buffer file) instead')
    p.add_argument('--save-dataset', help='write the recorded dataset to this .npz file')
    p.add_argument('--train-iters', type=int, default=5000, help='minibatch updates per algorithm')
    p.add_argument('--batch-size', type=int, default=256)
    p.add_argument('--cql-alpha', type=float, default=1.0)
    p.add_argument('--eval-episodes', type=int, default=10)
    p.add_argument('--threads', type=int, default=1, help='torch threads')
    add_device_flags(p)
    return p


def record_episodes(act: Any, n_episodes: int, seed: int, eps: float) -> Dict[str, Any]:
    """``n_episodes`` episodes of ``act(obs [1, 4]) -> [1]`` on CartPole-v1, eps-greedy, as a dict of arrays."""
    import gymnasium as gym
    import numpy as np

    env = gym.make(ENV_ID)
    rng = np.random.default_rng(seed)
    rows: Dict[str, list] = {k: [] for k in ('obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated')}
    for ep in range(n_episodes):
        obs, _ = env.reset(seed=seed + ep)
        while True:
            a = int(rng.integers(2)) if rng.random() < eps else int(act(obs[None])[0])
            nxt, r, term, trunc, _ = env.step(a)
            for k, v in (('obs', obs), ('action', a), ('reward', r), ('next_obs', nxt), ('terminated', term),
                         ('truncated', trunc)):
                rows[k].append(v)
            obs = nxt
            if term or trunc:
                break
    env.close()
    return {k: np.asarray(v) for k, v in rows.items()}


def medium_policy(args: Any) -> Any:
    """A DQN agent trained to about ``--medium-return`` (its greedy ``predict``)."""
    from pipeline.run.agents import DQN

    agent = DQN(ENV_ID, seed=args.seed, config={'env': {'n_evaluator_episode': 5}}, device=args.device)
    res = agent.train(max_env_step=args.dqn_steps, stop_value=args.medium_return, threads=args.threads)
    print(f'medium policy: DQN after {res["env_step"]} env steps, last evaluation {res["last_eval"]:.1f}')
    return agent.policy.eval_mode


def offline_config(algo: str, args: Any) -> Any:
    from pipeline.config import compile_config

    learn: Dict[str, Any] = {'batch_size': args.batch_size}
    model: Dict[str, Any] = {}
    if algo == 'cql':
        learn.update(cql_alpha=args.cql_alpha, learning_rate=1e-3, target_update_type='soft', target_theta=0.005)
        model.update(encoder_hidden_size_list=[128, 128], dueling=False)
    else:
        model.update(hidden_size_list=[128, 128])
    user = {'seed': args.seed, 'env': {'env_id': ENV_ID, 'evaluator_env_num': 1,
                                       'n_evaluator_episode': args.eval_episodes},
            'policy': {'learn': learn, 'model': model,
                       'eval': {'evaluator': {'eval_freq': max(args.train_iters // 5, 1)}}}}
    if algo == 'cql':
        user['policy']['discount_factor'] = 0.99
    return compile_config(user, algo)


def train_one(algo: str, dataset: Any, args: Any) -> Dict[str, Any]:
    """Train ``algo`` ('cql' or 'bc') on ``dataset``; the result of :func:`pipeline.run.offline_recipe.train_offline`."""
    from pipeline.envs import EnvManager
    from pipeline.offline.bc import BCPolicy
    from pipeline.offline.cql import DiscreteCQLPolicy
    from pipeline.run.offline_recipe import train_offline

    cfg = offline_config(algo, args)
    cls = DiscreteCQLPolicy if algo == 'cql' else BCPolicy
    policy = cls(cfg, obs_shape=4, action_shape=2, seed=args.seed, device=args.device)
    env = EnvManager(ENV_ID, 1, seed=args.seed + 10_000)
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
        args.dqn_steps, args.episodes, args.train_iters, args.eval_episodes = 600, 4, 40, 2
        args.batch_size = min(args.batch_size, 64)
    import numpy as np
    import torch

    from pipeline.offline import DatasetError, OfflineDataset, load_dataset

    torch.set_num_threads(args.threads)
    try:
        if args.dataset:
            dataset = load_dataset(args.dataset)
        else:
            columns = record_episodes(medium_policy(args), args.episodes, args.seed + 1, args.eps)
            dataset = OfflineDataset(columns, 'CartPole-v1 medium')
            if args.save_dataset:
                dataset.save(args.save_dataset)
    except DatasetError as e:
        print(f'error: {e}', file=sys.stderr)
        return 2
    rets = dataset.episode_returns() if hasattr(dataset, 'episode_returns') else np.array([np.nan])
    print(f'dataset: {len(dataset)} transitions, {len(rets)} episodes, mean episode return {rets.mean():.1f}')
    for algo in ('cql', 'bc'):
        out = train_one(algo, dataset, args)
        r = out['eval_returns']
        print(f'{algo.upper():4s} {out["train_iter"]} updates ({out["train_epoch"]} epochs, {out["seconds"]:.1f} s): '
              f'mean return {r.mean():.1f} +- {r.std():.1f} over {len(r)} episodes')
    return 0


if __name__ == '__main__':
    sys.exit(main())
