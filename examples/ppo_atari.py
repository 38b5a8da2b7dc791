"""PPO on Atari (Pong by default) with the Nature CNN actor-critic, envs in worker processes.

    python examples/ppo_atari.py                                   # PongNoFrameskip-v4, 8 subprocess envs, 10M steps
    python examples/ppo_atari.py --smoke                           # under a minute: does it run here?
    python examples/ppo_atari.py --env ALE/Breakout-v5
    python examples/ppo_atari.py --backend envpool                 # EnvPool's C++ Atari (same settings)
    python examples/ppo_atari.py --play atari_ppo_PongNoFrameskip-v4/1/ckpt/eval.pth.tar --render

Preprocessing as in ``examples/dqn_atari.py`` (:mod:`pipeline.envs.atari`): episodic life and
sign-clipped rewards for the training envs, raw game scores from the evaluation envs. Settings (the
usual PPO Atari ones, as in Stable-Baselines3's RL-Zoo and CleanRL): 8 envs x 128 steps per rollout,
4 epochs of minibatches of 256, gamma 0.99, GAE lambda 0.95, Adam 2.5e-4 and clip range 0.1 both
decaying linearly to 0 over ``--max-env-step``, entropy 0.01, value coefficient 0.5, max grad norm
0.5; an evaluation every 50 rollouts; it stops at a mean evaluation score of 20
(``--set env.stop_value=...``) or after ``--max-env-step``.
With ``--backend subprocess`` the rollouts step the envs in two halves
(``RolloutCollector(..., overlap=True)``): one half steps in the worker processes while this process
runs the CNN for the other half.

Same flags as every training example (``--exp-name``, ``--seed``, ``--set key=value``, ``--resume``,
``--play``, ``--middleware``, ...): runs go to ``./atari_ppo_<env>/<n>/`` (``config.json``, ``ckpt/``,
``log/`` for TensorBoard).
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
    p = example_parser(__doc__, exp_name='atari_ppo', max_env_step=10_000_000)
    add_env_flags(p, env='PongNoFrameskip-v4', env_num=8, eval_episodes=4)
    add_smoke_flag(p, {'max_env_step': 1_024, 'env_num': 4, 'eval_episodes': 1, 'max_episode_steps': 500},
                   ['policy.collect.n_steps=128', 'policy.eval.evaluator.eval_freq=1'])
    return p


def user_config(args: Any) -> Dict[str, Any]:
    return {
        'env': env_config(args, stop_value=20),
        'policy': {
            'discount_factor': 0.99,
            'gae_lambda': 0.95,
            'learn': {'n_epochs': 4, 'batch_size': 256, 'learning_rate': 2.5e-4, 'clip_range': 0.1,
                      'ent_coef': 0.01, 'vf_coef': 0.5, 'max_grad_norm': 0.5, 'total_env_steps': args.max_env_step},
            'collect': {'n_steps': 128},
            'eval': {'evaluator': {'eval_freq': 50}},
        },
    }


def build_policy(cfg: Any, observation_space: Any, action_space: Any) -> Any:
    from pipeline.policy.conv import AtariActorCritic
    from pipeline.policy.ppo import PPOPolicy

    return PPOPolicy(cfg, observation_space, action_space, model=AtariActorCritic(int(action_space.n)), seed=cfg.seed)


def main(argv: Optional[List[str]] = None, extra_middleware: Optional[List[Any]] = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    run = start_run(args, user_config(args), 'ppo')  # --set, logging, torch threads; --resume/--play checked
    if run.play:
        return play_checkpoint(run, args, build_policy, atari_play_env)

    from contexts import OnlineRLContext
    from middleware import OnPolicyTrainer, RolloutCollector, gae_estimator, interaction_evaluator, termination_checker
    from pipeline import task

    cfg = compile_run_config(run, 'ppo')
    collector_env, evaluator_env = atari_envs(cfg, args.backend)
    policy = build_policy(cfg, collector_env.observation_space, collector_env.action_space)
    ckpt = checkpointer(run, policy, cfg, 'ppo', train_freq=500,
                        spaces=(collector_env.observation_space, collector_env.action_space))
    logger = run_logger(run, args, train_show_freq=50)
    run.begin(cfg, quiet=args.quiet)
    t0 = time.perf_counter()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        task.use(interaction_evaluator(cfg, policy.eval_mode, evaluator_env))
        # subprocess envs: one half of the envs steps in the workers while the CNN acts for the other
        task.use(RolloutCollector(cfg, policy.collect_mode, collector_env, overlap=args.backend == 'subprocess'))
        task.use(gae_estimator(cfg, policy.model))
        task.use(OnPolicyTrainer(cfg, policy.learn_mode))
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=args.max_env_step))
        for mw in [*(extra_middleware or []), *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
    result = finish_run(run, ctx, interrupted, t0, ckpt, logger, [collector_env, evaluator_env], what='score',
                        script=__file__)
    stop = cfg.env.stop_value
    result.update(solved=stop is not None and ctx.last_eval_value >= stop, smoke=args.smoke)
    return result


if __name__ == '__main__':
    try:
        result = main()
    except KeyboardInterrupt:  # before training started: nothing to save
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
    sys.exit(130 if result.get('interrupted') else 0 if result.get('solved') or result.get('smoke')
             or 'play_returns' in result else 1)
