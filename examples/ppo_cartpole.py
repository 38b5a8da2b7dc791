"""PPO on CartPole-v1: trains until the mean return over 10 evaluation episodes is >= 475.

    python examples/ppo_cartpole.py
    python examples/ppo_cartpole.py --seed 1 --set policy.learn.n_epochs=10
    rlpipe run --package . --main examples.ppo_cartpole.main --parallel-workers 4   # learner, 2 collectors, evaluator

Settings: RL-Zoo's CartPole-v1 PPO (8 envs x 32 steps = 256 rows per rollout, minibatch 256,
20 epochs, gamma 0.98, GAE lambda 0.8, lr 1e-3 and clip range 0.2 decaying linearly to 0 over
100k env steps, entropy coefficient 0, max grad norm 0.5, [64, 64] tanh actor and critic).
Evaluation every 4 rollouts (1,024 env steps). It stops by itself when solved (or after
--max-env-step) and prints env steps and wall time.

Measured on a shared 2-core CPU (one torch thread, other jobs running; 2026-12-01): seed 0 solved
after 18,688 env steps (73 rollouts, mean eval return 489.1) in 28.5 s wall time; as 4 processes
(``rlpipe run ... --parallel-workers 4``: learner, 2 collectors, evaluator) the learner solved after
11,008 env steps (22 rollout sets of 2 x 256 rows) in 31-33 s, with no stale rollout trained on.
Side-by-side timings and SB3: ``python benchmarks/bench_ppo.py [--solve]``.
"""
from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
import time

import torch  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from middleware import (CkptSaver, OnPolicyTrainer, RolloutCollector, RolloutExchanger, evaluate_episodes,  # noqa: E402
                        gae_estimator, interaction_evaluator, online_logger, termination_checker)
from pipeline.roles import Role  # noqa: E402
from pipeline import task  # noqa: E402
from pipeline.config import apply_overrides  # noqa: E402
from pipeline.envs import EnvManager  # noqa: E402
from pipeline.policy.ppo import PPOPolicy, make_ppo_config  # noqa: E402

USER_CONFIG = {
    'exp_name': 'cartpole_ppo',
    'env': {'env_id': 'CartPole-v1', 'collector_env_num': 8, 'evaluator_env_num': 5,
            'n_evaluator_episode': 10, 'stop_value': 475},
    'policy': {
        'discount_factor': 0.98,
        'gae_lambda': 0.8,
        'learn': {'n_epochs': 20, 'batch_size': 256, 'learning_rate': 1e-3, 'clip_range': 0.2,
                  'ent_coef': 0.0, 'total_env_steps': 100_000},
        'collect': {'n_steps': 32},
        'eval': {'evaluator': {'eval_freq': 4}},
    },
}


def main(argv=None, user_config: dict = USER_CONFIG, doc: str = __doc__) -> int:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--max-env-step', type=int, default=None,
                    help='give up after this many env steps (default: policy.learn.total_env_steps)')
    ap.add_argument('--exp-name', default=None, help='output directory (default: the config exp_name)')
    ap.add_argument('--resume', default=None, help='checkpoint to resume from')
    ap.add_argument('--threads', type=int, default=1, help='torch threads (1 is fastest for these tiny nets)')
    ap.add_argument('--no-stop', action='store_true', help='train the whole budget, then evaluate once more')
    ap.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                    help='override a config entry, e.g. --set policy.learn.n_epochs=10 (repeatable)')
    args = ap.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    torch.set_num_threads(args.threads)
    user = copy.deepcopy(user_config)
    user['exp_name'] = args.exp_name or user['exp_name']
    user['seed'] = args.seed
    try:
        user = apply_overrides(user, args.set)
    except ValueError as e:
        ap.error(str(e))
    cfg = make_ppo_config(user)
    if args.no_stop:
        cfg.env.stop_value = None
    max_env_step = args.max_env_step or cfg.policy.learn.total_env_steps

    collector_env = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=cfg.seed,
                               env_kwargs=cfg.env.env_kwargs)
    evaluator_env = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000,
                               env_kwargs=cfg.env.env_kwargs)
    policy = PPOPolicy(cfg, collector_env.observation_space, collector_env.action_space, seed=cfg.seed)
    ckpt = CkptSaver(policy, cfg.exp_name, train_freq=100, resume_from=args.resume)
    logger = online_logger(cfg.exp_name, train_show_freq=50)
    t0 = time.perf_counter()
    with task.start(ctx=OnlineRLContext()):
        # Under `rlpipe run` every node has its own id, so collectors run differently seeded envs.
        collector_env.seed(cfg.seed + 1000 * task.router.node_id)
        # Multi-process: weights out, rollouts in, stale rollouts refused; a no-op in one process.
        task.use(RolloutExchanger(policy.model))
        task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
        task.use(RolloutCollector(cfg, policy.collect_mode, collector_env))
        task.use(gae_estimator(cfg, policy.model))
        task.use(OnPolicyTrainer(cfg, policy.learn_mode))
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=max_env_step))
        task.run()
        ctx = task.ctx
        trains = not task.roles or Role.LEARNER in task.roles
    final = None
    if cfg.env.stop_value is None and trains:  # a fixed budget: evaluate the final weights once more
        returns, _ = evaluate_episodes(policy.eval_mode, evaluator_env, cfg.env.n_evaluator_episode)
        final = float(returns.mean())
    logger.close()
    collector_env.close()
    evaluator_env.close()
    wall = time.perf_counter() - t0
    stop = cfg.env.stop_value
    solved = stop is not None and ctx.last_eval_value >= stop
    print()
    print(f'{"solved" if solved else "NOT solved" if stop is not None else "done"}: last mean eval return '
          f'{ctx.last_eval_value:.1f} (stop value {stop}) after {ctx.env_step} env steps, '
          f'{ctx.train_iter} train iters, {wall:.1f} s wall time')
    if final is not None:
        print(f'final mean eval return {final:.1f} over {cfg.env.n_evaluator_episode} episodes')
    print(f'checkpoints: {os.path.abspath(ckpt.dir)}')
    print(f'logs: tensorboard --logdir {os.path.abspath(logger.log_dir)}')
    return 0 if (solved or stop is None) else 1


if __name__ == '__main__':
    sys.exit(main())
