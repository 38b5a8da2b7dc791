"""DQN + random network distillation (RND) on DeepSea, a sparse-reward exploration chain.

    python examples/dqn_rnd.py            # DQN + RND intrinsic reward
    python examples/dqn_rnd.py --no-rnd   # plain DQN, same budget

DeepSea (size 20): the only reward is at the end of the one path that goes "right" at all 20 steps
(which action is "right" differs per cell), and each right step costs a little. Random or
eps-greedy exploration finds it with probability about 2**-20 per episode; the RND bonus leads
the agent to novel cells until it does. The run stops at the first episode that reaches the
treasure, or when the budget (default 1000 episodes) is spent, and prints which. How often each
variant finds it (``benchmarks/bench_her_rnd.py``): docs/benchmarks.md. A fast target network
(synced every 5 updates) matters: the novelty bonus must propagate back up the 20-step chain
before the predictor has learnt the new cells.

The learner is the standard ``OffPolicyLearner(cfg, policy.learn_mode, buffer_, reward_model=rnd)``:
each round fetches a batch, adds RND's normalised intrinsic reward to a new batch (the buffer keeps
the env reward), trains the RND predictor on that batch, then trains DQN.
Shares the flags of every training example (--exp-name, --seed, --set, --resume, --play, ...):
each run writes ./<exp>/<n>/ (config.json, ckpt/, log/). --max-env-step overrides --max-episodes.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

from pipeline.run import (example_parser, play_without_rendering, prepare_run,  # no torch
                          run_pipeline, run_script, setup_logging)


def make_config(size: int, seed: int) -> Any:
    from pipeline.config import compile_config  # lazy: --help stays fast

    return compile_config(user_config(size, seed), policy="dqn")


def user_config(size: int, seed: int) -> Dict[str, Any]:
    return (
        {
            "exp_name": f"deepsea{size}_dqn_rnd",
            "seed": seed,
            "env": {"env_id": "deepsea", "collector_env_num": 1, "evaluator_env_num": 1, "n_evaluator_episode": 1},
            "policy": {
                "discount_factor": 0.99,
                "learn": {"update_per_collect": 8, "batch_size": 64, "learning_rate": 1e-3,
                          "target_update_freq": 5, "truncation_as_terminal": False, "learning_starts": 64},
                "collect": {"n_sample": size},
                "other": {"eps": {"type": "linear", "start": 0.05, "end": 0.05, "decay": 1},
                          "replay_buffer": {"replay_buffer_size": 20000}},
            },
        }
    )


def build_parser():
    p = example_parser(__doc__, exp_name="deepsea_dqn_rnd", max_env_step=None)
    p.add_argument("--no-rnd", action="store_true", help="plain DQN (no intrinsic reward)")
    p.add_argument("--size", type=int, default=20)
    p.add_argument("--max-episodes", type=int, default=1000, help="budget (episodes of `size` steps)")
    p.add_argument("--intrinsic-weight", type=float, default=1.0)
    p.add_argument("--quiet", action="store_true", help="no log lines and no progress display")
    return p


def build_policy(cfg: Any, n: int, seed: int) -> Any:
    import torch
    from torch import nn

    from pipeline.policy import DQNPolicy

    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(n * n, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 2))
    return DQNPolicy(cfg, model=model, action_shape=2, seed=seed)


def main(argv: Optional[List[str]] = None, extra_middleware: Optional[List[Any]] = None) -> Dict[str, Any]:
    args = build_parser().parse_args(argv)
    if args.exp_name == "deepsea_dqn_rnd" and args.no_rnd:
        args.exp_name = "deepsea_dqn"
    n = args.size
    run = prepare_run(args, user_config(n, args.seed), policy='dqn')
    if not args.quiet:
        setup_logging()

    import torch

    from contexts import OnlineRLContext
    from middleware import (CkptSaver, OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler,
                            online_logger, termination_checker)
    from pipeline import task
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.envs.deepsea import DeepSeaEnv
    from pipeline.run.precheck import compile_or_exit
    from pipeline.reward_model import RndRewardModel
    from pipeline.run.record import RunRecorder

    torch.set_num_threads(args.threads)
    cfg = compile_or_exit(run.user_config, "dqn")
    policy = build_policy(cfg, n, args.seed)
    if run.play:
        return play_without_rendering(run.play, policy, lambda: DeepSeaEnv(size=n, seed=args.seed), args, "DeepSea")
    env = EnvManager(lambda: DeepSeaEnv(size=n, seed=args.seed), 1, seed=args.seed)
    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=args.seed)
    rnd = None if args.no_rnd else RndRewardModel(
        obs_dim=n * n, hidden=(64,), embed_dim=32, lr=1e-3, intrinsic_weight=args.intrinsic_weight,
        obs_norm=True, seed=args.seed)
    max_env_step = args.max_env_step if args.max_env_step is not None else args.max_episodes * n
    run_dir = run.create_dir()
    ckpt = CkptSaver(policy, run_dir, resume_from=run.resume, buffer=buffer_,
                     modules={"rnd": rnd} if rnd is not None else None)  # RND's predictor resumes too
    run.begin(cfg, quiet=args.quiet)
    logger = online_logger(log_dir=os.path.join(run_dir, "log"), progress=not (args.quiet or args.no_progress),
                           total_env_step=max_env_step)

    found: Dict[str, Any] = {"episode": None}

    def treasure_watch(ctx: Any) -> None:
        """Stop at the first transition that pays the treasure (extrinsic reward > 0.5)."""
        for t in ctx.transitions or ():
            if t["reward"] > 0.5 and found["episode"] is None:
                found["episode"] = ctx.env_episode
                task.finish = True

    recorder = RunRecorder()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        task.use(eps_greedy_handler(cfg))
        task.use(StepCollector(cfg, policy.collect_mode, env))
        task.use(treasure_watch)
        task.use(data_pusher(cfg, buffer_))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_, reward_model=rnd))
        task.use(termination_checker(max_env_step=max_env_step))
        task.use(ckpt)
        task.use(logger)
        task.use(recorder)
        for mw in [*(extra_middleware or []), *run.extra_middleware(cfg)]:
            task.use(mw)
        ctx, interrupted = run_pipeline(ckpt)
    logger.close()
    env.close()
    result = recorder.summary(ctx, run_dir, interrupted, rnd=not args.no_rnd, found=found["episode"] is not None,
                              found_at_episode=found["episode"], buffer_count=buffer_.count(),
                              rnd_train_iter=rnd.train_iter if rnd is not None else 0)
    what = "DQN+RND" if rnd is not None else "DQN"
    where = f"found the treasure in episode {found['episode']}" if result["found"] else "never found the treasure"
    print(f"DeepSea {n}, {what}, seed {args.seed}: {where} ({ctx.env_episode} episodes, {ctx.env_step} env steps, "
          f"{result['wall_time']:.1f} s)")
    run.print_outputs(ckpt, quiet=args.quiet)
    return result


if __name__ == "__main__":
    run_script(main)
