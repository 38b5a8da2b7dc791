"""PPO on CartPole-v1: trains until the mean return over 10 evaluation episodes is >= 475.

    python examples/ppo_cartpole.py                       # train; prints its run folder ./cartpole_ppo/<n>/
    python examples/ppo_cartpole.py --seed 1 --set policy.learn.n_epochs=10
    python examples/ppo_cartpole.py --resume cartpole_ppo/1/ckpt/final.pth.tar
    python examples/ppo_cartpole.py --play cartpole_ppo/1/ckpt/eval.pth.tar --render
    rlpipe run --package . --main examples.ppo_cartpole.main --parallel-workers 4   # learner, 2 collectors, evaluator

Settings: RL-Zoo's CartPole-v1 PPO (8 envs x 32 steps = 256 rows per rollout, minibatch 256,
20 epochs, gamma 0.98, GAE lambda 0.8, lr 1e-3 and clip range 0.2 decaying linearly to 0 over
100k env steps, entropy coefficient 0, max grad norm 0.5, [64, 64] tanh actor and critic).
Evaluation every 4 rollouts (1,024 env steps). It stops by itself when solved (or after
--max-env-step) and prints env steps and wall time. Each run writes to its own folder
(``config.json``, ``ckpt/``, ``log/``; ``tensorboard --logdir cartpole_ppo``); Ctrl-C saves
``final.pth.tar`` and prints the command that resumes the run. The same flags as every training
example (``--exp-name``, ``--seed``, ``--set``, ``--resume``, ``--play``, ``--middleware``, ...).

Env steps to solve over seeds, next to Stable-Baselines3 (``python benchmarks/bench_ppo.py --solve``),
and timings (``python benchmarks/bench_ppo.py``): docs/benchmarks.md.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, List, Optional, Sequence

from pipeline.run import example_parser, node_print, prepare_run, run_pipeline, setup_logging  # no torch
from pipeline.run.recipes import PPO_CARTPOLE, use_ppo  # no torch

USER_CONFIG = PPO_CARTPOLE  # pipeline.run.recipes: shared with pipeline.run.agents.PPO


def build_parser(doc: Optional[str] = __doc__, exp_name: str = 'cartpole_ppo', max_env_step: Optional[int] = None):
    p = example_parser(doc, exp_name=exp_name, max_env_step=max_env_step)
    p.set_defaults(max_env_step=None)
    for a in p._actions:  # the default budget is the config's schedule horizon
        if a.dest == 'max_env_step':
            a.help = 'stop after this many env steps (default: policy.learn.total_env_steps)'
    p.add_argument('--no-stop', action='store_true', help='train the whole budget, then evaluate once more')
    return p


def main(argv: Optional[Sequence[str]] = None, extra_middleware: Optional[List[Any]] = None,
         user_config: dict = USER_CONFIG, doc: Optional[str] = __doc__,
         make_env: Optional[Callable[[str, Optional[str]], Any]] = None,
         add_flags: Optional[Callable[[Any], None]] = None,
         config_from_args: Optional[Callable[[Any], dict]] = None, script: str = __file__) -> int:
    """Train (or ``--play``) PPO with ``user_config``. ``extra_middleware``: middleware appended to
    the pipeline (as are ``--middleware module:factory`` ones). ``make_env(env_id, render_mode)``
    returns one gymnasium env (default: ``gymnasium.make``); the collector and evaluator run copies
    of it. ``add_flags(parser)`` adds an example's own flags; ``config_from_args(args)`` then returns
    the user config (it may also set ``args.exp_name``). ``script``: the example's file, recorded in
    ``config.json`` and named in the printed resume and "watch it" commands. Returns the exit status (0 = solved, or a
    fixed budget done)."""
    parser = build_parser(doc, user_config['exp_name'])
    parser.script = os.path.abspath(script)
    if add_flags is not None:
        add_flags(parser)
    args = parser.parse_args(argv)
    if config_from_args is not None:
        user_config = config_from_args(args)
    # checks --resume/--play paths, --set keys and the env id before anything heavy (a typo: exit status 2)
    run = prepare_run(args, user_config, policy='ppo', env_check=True)
    setup_logging()

    import torch

    from pipeline.checkpoint import CheckpointError, read_checkpoint
    torch.set_num_threads(args.threads)
    try:
        for path in (run.resume, run.play):
            if path:
                read_checkpoint(path)  # a corrupt or foreign file fails now, before anything is built
    except CheckpointError as e:
        from pipeline.run.precheck import usage_error  # exit status 2, as for any bad input
        usage_error(f'error: {e}')
    if run.play:
        return play(run.play, args, make_env, run.user_config.get('env', {}).get('env_id'))
    from middleware import CkptSaver
    from pipeline.envs import EnvManager
    from pipeline.policy.ppo import PPOPolicy
    from pipeline.run.precheck import compile_or_exit

    cfg = compile_or_exit(run.user_config, 'ppo')
    if args.no_stop:
        cfg.env.stop_value = None
    max_env_step = args.max_env_step or cfg.policy.learn.total_env_steps
    env_id, kw = cfg.env.env_id, dict(cfg.env.env_kwargs or {})
    spec = env_id if make_env is None else (lambda: make_env(env_id, None))
    collector_env = EnvManager(spec, cfg.env.collector_env_num, seed=cfg.seed, env_kwargs=kw)
    evaluator_env = EnvManager(spec, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000, env_kwargs=kw)
    policy = PPOPolicy(cfg, collector_env.observation_space, collector_env.action_space, seed=cfg.seed)
    run_dir = run.create_dir()  # only now: a start refused above leaves no run folder
    try:  # a checkpoint that does not fit this policy fails here, before the pipeline starts
        ckpt = CkptSaver(policy, run_dir, train_freq=100, resume_from=run.resume, config=cfg, policy_type='ppo',
                         spaces=(collector_env.observation_space, collector_env.action_space))
    except CheckpointError as e:
        run.abandon()
        from pipeline.run.precheck import usage_error  # exit status 2, as for any bad input
        usage_error(f'error: {e}')
    run.begin(cfg)
    return train(cfg, args, run, policy, ckpt, collector_env, evaluator_env, max_env_step, extra_middleware or [])


def train(cfg: Any, args: Any, run: Any, policy: Any, ckpt: Any, collector_env: Any, evaluator_env: Any,
          max_env_step: int, extra_middleware: List[Any]) -> int:
    from contexts import OnlineRLContext
    from middleware import evaluate_episodes, online_logger, termination_checker
    from pipeline import task
    from pipeline.runtime.roles import Role

    logger = online_logger(log_dir=os.path.join(run.dir, 'log'), train_show_freq=50,
                           progress=not args.no_progress, total_env_step=max_env_step)
    t0 = time.perf_counter()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        use_ppo(cfg, policy, collector_env, evaluator_env)  # exchanger, evaluator, collector, GAE, trainer
        task.use(ckpt)
        task.use(logger)
        task.use(termination_checker(max_env_step=max_env_step))
        for mw in [*extra_middleware, *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
        trains = not task.roles or Role.LEARNER in task.roles
    final = None
    if cfg.env.stop_value is None and trains and not interrupted:  # a fixed budget: evaluate the final weights
        returns, _ = evaluate_episodes(policy.eval_mode, evaluator_env, cfg.env.n_evaluator_episode)
        final = float(returns.mean())
    logger.close()
    collector_env.close()
    evaluator_env.close()
    wall = time.perf_counter() - t0
    if interrupted:
        return 130
    stop = cfg.env.stop_value
    solved = stop is not None and ctx.last_eval_value >= stop
    node_print(f'\n{"solved" if solved else "NOT solved" if stop is not None else "done"}: last mean eval return '
          f'{ctx.last_eval_value:.1f} (stop value {stop}) after {ctx.env_step} env steps, '
          f'{ctx.train_iter} train iters, {wall:.1f} s wall time')
    if final is not None:
        node_print(f'final mean eval return {final:.1f} over {cfg.env.n_evaluator_episode} episodes')
    run.print_paths(ckpt, run.script or __file__)
    return 0 if (solved or stop is None) else 1


def play(path: str, args: Any, make_env: Optional[Callable[[str, Optional[str]], Any]] = None,
         named_env_id: Optional[str] = None) -> int:
    """Run the policy saved in ``path`` for ``--episodes`` episodes (``--render`` / ``--video``) on the env it
    was trained on (a ``module:Name`` id only when ``named_env_id``, the run's env id, names it too)."""
    from pipeline.run import play_policy
    from pipeline.run.play import saved_play_policy

    pol = saved_play_policy(path, args, named_env_id)  # checked; on --device, wherever it trained
    env_cfg = pol.saved_config.get('env', {})
    env_id = env_cfg.get('env_id', 'CartPole-v1')

    def make(render_mode: Optional[str]) -> Any:
        if make_env is not None:
            return make_env(env_id, render_mode)
        import gymnasium as gym
        return gym.make(env_id, render_mode=render_mode, **dict(env_cfg.get('env_kwargs') or {}))

    play_policy(pol.eval_mode, make, episodes=args.episodes, seed=args.seed, render=args.render,
                video_dir=args.video)
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before training started: nothing to save
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
