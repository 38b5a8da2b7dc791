"""DQN on CartPole-v1: trains until the mean return over 10 evaluation episodes is >= 475.

    python examples/dqn_cartpole.py                       # train (uniform replay); prints its run folder
    python examples/dqn_cartpole.py --per                 # prioritized replay
    python examples/dqn_cartpole.py --resume cartpole_dqn/1/ckpt/final.pth.tar
    python examples/dqn_cartpole.py --play cartpole_dqn/1/ckpt/eval.pth.tar --video videos/

Each run writes to its own folder ``./cartpole_dqn/<n>/`` (``config.json``, ``ckpt/``, ``log/``;
``tensorboard --logdir cartpole_dqn``). It stops by itself when solved (or after --max-env-step env
steps). Ctrl-C saves ``final.pth.tar`` (with the replay buffer) and prints the command to resume.

Env steps (training and evaluation) and time to solve for seeds 0-9 (``python
benchmarks/bench_cartpole_solve.py``): docs/benchmarks.md.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, List, Optional, Sequence

from pipeline.run import example_parser, node_print, prepare_run, run_pipeline, setup_logging  # no torch
from pipeline.run.recipes import DQN_CARTPOLE, dqn_buffer, use_dqn  # no torch

# The settings (pipeline.run.recipes.DQN_CARTPOLE, shared with pipeline.run.agents.DQN) learn CartPole-v1 (figures:
# docs/benchmarks.md): a small Q-net with LayerNorm, one update per env step, a soft target update,
# 3-step double-DQN returns, a quick exploration decay. When it evaluates: pipeline.run.recipes.use_dqn.
USER_CONFIG = DQN_CARTPOLE


def build_parser():
    p = example_parser(__doc__, exp_name='cartpole_dqn', max_env_step=300_000)
    p.add_argument('--per', action='store_true', help='use prioritized experience replay')
    p.add_argument('--no-save-buffer', action='store_true',
                   help='do not save the replay buffer with final.pth.tar (smaller files; a resumed run refills it)')
    return p


def main(argv: Optional[Sequence[str]] = None, extra_middleware: Optional[List[Any]] = None) -> int:
    """Train (or ``--play``). ``extra_middleware``: middleware appended to the pipeline (as are
    ``--middleware module:factory`` ones). Returns the exit status (0 = solved)."""
    args = build_parser().parse_args(argv)
    user = dict(USER_CONFIG)
    if args.per:
        user = {**user, 'policy': {**user['policy'], 'other': {
            **user['policy']['other'],
            'replay_buffer': {**user['policy']['other']['replay_buffer'], 'priority': True,
                              'priority_IS_weight': True}}}}
        if args.exp_name == 'cartpole_dqn':
            args.exp_name = 'cartpole_dqn_per'
    # checks --resume/--play paths, --set keys and the env id before anything heavy (a typo: exit status 2)
    run = prepare_run(args, user, policy='dqn', env_check=True)
    setup_logging()

    import torch

    from middleware import CkptSaver
    from pipeline.checkpoint import read_checkpoint
    torch.set_num_threads(args.threads)
    from pipeline.checkpoint import CheckpointError
    try:
        for path in (run.resume, run.play):
            if path:
                read_checkpoint(path)  # a corrupt or foreign file fails now, before anything is built
    except CheckpointError as e:
        from pipeline.run.precheck import usage_error  # exit status 2, as for any bad input
        usage_error(f'error: {e}')
    if run.play:
        return play(run.play, args, run.user_config.get('env', {}).get('env_id'))
    from pipeline.envs import EnvManager
    from pipeline.run.precheck import compile_or_exit, usage_error

    cfg = compile_or_exit(run.user_config, 'dqn')
    collector_env = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=cfg.seed)
    evaluator_env = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000)
    from pipeline.policy import DQNPolicy
    from pipeline.policy.common import discrete_action_count, vector_size

    try:
        cfg.policy.model.obs_shape = vector_size(collector_env.observation_space, 'observation', 'DQN')
        cfg.policy.model.action_shape = discrete_action_count(collector_env.action_space, 'DQN')
    except ValueError as e:  # e.g. --set env.env_id=Pendulum-v1 (continuous actions) or an image env
        usage_error(f'error: {e}')
    policy = DQNPolicy(cfg, seed=cfg.seed)
    buffer_ = make_buffer(cfg)
    run_dir = run.create_dir()  # only now: a start refused above leaves no run folder
    try:  # a checkpoint that does not fit this policy fails here, before the pipeline starts
        ckpt = CkptSaver(policy, run_dir, train_freq=1000, resume_from=run.resume,
                         buffer=None if args.no_save_buffer else buffer_, config=cfg, policy_type='dqn',
                         spaces=(collector_env.observation_space, collector_env.action_space))
    except CheckpointError as e:
        run.abandon()
        from pipeline.run.precheck import usage_error  # exit status 2, as for any bad input
        usage_error(f'error: {e}')
    run.begin(cfg)
    return train(cfg, args, run, policy, buffer_, ckpt, collector_env, evaluator_env, extra_middleware or [])


def make_buffer(cfg: Any) -> Any:
    """The replay buffer (:func:`pipeline.run.recipes.dqn_buffer`: prioritized with ``--per``)."""
    return dqn_buffer(cfg)


def train(cfg: Any, args: Any, run: Any, policy: Any, buffer_: Any, ckpt: Any, collector_env: Any,
          evaluator_env: Any, extra_middleware: List[Any]) -> int:
    from contexts import OnlineRLContext
    from middleware import online_logger, termination_checker
    from pipeline import task

    logger = online_logger(log_dir=os.path.join(run.dir, 'log'), train_show_freq=100,
                           progress=not args.no_progress, total_env_step=args.max_env_step)
    t0 = time.perf_counter()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        evaluator = use_dqn(cfg, policy, buffer_, collector_env, evaluator_env)  # collector ... learner, evaluator
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=args.max_env_step))
        for mw in [*extra_middleware, *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
    logger.close()
    collector_env.close()
    evaluator_env.close()
    wall = time.perf_counter() - t0
    if interrupted:
        return 130
    solved = ctx.last_eval_value >= cfg.env.stop_value
    eval_steps = evaluator.env_steps
    node_print(f'\n{"solved" if solved else "NOT solved"}: last mean eval return {ctx.last_eval_value:.1f} '
          f'(stop value {cfg.env.stop_value}) after {ctx.env_step} training + {eval_steps} evaluation env steps, '
          f'{ctx.train_iter} train iters, {wall:.0f} s')
    run.print_paths(ckpt, __file__)
    return 0 if solved else 1


def play(path: str, args: Any, named_env_id: Optional[str] = None) -> int:
    """Run the policy saved in ``path`` on the env it was trained on (a ``module:Name`` id only when
    ``named_env_id``, the run's ``--set env.env_id``, names it too)."""
    from pipeline.run import play_policy
    from pipeline.run.play import saved_play_policy

    pol = saved_play_policy(path, args, named_env_id)  # checked; on --device, wherever it trained
    env_id = pol.saved_config.get('env', {}).get('env_id', 'CartPole-v1')

    def make_env(render_mode: Optional[str]) -> Any:
        import gymnasium as gym
        return gym.make(env_id, render_mode=render_mode)

    play_policy(pol.eval_mode, make_env, episodes=args.episodes, seed=args.seed, render=args.render,
                video_dir=args.video)
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before training started: nothing to save
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
