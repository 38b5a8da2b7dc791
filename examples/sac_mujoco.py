"""SAC on a gymnasium MuJoCo task (HalfCheetah-v5 by default).

    python examples/sac_mujoco.py                                  # HalfCheetah-v5, 1M env steps
    python examples/sac_mujoco.py --env Hopper-v5 --max-env-step 1_000_000
    python examples/sac_mujoco.py --backend subprocess --env-num 4 # envs in worker processes

Settings (the common SAC ones for MuJoCo): 256x256 actor and twin critics, Adam 3e-4, batch 256,
discount 0.99, soft target update 0.005, learned temperature, 1M replay, 10k uniform-random steps
first, one update per env step (``update_per_collect`` = ``n_sample`` = ``--env-num``). Actions
are rescaled to [-1, 1] (:mod:`pipeline.envs.mujoco`); a 1000-step time limit is a truncation
(bootstrapped), a fall is a termination. Evaluation: the deterministic policy over 5 episodes.
Needs the ``mujoco`` extra: ``pip install 'rlpipe[mujoco]'``.
"""
from __future__ import annotations

import argparse
import logging
import time
from typing import Any, Dict, List, Optional

import torch  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from middleware import (CkptSaver, OffPolicyLearner, StepCollector, data_pusher, interaction_evaluator,  # noqa: E402
                        online_logger, termination_checker)
from pipeline import task  # noqa: E402
from pipeline.config import merge_config  # noqa: E402
from pipeline.data import DequeBuffer  # noqa: E402
from pipeline.envs import EnvManager  # noqa: E402
from pipeline.envs.mujoco import MujocoEnvFn  # noqa: E402
from pipeline.policy.sac import SACPolicy, sac_default_config  # noqa: E402


def make_config(args: argparse.Namespace) -> Any:
    return merge_config(sac_default_config(), {
        'exp_name': args.exp_name or f'mujoco_sac_{args.env}',
        'seed': args.seed,
        'env': {'env_id': args.env, 'collector_env_num': args.env_num, 'evaluator_env_num': args.eval_episodes,
                'n_evaluator_episode': args.eval_episodes, 'stop_value': args.stop_value},
        'policy': {
            'discount_factor': 0.99,
            'model': {'actor_hidden_size_list': [256, 256], 'critic_hidden_size_list': [256, 256]},
            'learn': {'update_per_collect': args.env_num, 'batch_size': 256, 'learning_rate_actor': 3e-4,
                      'learning_rate_critic': 3e-4, 'learning_rate_alpha': 3e-4, 'target_theta': 0.005,
                      'init_alpha': 1.0, 'truncation_as_terminal': False, 'learning_starts': args.learning_starts},
            'collect': {'n_sample': args.env_num, 'random_collect_size': args.random_steps},
            'eval': {'evaluator': {'eval_freq': args.eval_freq}},
            'other': {'replay_buffer': {'replay_buffer_size': args.buffer_size}},
        },
    })


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--env', default='HalfCheetah-v5')
    ap.add_argument('--backend', default='sync', choices=['sync', 'subprocess'])
    ap.add_argument('--env-num', type=int, default=1, help='collector envs (one update per env step)')
    ap.add_argument('--max-env-step', type=int, default=1_000_000)
    ap.add_argument('--stop-value', type=float, default=None, help='stop once the mean eval return reaches this')
    ap.add_argument('--eval-episodes', type=int, default=5)
    ap.add_argument('--eval-freq', type=int, default=20_000, help='evaluate every this many updates')
    ap.add_argument('--buffer-size', type=int, default=1_000_000)
    ap.add_argument('--learning-starts', type=int, default=10_000)
    ap.add_argument('--random-steps', type=int, default=10_000, help='uniform-random actions first')
    ap.add_argument('--max-episode-steps', type=int, default=None, help='shorter episodes (smoke tests)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--exp-name', default=None)
    ap.add_argument('--quiet', action='store_true')
    args = ap.parse_args(argv)
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    torch.set_num_threads(args.threads)
    cfg = make_config(args)
    fn = MujocoEnvFn(args.env, max_episode_steps=args.max_episode_steps)
    collector_env = EnvManager(fn, args.env_num, seed=args.seed, backend=args.backend)
    evaluator_env = EnvManager(fn, args.eval_episodes, seed=args.seed + 10_000, backend=args.backend)
    policy = SACPolicy(cfg, obs_shape=collector_env.observation_space.shape[0],
                       action_shape=collector_env.action_space.shape[0], seed=args.seed)
    buffer_ = DequeBuffer(args.buffer_size, seed=args.seed)
    ckpt = CkptSaver(policy, cfg.exp_name, train_freq=100_000)
    logger = online_logger(cfg.exp_name, train_show_freq=1000)
    t0 = time.perf_counter()
    try:
        with task.start(ctx=OnlineRLContext()):
            task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
            task.use(StepCollector(cfg, policy.collect_mode, collector_env))
            task.use(data_pusher(cfg, buffer_))
            task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_))
            task.use(ckpt)
            task.use(logger)
            task.use(termination_checker(max_env_step=args.max_env_step))
            task.run()
            ctx = task.ctx
    finally:
        logger.close()
        collector_env.close()
        evaluator_env.close()
    wall = time.perf_counter() - t0
    print(f'{args.env}: last mean eval return {ctx.last_eval_value:.1f} after {ctx.env_step} env steps, '
          f'{ctx.train_iter} updates, {wall:.0f} s')
    return {'env_step': ctx.env_step, 'train_iter': ctx.train_iter, 'last_eval_return': ctx.last_eval_value,
            'env_episode': ctx.env_episode, 'buffer_count': buffer_.count(), 'wall_time': wall}


if __name__ == '__main__':
    main()
