"""DQN on Atari (Pong by default) with the Nature-DQN CNN, envs in worker processes.

    python examples/dqn_atari.py                                   # PongNoFrameskip-v4, 8 subprocess envs
    python examples/dqn_atari.py --smoke                           # under a minute: does it run here?
    python examples/dqn_atari.py --env ALE/Breakout-v5 --max-env-step 10_000_000
    python examples/dqn_atari.py --backend envpool                 # EnvPool's C++ Atari (same settings)
    python examples/dqn_atari.py --play atari_dqn_PongNoFrameskip-v4/1/ckpt/eval.pth.tar --render

Preprocessing (:mod:`pipeline.envs.atari`): 30 no-op resets, frame skip 4 with max-pool, 84x84
gray, 4 stacked frames; episodic life and sign-clipped rewards for the training envs only; the
evaluation envs play whole games with raw rewards, so the evaluation return is the game score
(Pong: -21..21). Double DQN with 3-step returns, Adam 1e-4, batch 32, one update per 4 env steps,
hard target update every 2,000 updates, eps 1 -> 0.01 over the first 250k env steps, 100k replay
(frame-efficient: :mod:`pipeline.data.frame_storage`), learning from 20k stored
transitions, an evaluation every 25k updates. It stops when the mean evaluation score reaches 20
(``--set env.stop_value=...``) or after ``--max-env-step``.
With ``--backend subprocess`` the collector steps the envs in two halves
(``StepCollector(..., overlap=True)``): one half steps in the worker processes while this process
runs the Q-network for the other half (and, between collector calls, while it trains).

Same flags as every training example (``--exp-name``, ``--seed``, ``--set key=value``, ``--resume``,
``--play``, ``--middleware``, ...): runs go to ``./atari_dqn_<env>/<n>/`` (``config.json``, ``ckpt/``,
``log/`` for TensorBoard). The replay buffer is saved with the checkpoints only with ``--save-buffer``
(``final.buffer`` next to ``final.pth.tar``, and next to the newest periodic checkpoint; a columnar file
that holds each frame once; its size: docs/benchmarks.md); ``--resume`` with
``--save-buffer`` restores it. Without it a resumed run refills the buffer before it trains again.
"""
from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional

from pipeline.run import example_parser, run_pipeline  # no torch
from pipeline.run.atari_mujoco import (add_env_flags, add_smoke_flag, atari_envs, atari_play_env, checkpointer,
                                       compile_run_config, env_config, finish_run, play_checkpoint, run_logger,
                                       start_run)


def build_parser():
    p = example_parser(__doc__, exp_name='atari_dqn', max_env_step=3_000_000)
    add_env_flags(p, env='PongNoFrameskip-v4', env_num=8, eval_episodes=4)
    p.add_argument('--save-buffer', action='store_true',
                   help='save the replay buffer with the checkpoints (each frame once) and '
                        'restore it on --resume')
    add_smoke_flag(p, {'max_env_step': 1_000, 'env_num': 4, 'eval_episodes': 1, 'max_episode_steps': 500},
                   ['policy.learn.learning_starts=500', 'policy.other.replay_buffer.replay_buffer_size=1000',
                    'policy.eval.evaluator.eval_freq=100'])
    return p


def user_config(args: Any) -> Dict[str, Any]:
    return {
        'env': env_config(args, stop_value=20),
        'policy': {
            'discount_factor': 0.99,
            'nstep': 3,
            'learn': {'update_per_collect': max(1, args.env_num // 4), 'batch_size': 32, 'learning_rate': 1e-4,
                      'loss': 'huber', 'target_update_type': 'hard', 'target_update_freq': 2000,
                      'grad_clip': 10.0, 'truncation_as_terminal': False, 'learning_starts': 20_000},
            'collect': {'n_sample': args.env_num},
            'eval': {'evaluator': {'eval_freq': 25_000}},
            'other': {'eps': {'type': 'linear', 'start': 1.0, 'end': 0.01, 'decay': 250_000},
                      'replay_buffer': {'replay_buffer_size': 100_000}},
        },
    }


def build_policy(cfg: Any, observation_space: Any, action_space: Any) -> Any:
    from pipeline.policy import DQNPolicy
    from pipeline.policy.conv import AtariQNetwork

    return DQNPolicy(cfg, model=AtariQNetwork(int(action_space.n)), seed=cfg.seed)


def make_buffer(cfg: Any) -> Any:
    """Replay that keeps each frame once (memory as measured: docs/benchmarks.md)."""
    from pipeline.data import DequeBuffer
    from pipeline.data.frame_storage import FrameStorage

    size = cfg.policy.other.replay_buffer.replay_buffer_size
    return DequeBuffer(size, seed=cfg.seed, storage=FrameStorage(size, seed=cfg.seed))


def main(argv: Optional[List[str]] = None, extra_middleware: Optional[List[Any]] = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    run = start_run(args, user_config(args), 'dqn')  # --set, logging, torch threads; --resume/--play checked
    if run.play:
        return play_checkpoint(run, args, build_policy, atari_play_env)

    from contexts import OnlineRLContext
    from middleware import (OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler, interaction_evaluator,
                            nstep_reward_enhancer, termination_checker)
    from pipeline import task

    cfg = compile_run_config(run, 'dqn')
    collector_env, evaluator_env = atari_envs(cfg, args.backend)
    policy = build_policy(cfg, collector_env.observation_space, collector_env.action_space)
    buffer_ = make_buffer(cfg)
    ckpt = checkpointer(run, policy, cfg, 'dqn', train_freq=50_000, buffer=buffer_ if args.save_buffer else None,
                        spaces=(collector_env.observation_space, collector_env.action_space))
    logger = run_logger(run, args, train_show_freq=1000)
    run.begin(cfg, quiet=args.quiet)
    t0 = time.perf_counter()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
        task.use(eps_greedy_handler(cfg))
        # subprocess envs: one half of the envs steps in the workers while the policy acts for the other
        task.use(StepCollector(cfg, policy.collect_mode, collector_env, overlap=args.backend == 'subprocess'))
        task.use(nstep_reward_enhancer(cfg))
        task.use(data_pusher(cfg, buffer_))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_))
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=args.max_env_step))
        for mw in [*(extra_middleware or []), *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
    result = finish_run(run, ctx, interrupted, t0, ckpt, logger, [collector_env, evaluator_env], what='score',
                        script=__file__)
    stop = cfg.env.stop_value
    result.update(buffer_count=buffer_.count(), solved=stop is not None and ctx.last_eval_value >= stop,
                  smoke=args.smoke)
    return result


if __name__ == '__main__':
    try:
        result = main()
    except KeyboardInterrupt:  # before training started: nothing to save
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
    sys.exit(130 if result.get('interrupted') else 0 if result.get('solved') or result.get('smoke')
             or 'play_returns' in result else 1)
