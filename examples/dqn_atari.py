"""DQN on Atari (Pong by default) with the Nature-DQN CNN, envs in worker processes.

    python examples/dqn_atari.py                                   # PongNoFrameskip-v4, 8 subprocess envs
    python examples/dqn_atari.py --env ALE/Breakout-v5 --max-env-step 10_000_000
    python examples/dqn_atari.py --backend envpool                 # EnvPool's C++ Atari (same settings)

Preprocessing (:mod:`pipeline.envs.atari`): 30 no-op resets, frame skip 4 with max-pool, 84x84
gray, 4 stacked frames; episodic life and sign-clipped rewards for the training envs only; the
evaluation envs play whole games with raw rewards, so the evaluation return is the game score
(Pong: -21..21). Double DQN with 3-step returns, Adam 1e-4, batch 32, one update per 4 env steps,
hard target update every 2,000 updates, eps 1 -> 0.01 over the first 250k env steps, 100k replay
(frame-efficient: :mod:`pipeline.data.frame_storage`, about 0.75 GB).
It stops when the mean evaluation score reaches ``--stop-score`` or after ``--max-env-step``.
"""
from __future__ import annotations

import argparse
import logging
import sys
import time
from typing import Any, Dict, List, Optional

import torch  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from middleware import (CkptSaver, OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler,  # noqa: E402
                        interaction_evaluator, nstep_reward_enhancer, online_logger, termination_checker)
from pipeline import task  # noqa: E402
from pipeline.config import compile_config  # noqa: E402
from pipeline.envs import EnvManager  # noqa: E402
from pipeline.envs.atari import AtariEnvFn, envpool_atari_kwargs, envpool_atari_task  # noqa: E402
from pipeline.policy import DQNPolicy  # noqa: E402
from pipeline.policy.conv import AtariQNetwork  # noqa: E402


def make_config(args: argparse.Namespace) -> Any:
    return compile_config({
        'exp_name': args.exp_name or f'atari_dqn_{args.env.split("/")[-1]}',
        'seed': args.seed,
        'env': {'env_id': args.env, 'collector_env_num': args.env_num, 'evaluator_env_num': args.eval_episodes,
                'n_evaluator_episode': args.eval_episodes, 'stop_value': args.stop_score},
        'policy': {
            'discount_factor': 0.99,
            'nstep': 3,
            'learn': {'update_per_collect': max(1, args.env_num // 4), 'batch_size': 32, 'learning_rate': 1e-4,
                      'loss': 'huber', 'target_update_type': 'hard', 'target_update_freq': 2000,
                      'grad_clip': 10.0, 'truncation_as_terminal': False, 'learning_starts': args.learning_starts},
            'collect': {'n_sample': args.env_num},
            'eval': {'evaluator': {'eval_freq': args.eval_freq}},
            'other': {'eps': {'type': 'linear', 'start': 1.0, 'end': 0.01, 'decay': args.eps_decay},
                      'replay_buffer': {'replay_buffer_size': args.buffer_size}},
        },
    }, policy='dqn')


def make_envs(args: argparse.Namespace) -> tuple:
    n, m = args.env_num, args.eval_episodes
    if args.backend == 'envpool':
        task_id = envpool_atari_task(args.env)
        kw_train, kw_eval = envpool_atari_kwargs(True), envpool_atari_kwargs(False)
        if args.max_episode_steps:
            kw_train['max_episode_steps'] = kw_eval['max_episode_steps'] = args.max_episode_steps
        train = EnvManager(task_id, n, seed=args.seed, backend='envpool', env_kwargs=kw_train)
        evaluate = EnvManager(task_id, m, seed=args.seed + 10_000, backend='envpool', env_kwargs=kw_eval)
    else:
        limit = {'max_episode_steps': args.max_episode_steps} if args.max_episode_steps else {}
        train = EnvManager(AtariEnvFn(args.env, training=True, **limit), n, seed=args.seed, backend=args.backend)
        evaluate = EnvManager(AtariEnvFn(args.env, training=False, **limit), m, seed=args.seed + 10_000,
                              backend=args.backend)
    return train, evaluate


def make_buffer(size: int, seed: int) -> Any:
    """Replay that keeps each frame once (100k Pong transitions: ~0.75 GB instead of ~7 GB)."""
    from pipeline.data import DequeBuffer
    from pipeline.data.frame_storage import FrameStorage
    return DequeBuffer(size, seed=seed, storage=FrameStorage(size, seed=seed))


def main(argv: Optional[List[str]] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--env', default='PongNoFrameskip-v4', help='NoFrameskip-v4 or ALE/...-v5 id')
    ap.add_argument('--backend', default='subprocess', choices=['sync', 'subprocess', 'envpool'])
    ap.add_argument('--env-num', type=int, default=8, help='collector envs')
    ap.add_argument('--max-env-step', type=int, default=3_000_000)
    ap.add_argument('--stop-score', type=int, default=20, help='stop when the mean eval score reaches this')
    ap.add_argument('--eval-episodes', type=int, default=4, help='evaluation games (one env each)')
    ap.add_argument('--eval-freq', type=int, default=25_000, help='evaluate every this many train iterations')
    ap.add_argument('--buffer-size', type=int, default=100_000)
    ap.add_argument('--learning-starts', type=int, default=20_000, help='transitions stored before training')
    ap.add_argument('--eps-decay', type=int, default=250_000, help='env steps of the linear eps decay')
    ap.add_argument('--max-episode-steps', type=int, default=None,
                    help='cut episodes after this many agent steps (smoke tests); default: the game\'s own 27k')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--threads', type=int, default=1, help='torch threads')
    ap.add_argument('--exp-name', default=None)
    ap.add_argument('--quiet', action='store_true')
    args = ap.parse_args(argv)
    if not args.quiet:
        logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    torch.set_num_threads(args.threads)
    cfg = make_config(args)
    collector_env, evaluator_env = make_envs(args)
    policy = DQNPolicy(cfg, model=AtariQNetwork(int(collector_env.action_space.n)), seed=args.seed)
    buffer_ = make_buffer(args.buffer_size, args.seed)
    ckpt = CkptSaver(policy, cfg.exp_name, train_freq=50_000)
    logger = online_logger(cfg.exp_name, train_show_freq=1000)
    t0 = time.perf_counter()
    try:
        with task.start(ctx=OnlineRLContext()):
            task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
            task.use(eps_greedy_handler(cfg))
            task.use(StepCollector(cfg, policy.collect_mode, collector_env))
            task.use(nstep_reward_enhancer(cfg))
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
    result = {'env_step': ctx.env_step, 'train_iter': ctx.train_iter, 'env_episode': ctx.env_episode,
              'last_eval_score': ctx.last_eval_value, 'buffer_count': buffer_.count(), 'wall_time': wall,
              'solved': ctx.last_eval_value >= args.stop_score}
    print(f'{args.env}: last mean eval score {ctx.last_eval_value:.1f} after {ctx.env_step} env steps, '
          f'{ctx.train_iter} updates, {wall:.0f} s ({ctx.env_step / max(wall, 1e-9):.0f} env steps/s)')
    return result


if __name__ == '__main__':
    sys.exit(0 if main()['solved'] else 1)
