"""Offline -> online on CartPole-v1: discrete CQL learns from a fixed dataset, then keeps training online with the
same learner, on a replay buffer that starts with the dataset.

    python examples/offline_to_online_cartpole.py            # 100 episodes, 3,000 offline updates, 10k env steps
    python examples/offline_to_online_cartpole.py --smoke    # a tiny budget (seconds)

1. The dataset: ``--episodes`` episodes of a pole-angle controller acting at random with probability
   ``--eps`` (an ``OfflineDataset``).
2. Offline: ``DiscreteCQLPolicy`` for ``--offline-iters`` updates (``pipeline.run.offline_recipe.train_offline``
   on an ``OfflineRLContext``), then an evaluation.
3. Online: the dataset's rows are pushed into a ``DequeBuffer``; DQN's online pipeline
   (``pipeline.run.recipes.use_dqn``: eps-greedy collector, buffer, ``OffPolicyLearner``, evaluator, on an
   ``OnlineRLContext``) continues with the same policy and learner for ``--online-steps`` env steps, with the
   conservative weight set to ``--online-alpha`` (0: plain double DQN). Then a last evaluation.
"""
from __future__ import annotations

import argparse
import sys
from typing import Dict, Optional, Sequence

import numpy as np

from pipeline.run import add_device_flags  # no torch

ENV_ID = 'CartPole-v1'


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--smoke', action='store_true', help='tiny budget: checks that everything runs (seconds)')
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--episodes', type=int, default=100)
    p.add_argument('--eps', type=float, default=0.5, help='random-action probability of the data-collecting controller')
    p.add_argument('--offline-iters', type=int, default=3000)
    p.add_argument('--online-steps', type=int, default=10_000)
    p.add_argument('--online-alpha', type=float, default=0.0, help='cql_alpha during the online phase')
    p.add_argument('--eval-episodes', type=int, default=10)
    p.add_argument('--threads', type=int, default=1)
    add_device_flags(p)
    return p


def controller_dataset(episodes: int, eps: float, seed: int) -> Dict[str, np.ndarray]:
    """Episodes of ``action = [pole angle + angular velocity > 0]``, random with probability ``eps``."""
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.smoke:
        args.episodes, args.offline_iters, args.online_steps, args.eval_episodes = 5, 30, 200, 2
    import torch

    from contexts import OnlineRLContext
    from middleware import evaluate_episodes, termination_checker
    from pipeline import task
    from pipeline.config import compile_config
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.offline import OfflineDataset
    from pipeline.offline.cql import DiscreteCQLPolicy
    from pipeline.run.offline_recipe import train_offline
    from pipeline.run.recipes import use_dqn

    torch.set_num_threads(args.threads)
    dataset = OfflineDataset(controller_dataset(args.episodes, args.eps, args.seed + 1), 'cartpole-controller')
    print(f'dataset: {len(dataset)} transitions, mean episode return {dataset.episode_returns().mean():.1f}')
    cfg = compile_config({
        'seed': args.seed,
        'env': {'env_id': ENV_ID, 'collector_env_num': 4, 'evaluator_env_num': 1,
                'n_evaluator_episode': args.eval_episodes, 'stop_value': None},
        'policy': {'discount_factor': 0.99, 'model': {'encoder_hidden_size_list': [128, 128], 'dueling': False},
                   'learn': {'batch_size': 128, 'learning_rate': 1e-3, 'cql_alpha': 1.0, 'update_per_collect': 4,
                             'target_update_type': 'soft', 'target_theta': 0.01, 'learning_starts': 0},
                   'collect': {'n_sample': 4},
                   'eval': {'evaluator': {'eval_freq': max(args.offline_iters // 3, 1)}},
                   'other': {'eps': {'type': 'linear', 'start': 0.1, 'end': 0.02, 'decay': max(args.online_steps, 1)},
                             'replay_buffer': {'replay_buffer_size': len(dataset) + args.online_steps}}}}, 'cql')
    policy = DiscreteCQLPolicy(cfg, obs_shape=4, action_shape=2, seed=args.seed, device=args.device)
    eval_env = EnvManager(ENV_ID, 1, seed=args.seed + 10_000)
    out = train_offline(cfg, policy, dataset, args.offline_iters, eval_env)
    print(f'offline: {out["train_iter"]} updates, mean return {out["last_eval_value"]:.1f}')

    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=args.seed)
    cols = dataset.columns
    for i in range(len(dataset)):  # the dataset seeds the online buffer, one item per transition, as collected
        buffer_.push({'obs': cols['obs'][i], 'action': cols['action'][i], 'reward': float(cols['reward'][i]),
                      'next_obs': cols['next_obs'][i], 'terminated': bool(cols['terminated'][i]),
                      'truncated': bool(cols['truncated'][i]), 'env_id': 0, 'nstep': 1}, {'env': 0})
    policy.learn_mode.cql_alpha = args.online_alpha
    collector_env = EnvManager(ENV_ID, cfg.env.collector_env_num, seed=args.seed)
    cfg.policy.eval.evaluator.eval_freq = 5000  # (MAX_EVAL_GAP, the most use_dqn allows); a last one below
    with task.start(ctx=OnlineRLContext()):
        use_dqn(cfg, policy, buffer_, collector_env, eval_env, min_collect_return=None)
        task.use(termination_checker(max_env_step=args.online_steps))
        task.run()
        ctx = task.context(OnlineRLContext)  # the context started above, renewed step by step
    rets, _ = evaluate_episodes(policy.eval_mode, eval_env, args.eval_episodes)
    collector_env.close()
    eval_env.close()
    print(f'online: {ctx.env_step} env steps, {ctx.train_iter} more updates, buffer {buffer_.count()} transitions, '
          f'mean return {rets.mean():.1f}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
