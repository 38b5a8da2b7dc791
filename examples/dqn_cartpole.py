"""DQN on CartPole-v1: trains until the mean return over 10 evaluation episodes is >= 475.

    python examples/dqn_cartpole.py                       # train (uniform replay); prints its run folder
    python examples/dqn_cartpole.py --per                 # prioritized replay
    python examples/dqn_cartpole.py --resume cartpole_dqn/1/ckpt/final.pth.tar
    python examples/dqn_cartpole.py --play cartpole_dqn/1/ckpt/eval.pth.tar --video videos/

Each run writes to its own folder ``./cartpole_dqn/<n>/`` (``config.json``, ``ckpt/``, ``log/``;
``tensorboard --logdir cartpole_dqn``). It stops by itself when solved (or after --max-env-step env
steps). Ctrl-C saves ``final.pth.tar`` (with the replay buffer) and prints the command to resume.

Measured 2026-12-01 with ``python benchmarks/bench_cartpole_solve.py --budget 30000`` (one seed at a time,
torch threads 1, on a 2-core machine, load average 2.4-4.6 from other jobs). Env steps count evaluation
too: a solved 10-episode evaluation alone costs ~5,000; an evaluation stops as soon as a mean of 475 is
out of reach (CartPole-v1 pays at most 500 per episode), and those env steps are counted as well. The
anchor is Stable-Baselines3 2.9's DQN with RL-Zoo settings on this kind of machine: 14-15k env steps and
~85 s to the same criterion. SB3 also ran in the same benchmark (last column: its training env steps;
its evaluation env steps, in brackets, are not counted by RL-Zoo):

| seed | rlpipe env steps: training + evaluation = total | rlpipe wall / CPU | load | beats the anchor (env steps / wall) | SB3 in this run: training env steps (+ evaluation), wall / CPU |
|---|---|---|---|---|---|
| 0 | 3,696 + 5,009 = 8,705 | 12 s / 10 s | 3.4 | yes / yes | 7,000 (+ 15,214), 10 s / 9 s |
| 1 | 5,000 + 5,010 = 10,010 | 14 s / 13 s | 3.6 | yes / yes | 30,000 (+ 40,997), 35 s / 35 s |
| 2 | 5,272 + 5,009 = 10,281 | 13 s / 13 s | 2.7 | yes / yes | not solved in 30,208 (+ 46,553), 43 s / 38 s |
| 3 | 7,356 + 5,172 = 12,528 | 21 s / 20 s | 2.4 | yes / yes | 7,000 (+ 11,934), 9 s / 9 s |
| 4 | 7,676 + 5,111 = 12,787 | 25 s / 22 s | 3.0 | yes / yes | 26,000 (+ 37,957), 46 s / 34 s |

rlpipe's runs repeat exactly for a seed (same env steps; SB3's did not: seed 0 passed after 2,000
training env steps in an earlier run). Against SB3 in this run, rlpipe used fewer env steps on seeds 1, 2
and 4 even with its evaluation counted and SB3's not (with both counted, on every seed), and less wall
time on seeds 1, 2 and 4; on seeds 0 and 3 SB3's training needed 7,000 env steps and ~10 s.
With learning rate 1e-3 (the previous default) seeds 0-4 took 12,151 / 14,950 / 17,334 / 7,767 /
15,811 env steps; with 2e-3, 10,513 / 9,450 / 13,939 / 10,543 / 9,086.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any, List, Optional, Sequence

from pipeline.experiment import example_parser, node_print, prepare_run, run_pipeline, setup_logging  # no torch

# Settings that learn CartPole-v1 (measured in the table above, by benchmarks/bench_cartpole_solve.py):
# a small Q-net with LayerNorm (it keeps TD learning stable at this update rate and learning rate 2.5e-3),
# one update per env step (4 envs, 4 updates per pipeline step), a soft target update (theta 0.05) after every update,
# 3-step double-DQN returns with discount 0.99 bootstrapping through the 500-step time limit (a
# truncation is not a terminal) and a quick exploration decay (eps ~0.1 after 3,000 env steps).
USER_CONFIG = {
    'exp_name': 'cartpole_dqn',
    'env': {
        'env_id': 'CartPole-v1',
        'collector_env_num': 4,
        'evaluator_env_num': 1,     # episodes one after another: an evaluation stops as soon as 475 is out of reach
        'n_evaluator_episode': 10,
        'stop_value': 475,
    },
    'policy': {
        'discount_factor': 0.99,
        'nstep': 3,
        'model': {'encoder_hidden_size_list': [128, 128, 64], 'dueling': True, 'layer_norm': True},
        'learn': {
            'update_per_collect': 4,
            'batch_size': 64,
            'learning_rate': 2.5e-3,
            'target_update_type': 'soft',
            'target_theta': 0.05,
            'truncation_as_terminal': False,
            'grad_clip': 10.0,
            'learning_starts': 500,
        },
        'collect': {'n_sample': 4},
        'eval': {'evaluator': {'eval_freq': 500}},
        'other': {
            'eps': {'type': 'exp', 'start': 1.0, 'end': 0.05, 'decay': 1000},
            'replay_buffer': {'replay_buffer_size': 50000},
        },
    },
}

#: When to evaluate (cost, not criterion: solved means a complete 10-episode evaluation with mean >= 475).
#: At most every eval_freq train iterations (500 env steps), and only when each of the last
#: EVAL_COLLECT_WINDOW training episodes returned at least EVAL_MIN_COLLECT_RETURN -- or when
#: MAX_EVAL_GAP iterations (env steps) passed. An evaluation stops as soon as 475 is out of reach
#: (CartPole-v1 pays at most 500 per episode), so evaluating a policy that is not good yet costs a
#: few hundred env steps.
EVAL_MIN_COLLECT_RETURN: Optional[float] = 475.0
EVAL_COLLECT_WINDOW = 2
MAX_EVAL_GAP: Optional[int] = 5000


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
    from middleware.ckpt_handler import read_checkpoint
    torch.set_num_threads(args.threads)
    from middleware.ckpt_handler import CheckpointError
    try:
        for path in (run.resume, run.play):
            if path:
                read_checkpoint(path)  # a corrupt or foreign file fails now, before anything is built
    except CheckpointError as e:
        raise SystemExit(f'error: {e}') from None
    if run.play:
        return play(run.play, args)
    from pipeline.envs import EnvManager
    from pipeline.precheck import compile_or_exit, usage_error

    cfg = compile_or_exit(run.user_config, 'dqn')
    collector_env = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=cfg.seed)
    evaluator_env = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=cfg.seed + 10_000)
    from pipeline.policy import DQNPolicy
    from pipeline.policy.common import discrete_action_count

    cfg.policy.model.obs_shape = collector_env.observation_space.shape[0]
    try:
        cfg.policy.model.action_shape = discrete_action_count(collector_env.action_space, 'DQN')
    except ValueError as e:  # e.g. --set env.env_id=Pendulum-v1
        usage_error(f'error: {e}')
    policy = DQNPolicy(cfg, seed=cfg.seed)
    buffer_ = make_buffer(cfg)
    run.create_dir()  # only now: a start refused above leaves no run folder
    try:  # a checkpoint that does not fit this policy fails here, before the pipeline starts
        ckpt = CkptSaver(policy, run.dir, train_freq=1000, resume_from=run.resume,
                         buffer=None if args.no_save_buffer else buffer_, config=cfg, policy_type='dqn')
    except CheckpointError as e:
        raise SystemExit(f'error: {e}') from None
    run.begin(cfg)
    return train(cfg, args, run, policy, buffer_, ckpt, collector_env, evaluator_env, extra_middleware or [])


def make_buffer(cfg: Any) -> Any:
    from pipeline.data import DequeBuffer, PriorityExperienceReplay

    rb = cfg.policy.other.replay_buffer
    buffer_ = DequeBuffer(rb.replay_buffer_size, seed=cfg.seed)
    if rb.priority:
        buffer_.use(PriorityExperienceReplay(buffer_, IS_weight=rb.priority_IS_weight,
                                             priority_power_factor=rb.priority_power_factor,
                                             IS_weight_power_factor=rb.IS_weight_power_factor,
                                             IS_weight_anneal_train_iter=rb.IS_weight_anneal_train_iter))
    return buffer_


def train(cfg: Any, args: Any, run: Any, policy: Any, buffer_: Any, ckpt: Any, collector_env: Any,
          evaluator_env: Any, extra_middleware: List[Any]) -> int:
    from contexts import OnlineRLContext
    from middleware import (ContextExchanger, ModelExchanger, OffPolicyLearner, StepCollector, data_pusher,
                            eps_greedy_handler, interaction_evaluator, nstep_reward_enhancer, online_logger,
                            termination_checker)
    from pipeline import task

    logger = online_logger(log_dir=os.path.join(run.dir, 'log'), train_show_freq=100,
                           progress=not args.no_progress, total_env_step=args.max_env_step)
    t0 = time.perf_counter()
    with task.start(ctx=ckpt.restore(OnlineRLContext())):
        # Under `rlpipe run` every node has its own id, so the collectors explore differently seeded envs.
        collector_env.seed(cfg.seed + 1000 * task.router.node_id)
        evaluator = interaction_evaluator(cfg, policy.eval_mode, evaluator_env,
                                          max_episode_return='auto',  # 500 on CartPole-v1: stop a doomed evaluation
                                          # the screen reads this node's training episodes: none without collectors
                                          min_collect_return=EVAL_MIN_COLLECT_RETURN
                                          if task.has_role('collector') else None,
                                          max_eval_gap=MAX_EVAL_GAP, collect_window=EVAL_COLLECT_WINDOW)
        task.use(ContextExchanger())  # under `rlpipe run --parallel-workers N`; no-ops in one process
        task.use(ModelExchanger(policy.model))
        task.use(eps_greedy_handler(cfg))
        task.use(StepCollector(cfg, policy.collect_mode, collector_env))
        task.use(nstep_reward_enhancer(cfg))
        task.use(data_pusher(cfg, buffer_))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_))
        task.use(evaluator)  # after the learner: the weights it evaluates are the ones saved at the end
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
    print()
    node_print(f'{"solved" if solved else "NOT solved"}: last mean eval return {ctx.last_eval_value:.1f} '
          f'(stop value {cfg.env.stop_value}) after {ctx.env_step} training + {eval_steps} evaluation env steps, '
          f'{ctx.train_iter} train iters, {wall:.0f} s')
    run.print_paths(ckpt, __file__)
    return 0 if solved else 1


def play(path: str, args: Any) -> int:
    from pipeline.experiment import play_policy
    from pipeline.policy import build_policy_from_checkpoint

    pol = build_policy_from_checkpoint(path)
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
