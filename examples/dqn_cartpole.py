"""DQN on CartPole-v1: trains until the mean return over 10 evaluation episodes is >= 475.

    python examples/dqn_cartpole.py            # uniform replay
    python examples/dqn_cartpole.py --per      # prioritized replay
    python examples/dqn_cartpole.py --resume cartpole_dqn/ckpt/final.pth.tar

It stops by itself when solved (or after --max-env-step env steps) and prints where the
checkpoints and TensorBoard logs are (``tensorboard --logdir <exp>/log``).
"""
from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from contexts import OnlineRLContext  # noqa: E402
from middleware import (CkptSaver, ContextExchanger, ModelExchanger, OffPolicyLearner, StepCollector,  # noqa: E402
                        data_pusher, eps_greedy_handler, interaction_evaluator, nstep_reward_enhancer,
                        online_logger, termination_checker)
from pipeline import task  # noqa: E402
from pipeline.config import apply_overrides, compile_config  # noqa: E402
from pipeline.data import DequeBuffer, PriorityExperienceReplay  # noqa: E402
from pipeline.envs import EnvManager  # noqa: E402
from pipeline.policy import DQNPolicy  # noqa: E402

# Settings that learn CartPole-v1 reliably: the DI-engine CartPole DQN defaults with a longer
# horizon (discount 0.99, 3-step returns), bootstrapping through the 500-step time limit (a
# truncation is not a terminal), a slower target update, a lower learning rate, gradient clipping
# and a longer exploration decay. Seeds 0-2, with and without --per, solved in 6k-27k env steps
# (under a minute each on one core).
USER_CONFIG = {
    'exp_name': 'cartpole_dqn',
    'env': {
        'env_id': 'CartPole-v1',
        'collector_env_num': 8,
        'evaluator_env_num': 5,
        'n_evaluator_episode': 10,
        'stop_value': 475,
    },
    'policy': {
        'discount_factor': 0.99,
        'nstep': 3,
        'learn': {
            'update_per_collect': 5,
            'batch_size': 64,
            'learning_rate': 5e-4,
            'target_update_type': 'hard',
            'target_update_freq': 250,
            'truncation_as_terminal': False,
            'grad_clip': 10.0,
            'learning_starts': 1000,
        },
        'collect': {'n_sample': 8},
        'eval': {'evaluator': {'eval_freq': 250}},
        'other': {
            'eps': {'type': 'exp', 'start': 1.0, 'end': 0.02, 'decay': 10000},
            'replay_buffer': {'replay_buffer_size': 50000},
        },
    },
}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--per', action='store_true', help='use prioritized experience replay')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--max-env-step', type=int, default=300_000, help='give up after this many env steps')
    ap.add_argument('--exp-name', default=None, help='output directory (default cartpole_dqn[_per])')
    ap.add_argument('--resume', default=None, help='checkpoint to resume from')
    ap.add_argument('--threads', type=int, default=1, help='torch threads (1 is fastest for this tiny net)')
    ap.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                    help='override a config entry, e.g. --set policy.learn.learning_rate=1e-3 (repeatable)')
    args = ap.parse_args(argv)

    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(message)s', datefmt='%H:%M:%S')
    torch.set_num_threads(args.threads)
    user = copy.deepcopy(USER_CONFIG)
    user['exp_name'] = args.exp_name or ('cartpole_dqn_per' if args.per else 'cartpole_dqn')
    user['seed'] = args.seed
    if args.per:
        user['policy']['other']['replay_buffer'].update(priority=True, priority_IS_weight=True)
    try:
        user = apply_overrides(user, args.set)  # --set KEY=VALUE; compile_config checks keys and values
    except ValueError as exc:
        ap.error(str(exc))
    cfg = compile_config(user, policy='dqn')

    collector_env = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=cfg.seed)
    evaluator_env = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000)
    cfg.policy.model.obs_shape = collector_env.observation_space.shape[0]
    cfg.policy.model.action_shape = int(collector_env.action_space.n)
    policy = DQNPolicy(cfg, seed=cfg.seed)

    rb = cfg.policy.other.replay_buffer
    buffer_ = DequeBuffer(rb.replay_buffer_size, seed=cfg.seed)
    if rb.priority:
        buffer_.use(PriorityExperienceReplay(buffer_, IS_weight=rb.priority_IS_weight,
                                             priority_power_factor=rb.priority_power_factor,
                                             IS_weight_power_factor=rb.IS_weight_power_factor,
                                             IS_weight_anneal_train_iter=rb.IS_weight_anneal_train_iter))

    ckpt = CkptSaver(policy, cfg.exp_name, train_freq=1000, resume_from=args.resume)
    logger = online_logger(cfg.exp_name, train_show_freq=100)
    t0 = time.perf_counter()
    with task.start(ctx=OnlineRLContext()):
        # Under `rlpipe run` every node has its own id, so the collectors explore differently seeded envs.
        collector_env.seed(cfg.seed + 1000 * task.router.node_id)
        task.use(ContextExchanger())  # under `rlpipe run --parallel-workers N`; no-ops in one process
        task.use(ModelExchanger(policy.model))
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
    logger.close()
    collector_env.close()
    evaluator_env.close()
    wall = time.perf_counter() - t0
    solved = ctx.last_eval_value >= cfg.env.stop_value
    print()
    print(f'{"solved" if solved else "NOT solved"}: last mean eval return {ctx.last_eval_value:.1f} '
          f'(stop value {cfg.env.stop_value}) after {ctx.env_step} env steps, {ctx.train_iter} train iters, '
          f'{wall:.0f} s')
    final, best = ckpt.paths.get('final.pth.tar'), ckpt.paths.get('eval.pth.tar')
    print(f'checkpoints: {os.path.abspath(ckpt.dir)}')
    print(f'  final: {final and os.path.abspath(final)}')
    print(f'  best eval: {best and os.path.abspath(best)}')
    print(f'logs: tensorboard --logdir {os.path.abspath(logger.log_dir)}')
    return 0 if solved else 1


if __name__ == '__main__':
    sys.exit(main())
