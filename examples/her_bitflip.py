"""DQN + hindsight experience replay on bit flipping (the HER paper's task).

    python examples/her_bitflip.py                 # 15 bits, HER (future, k=4)
    python examples/her_bitflip.py --no-her        # the same budget without relabelling
    python examples/her_bitflip.py --play bitflip_dqn_her/1/ckpt/final.pth.tar

Without HER the policy almost never succeeds: a random walk almost never meets the goal, so the
reward is never seen. Success rates with and without HER (``benchmarks/bench_her_rnd.py``):
docs/benchmarks.md. Prints the success rate and returns a summary dict (used by the tests and the benchmark).
Shares the flags of every training example (--exp-name, --seed, --set, --resume, --play, ...):
each run writes ./<exp>/<n>/ (config.json, ckpt/, log/).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from pipeline.run import (example_parser, play_without_rendering, prepare_run,  # no torch
                          run_pipeline, run_script, setup_logging)


def user_config(n_bits: int, seed: int, collector_env_num: int = 4) -> Dict[str, Any]:
    return {
        "exp_name": f"bitflip{n_bits}_dqn_her",
        "seed": seed,
        "env": {"env_id": "bitflip", "collector_env_num": collector_env_num, "evaluator_env_num": 5,
                "n_evaluator_episode": 50},
        "policy": {
            "discount_factor": 0.98,
            "learn": {
                "update_per_collect": 16,
                "batch_size": 128,
                "learning_rate": 1e-3,
                "target_update_type": "soft",
                "target_theta": 0.05,
                "truncation_as_terminal": False,
                "learning_starts": 16,
            },
            "collect": {"n_episode": 16},
            "eval": {"evaluator": {"eval_freq": 160}},
            "other": {"eps": {"type": "linear", "start": 0.2, "end": 0.2, "decay": 1},
                      "replay_buffer": {"replay_buffer_size": 2000}},
        },
    }


def make_config(n_bits: int, seed: int, collector_env_num: int = 4) -> Any:
    from pipeline.config import compile_config  # lazy: --help stays fast

    return compile_config(user_config(n_bits, seed, collector_env_num), policy="dqn")


def build_parser():
    p = example_parser(__doc__, exp_name="bitflip_dqn_her", max_env_step=40_000)
    p.add_argument("--bits", type=int, default=15)
    p.add_argument("--no-her", action="store_true", help="train without hindsight relabelling")
    p.add_argument("--stop-success", type=float, default=0.95, help="stop once eval success reaches this")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--k", type=int, default=4, help="future relabels per transition")
    p.add_argument("--quiet", action="store_true", help="no log lines and no progress display")
    return p


def build_policy(cfg: Any, n: int, obs_dim: int, seed: int) -> Any:
    from torch import nn

    from pipeline.policy import DQNPolicy

    model = nn.Sequential(nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, n))
    return DQNPolicy(cfg, model=model, action_shape=n, seed=seed)


def main(argv: Optional[List[str]] = None, extra_middleware: Optional[List[Any]] = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    if args.exp_name == "bitflip_dqn_her" and args.no_her:
        args.exp_name = "bitflip_dqn_noher"
    n = args.bits
    run = prepare_run(args, user_config(n, args.seed), policy='dqn')
    if not args.quiet:
        setup_logging()

    import torch

    from contexts import OnlineRLContext
    from middleware import (CkptSaver, EpisodeCollector, data_pusher, eps_greedy_handler, online_logger,
                            termination_checker)
    from middleware.her import HERLearner, goal_success_evaluator, goal_success_rate
    from pipeline import task
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.envs.goal_envs import BitFlipEnv, FlattenGoalObservation
    from pipeline.policy.common import vector_size
    from pipeline.run.precheck import compile_or_exit
    from pipeline.reward_model import HerRewardModel, NoRelabel
    from pipeline.run.record import RunRecorder

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = compile_or_exit(run.user_config, "dqn")
    make_env = lambda: FlattenGoalObservation(BitFlipEnv(n_bits=n))  # noqa: E731
    probe = make_env()
    obs_dim = vector_size(probe.observation_space, 'observation', 'DQN')
    policy = build_policy(cfg, n, obs_dim, args.seed)
    if run.play:
        return play_without_rendering(run.play, policy, make_env, args, "the bit-flipping env")
    collector_env = EnvManager(make_env, cfg.env.collector_env_num, seed=args.seed)
    evaluator_env = EnvManager(make_env, cfg.env.evaluator_env_num, seed=args.seed + 1000)
    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size)
    if args.no_her:
        relabel: Any = NoRelabel(episode_size=16, sample_per_episode=8, seed=args.seed)
    else:
        relabel = HerRewardModel.from_env(probe, strategy="future", k=args.k, episode_size=16,
                                          sample_per_episode=8, seed=args.seed)
    run_dir = run.create_dir()
    ckpt = CkptSaver(policy, run_dir, resume_from=run.resume, buffer=buffer_)
    run.begin(cfg, quiet=args.quiet)
    logger = online_logger(log_dir=os.path.join(run_dir, "log"), progress=not (args.quiet or args.no_progress),
                           total_env_step=args.max_env_step)

    recorder = RunRecorder()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        task.use(goal_success_evaluator(policy.eval_mode, evaluator_env, n_episode=args.eval_episodes,
                                        eval_freq=cfg.policy.eval.evaluator.eval_freq,
                                        stop_success=args.stop_success))
        task.use(eps_greedy_handler(cfg))
        task.use(EpisodeCollector(cfg, policy.collect_mode, collector_env))
        task.use(data_pusher(cfg, buffer_))
        task.use(HERLearner(cfg, policy.learn_mode, buffer_, relabel))
        task.use(termination_checker(max_env_step=args.max_env_step))
        task.use(ckpt)
        task.use(logger)
        task.use(recorder)
        for mw in [*(extra_middleware or []), *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)  # the context is renewed every step: this is the last one
    logger.close()
    success = goal_success_rate(policy.eval_mode, evaluator_env, args.eval_episodes)  # the trained policy
    collector_env.close()
    evaluator_env.close()
    result = recorder.summary(ctx, run_dir, interrupted, her=not args.no_her, bits=n, success_rate=success,
                              buffer_count=buffer_.count())
    print(f"bitflip {n} bits, {'DQN+HER' if result['her'] else 'DQN (no HER)'}: success rate {success:.2f} "
          f"after {ctx.env_step} env steps, {ctx.train_iter} train iterations ({result['wall_time']:.1f} s)")
    run.print_outputs(ckpt, quiet=args.quiet)
    return result


if __name__ == "__main__":
    run_script(main)
