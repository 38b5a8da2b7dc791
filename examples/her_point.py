"""SAC + hindsight experience replay on a 2-D point-reaching goal env.

    python examples/her_point.py             # SAC + HER (future, k=4)
    python examples/her_point.py --no-her    # the same budget without relabelling

A point in [-1, 1]^2 must get within 0.05 of a random goal (reward -1 per step away from it, 0
within it); episodes last 50 steps whether or not the goal is reached, so both variants see the
same number of episodes and gradient steps per env step. The goal region covers about 0.2% of the
arena, so undirected exploration rarely reaches it: within the default budget of 15k env steps
SAC + HER learns to reach it (an episode succeeds when some step is within the radius) while SAC
alone does not (success rates: docs/benchmarks.md, ``benchmarks/bench_her_rnd.py``). SAC alone does learn
easier variants (radius 0.1, or episodes that end on success) given a larger budget.
Prints the evaluation success rate and returns a summary dict (used by tests and the benchmark).
Shares the flags of every training example (--exp-name, --seed, --set, --resume, --play, ...):
each run writes ./<exp>/<n>/ (config.json, ckpt/, log/).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from pipeline.run import (example_parser, play_without_rendering, prepare_run,  # no torch
                          run_pipeline, run_script, setup_logging)


def user_config(seed: int) -> Dict[str, Any]:
    return {
        "exp_name": "point_sac_her",
        "seed": seed,
        "env": {"env_id": "point", "collector_env_num": 4, "evaluator_env_num": 5, "n_evaluator_episode": 50},
        "policy": {
            "discount_factor": 0.95,
            "learn": {"update_per_collect": 64, "batch_size": 128, "target_theta": 0.05},
            "collect": {"n_episode": 8, "random_collect_size": 800},
            "eval": {"evaluator": {"eval_freq": 320}},
            "other": {"replay_buffer": {"replay_buffer_size": 2000}},
        },
    }


def make_config(seed: int, user: Optional[Dict[str, Any]] = None) -> Any:
    from pipeline.config import merge_config
    from pipeline.policy.sac import sac_default_config

    return merge_config(sac_default_config(), user if user is not None else user_config(seed))


def build_parser():
    p = example_parser(__doc__, exp_name="point_sac_her", max_env_step=15_000)
    p.add_argument("--no-her", action="store_true", help="train without hindsight relabelling")
    p.add_argument("--distance-threshold", type=float, default=0.05, help="success radius of the point env")
    p.add_argument("--stop-success", type=float, default=0.95, help="stop once eval success reaches this")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--k", type=int, default=4, help="future relabels per transition")
    p.add_argument("--quiet", action="store_true", help="no log lines and no progress display")
    return p


def main(argv: Optional[List[str]] = None, extra_middleware: Optional[List[Any]] = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    if args.exp_name == "point_sac_her" and args.no_her:
        args.exp_name = "point_sac_noher"
    run = prepare_run(args, user_config(args.seed), policy='sac')
    if not args.quiet:
        setup_logging()

    import torch

    from contexts import OnlineRLContext
    from middleware import CkptSaver, EpisodeCollector, data_pusher, online_logger, termination_checker
    from middleware.her import HERLearner, goal_success_evaluator, goal_success_rate
    from pipeline import task
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.envs.goal_envs import FlattenGoalObservation, PointGoalEnv
    from pipeline.policy.common import vector_size
    from pipeline.policy.sac import SACPolicy
    from pipeline.reward_model import HerRewardModel, NoRelabel
    from pipeline.run.record import RunRecorder

    torch.set_num_threads(args.threads)
    cfg = make_config(args.seed, run.user_config)

    def make_env() -> FlattenGoalObservation:
        return FlattenGoalObservation(PointGoalEnv(distance_threshold=args.distance_threshold,
                                                   terminate_on_success=False))
    probe = make_env()
    cfg.policy.model.obs_shape = vector_size(probe.observation_space, 'observation', 'SAC')
    cfg.policy.model.action_shape = 2
    policy = SACPolicy(cfg, seed=args.seed)
    if run.play:
        return play_without_rendering(run.play, policy, make_env, args, "the point env")
    collector_env = EnvManager(make_env, cfg.env.collector_env_num, seed=args.seed)
    evaluator_env = EnvManager(make_env, cfg.env.evaluator_env_num, seed=args.seed + 1000)
    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=args.seed)
    if args.no_her:
        relabel: Any = NoRelabel(episode_size=16, sample_per_episode=8, seed=args.seed)
    else:
        relabel = HerRewardModel.from_env(probe, strategy="future", k=args.k, episode_size=16,
                                          sample_per_episode=8, seed=args.seed)
    run_dir = run.create_dir()
    ckpt = CkptSaver(policy, run_dir, resume_from=run.resume, buffer=buffer_, config=cfg,
                     policy_type="sac")
    run.begin(cfg, quiet=args.quiet)
    logger = online_logger(log_dir=os.path.join(run_dir, "log"), progress=not (args.quiet or args.no_progress),
                           total_env_step=args.max_env_step)

    recorder = RunRecorder()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        task.use(goal_success_evaluator(policy.eval_mode, evaluator_env, n_episode=args.eval_episodes,
                                        eval_freq=cfg.policy.eval.evaluator.eval_freq,
                                        stop_success=args.stop_success))
        task.use(EpisodeCollector(cfg, policy.collect_mode, collector_env))
        task.use(data_pusher(cfg, buffer_))
        task.use(HERLearner(cfg, policy.learn_mode, buffer_, relabel))
        task.use(termination_checker(max_env_step=args.max_env_step))
        task.use(ckpt)
        task.use(logger)
        task.use(recorder)
        for mw in [*(extra_middleware or []), *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
    logger.close()
    success = goal_success_rate(policy.eval_mode, evaluator_env, args.eval_episodes)  # the trained policy
    collector_env.close()
    evaluator_env.close()
    result = recorder.summary(ctx, run_dir, interrupted, her=not args.no_her,
                              distance_threshold=args.distance_threshold, success_rate=success,
                              buffer_count=buffer_.count())
    print(f"point reaching, {'SAC+HER' if result['her'] else 'SAC (no HER)'}: success rate {success:.2f} "
          f"after {ctx.env_step} env steps, {ctx.train_iter} train iterations ({result['wall_time']:.1f} s)")
    run.print_outputs(ckpt, quiet=args.quiet)
    return result


if __name__ == "__main__":
    run_script(main)
