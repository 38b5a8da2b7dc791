"""SAC on a gymnasium MuJoCo task (HalfCheetah-v5 by default).

    python examples/sac_mujoco.py                                  # HalfCheetah-v5, 1M env steps
    python examples/sac_mujoco.py --smoke                          # under a minute: does it run here?
    python examples/sac_mujoco.py --env Hopper-v5 --max-env-step 1_000_000
    python examples/sac_mujoco.py --backend subprocess --env-num 4 # envs in worker processes
    python examples/sac_mujoco.py --play mujoco_sac_HalfCheetah-v5/1/ckpt/eval.pth.tar --render

Settings (the common SAC ones for MuJoCo): 256x256 actor and twin critics, Adam 3e-4, batch 256,
discount 0.99, soft target update 0.005, learned temperature, 1M replay, 10k uniform-random steps
first, one update per env step (``update_per_collect`` = ``n_sample`` = ``--env-num``). Actions
are rescaled to [-1, 1] (:mod:`pipeline.envs.mujoco`); a 1000-step time limit is a truncation
(bootstrapped), a fall is a termination. Evaluation: the deterministic policy over 5 episodes
every 20k updates. Needs the ``mujoco`` extra: ``pip install 'rlpipe[mujoco]'``.
With ``--backend subprocess`` and ``--env-num`` >= 2 the collector steps the envs in two halves
(``StepCollector(..., overlap=True)``): one half steps in the worker processes while this process
runs the actor for the other half.

Same flags as every training example (``--exp-name``, ``--seed``, ``--set key=value``, ``--resume``,
``--play``, ``--middleware``, ...): runs go to ``./mujoco_sac_<env>/<n>/`` (``config.json``, ``ckpt/``,
``log/`` for TensorBoard). The replay buffer is saved with the final checkpoint only with
``--save-buffer`` (a columnar file; its size per transition and the time to save and load it:
docs/benchmarks.md, ``benchmarks/bench_buffer_io.py``).
"""
from __future__ import annotations

import sys
import time
from typing import Any, Dict, List, Optional

from pipeline.run import example_parser, run_pipeline  # no torch
from pipeline.run.atari_mujoco import (add_env_flags, add_smoke_flag, checkpointer, compile_run_config, env_config,
                                       finish_run, mujoco_envs, mujoco_play_env, play_checkpoint, run_logger,
                                       start_run)
from pipeline.run.recipes import sac_policy_settings, use_sac  # no torch


def build_parser():
    p = example_parser(__doc__, exp_name='mujoco_sac', max_env_step=1_000_000)
    add_env_flags(p, env='HalfCheetah-v5', env_num=1, eval_episodes=5, backends=('sync', 'subprocess'),
                  backend='sync')
    p.add_argument('--save-buffer', action='store_true', help='save the replay buffer with final.pth.tar')
    add_smoke_flag(p, {'max_env_step': 1_000, 'eval_episodes': 1, 'max_episode_steps': 500},
                   ['policy.collect.random_collect_size=500', 'policy.learn.learning_starts=500',
                    'policy.other.replay_buffer.replay_buffer_size=1000', 'policy.eval.evaluator.eval_freq=250'])
    return p


def user_config(args: Any) -> Dict[str, Any]:
    """The env flags' ``env`` section and SAC's settings (:func:`pipeline.run.recipes.sac_policy_settings`, shared
    with :class:`pipeline.run.agents.SAC`)."""
    return {'env': env_config(args, stop_value=None), 'policy': sac_policy_settings(args.env_num)}


def build_policy(cfg: Any, observation_space: Any, action_space: Any) -> Any:
    from pipeline.policy.sac import SACPolicy

    return SACPolicy(cfg, obs_shape=observation_space.shape[0], action_shape=action_space.shape[0], seed=cfg.seed)


def main(argv: Optional[List[str]] = None, extra_middleware: Optional[List[Any]] = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    run = start_run(args, user_config(args), 'sac')  # --set, logging, torch threads; --resume/--play checked
    if run.play:
        return play_checkpoint(run, args, build_policy, mujoco_play_env)

    from contexts import OnlineRLContext
    from middleware import termination_checker
    from pipeline import task
    from pipeline.data import DequeBuffer

    cfg = compile_run_config(run, 'sac')
    collector_env, evaluator_env = mujoco_envs(cfg, args.backend)
    policy = build_policy(cfg, collector_env.observation_space, collector_env.action_space)
    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=cfg.seed)
    ckpt = checkpointer(run, policy, cfg, 'sac', train_freq=100_000, buffer=buffer_ if args.save_buffer else None,
                        spaces=(collector_env.observation_space, collector_env.action_space))
    logger = run_logger(run, args, train_show_freq=1000)
    run.begin(cfg, quiet=args.quiet)
    t0 = time.perf_counter()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        # subprocess envs (--env-num >= 2): one half steps in the workers while the policy acts for the other
        use_sac(cfg, policy, buffer_, collector_env, evaluator_env, overlap=args.backend == 'subprocess')
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=args.max_env_step))
        for mw in [*(extra_middleware or []), *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
    result = finish_run(run, ctx, interrupted, t0, ckpt, logger, [collector_env, evaluator_env],
                        script=__file__)
    result['buffer_count'] = buffer_.count()
    return result


if __name__ == '__main__':
    try:
        result = main()
    except KeyboardInterrupt:  # before training started: nothing to save
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
    sys.exit(130 if result.get('interrupted') else 0)
