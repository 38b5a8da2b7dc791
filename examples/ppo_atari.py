"""PPO on Atari (Pong by default) with the Nature CNN actor-critic, envs in worker processes.

    python examples/ppo_atari.py                                   # PongNoFrameskip-v4, 8 subprocess envs, 10M steps
    python examples/ppo_atari.py --env ALE/Breakout-v5
    python examples/ppo_atari.py --backend envpool                 # EnvPool's C++ Atari (same settings)

Preprocessing as in ``examples/dqn_atari.py`` (:mod:`pipeline.envs.atari`): episodic life and
sign-clipped rewards for the training envs, raw game scores from the evaluation envs. Settings (the
usual PPO Atari ones, as in Stable-Baselines3's RL-Zoo and CleanRL): 8 envs x 128 steps per rollout,
4 epochs of minibatches of 256, gamma 0.99, GAE lambda 0.95, Adam 2.5e-4 and clip range 0.1 both
decaying linearly to 0, entropy 0.01, value coefficient 0.5, max grad norm 0.5.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any, Dict, List, Optional

import torch  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from middleware import (CkptSaver, OnPolicyTrainer, RolloutCollector, gae_estimator, interaction_evaluator,  # noqa: E402
                        online_logger, termination_checker)
from pipeline import task  # noqa: E402
from pipeline.policy.conv import AtariActorCritic  # noqa: E402
from pipeline.policy.ppo import PPOPolicy, make_ppo_config  # noqa: E402

try:
    from examples.dqn_atari import make_envs
except ImportError:  # run as a script from another directory layout
    from dqn_atari import make_envs


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--env', default='PongNoFrameskip-v4', help='NoFrameskip-v4 or ALE/...-v5 id')
    ap.add_argument('--backend', default='subprocess', choices=['sync', 'subprocess', 'envpool'])
    ap.add_argument('--env-num', type=int, default=8)
    ap.add_argument('--n-steps', type=int, default=128, help='steps per env per rollout')
    ap.add_argument('--max-env-step', type=int, default=10_000_000)
    ap.add_argument('--stop-score', type=int, default=20)
    ap.add_argument('--eval-episodes', type=int, default=4)
    ap.add_argument('--eval-freq', type=int, default=50, help='evaluate every this many rollouts')
    ap.add_argument('--max-episode-steps', type=int, default=None, help='shorter episodes (smoke tests)')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--exp-name', default=None)
    ap.add_argument('--quiet', action='store_true')
    args = ap.parse_args(argv)
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    torch.set_num_threads(args.threads)
    cfg = make_ppo_config({
        'exp_name': args.exp_name or f'atari_ppo_{args.env.split("/")[-1]}',
        'seed': args.seed,
        'env': {'env_id': args.env, 'collector_env_num': args.env_num, 'evaluator_env_num': args.eval_episodes,
                'n_evaluator_episode': args.eval_episodes, 'stop_value': args.stop_score},
        'policy': {
            'discount_factor': 0.99,
            'gae_lambda': 0.95,
            'learn': {'n_epochs': 4, 'batch_size': 256, 'learning_rate': 2.5e-4, 'clip_range': 0.1,
                      'ent_coef': 0.01, 'vf_coef': 0.5, 'max_grad_norm': 0.5, 'total_env_steps': args.max_env_step},
            'collect': {'n_steps': args.n_steps},
            'eval': {'evaluator': {'eval_freq': args.eval_freq}},
        },
    })
    collector_env, evaluator_env = make_envs(args)
    model = AtariActorCritic(int(collector_env.action_space.n))
    policy = PPOPolicy(cfg, collector_env.observation_space, collector_env.action_space, model=model, seed=args.seed)
    ckpt = CkptSaver(policy, cfg.exp_name, train_freq=500)
    logger = online_logger(cfg.exp_name, train_show_freq=50)
    t0 = time.perf_counter()
    try:
        with task.start(ctx=OnlineRLContext()):
            task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
            task.use(RolloutCollector(cfg, policy.collect_mode, collector_env))
            task.use(gae_estimator(cfg, policy.model))
            task.use(OnPolicyTrainer(cfg, policy.learn_mode))
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
    print(f'{args.env}: last mean eval score {ctx.last_eval_value:.1f} after {ctx.env_step} env steps, '
          f'{ctx.train_iter} updates, {wall:.0f} s')
    return {'env_step': ctx.env_step, 'train_iter': ctx.train_iter, 'env_episode': ctx.env_episode,
            'last_eval_score': ctx.last_eval_value, 'wall_time': wall,
            'solved': ctx.last_eval_value >= args.stop_score}


if __name__ == '__main__':
    sys.exit(0 if main()['solved'] else 1)
