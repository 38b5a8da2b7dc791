"""PPO on CartPole-v1: the rlpipe pipeline vs a hand-written single-file PPO loop (and SB3 when installed).

Settings (RL-Zoo's CartPole-v1 PPO): 8 envs x 32 steps = 256 rows per rollout, minibatch 256, 20 epochs,
gamma 0.98, GAE lambda 0.8, lr 1e-3 and clip range 0.2 decaying linearly to 0, entropy 0, value
coefficient 0.5, max grad norm 0.5, Adam eps 1e-5, [64, 64] tanh actor and critic.

    python benchmarks/bench_ppo.py                       # timing: 100k env steps each, interleaved
    python benchmarks/bench_ppo.py --solve --seeds 0 1 2 # env steps to mean eval return >= 475
    python benchmarks/bench_ppo.py --pendulum            # Pendulum-v1: rlpipe vs SB3, 3 seeds

Timing: exactly ``--env-steps`` env steps with no evaluation; the hand-written loop uses the same
network class and loss kernel (``ppo_loss``) but its own env loop, buffers, GAE, minibatch loop and
clipping. Runs are interleaved, the order reversed every other repeat (hand, rlpipe, SB3, SB3, rlpipe,
hand, ...), and the best times are compared (target: rlpipe <= 1.10x the hand-written loop; faster
than SB3). Wall and CPU time (``time.process_time``, the whole process; one torch thread) are both
printed: on a machine shared with other jobs the wall time depends on what else runs, the CPU time
much less.
Measured 2026-12-01 (``python benchmarks/bench_ppo.py``, 2 repeats, load average 8.7 on the shared
2-core CPU): hand-written loop 48.5 / 51.0 s wall, 21.3 / 22.8 s CPU; rlpipe 59.4 / 61.9 s wall (best
1.23x), 24.2 / 26.4 s CPU (best 1.14x; 1.06x and 1.24x per repeat); SB3 55.5 / 107.2 s wall (1.14x),
28.4 / 37.0 s CPU (1.33x). The 1.10x wall-time target is NOT met at this load. At 12,800 env steps
(load 4.4, 3 repeats) rlpipe's CPU time was 1.02x; cProfile runs of both paths (51,200 env steps)
show the same kernels and call counts (rlpipe's CPU time was 0.95x in that pair), and
``Learner.update`` alone was 1.03x, the collector 1.1x of the hand loop's collection (mostly the
env manager's per-step bookkeeping, ~12 us of ~75 us per vector step).
Solve: evaluation every 1,024 env steps over 10 deterministic episodes, stop at mean >= 475, for
rlpipe (the example's pipeline) and SB3 (``EvalCallback`` at the same frequency).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Dict, List, Optional, Tuple, cast

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.learner.optim import kernel_kwargs  # noqa: E402
from pipeline.policy.ppo import linear_schedule, ppo_loss  # noqa: E402
from pipeline.policy.ppo_model import ActorCritic, sample  # noqa: E402

ZOO = dict(n_envs=8, n_steps=32, batch_size=256, n_epochs=20, gamma=0.98, gae_lambda=0.8, lr=1e-3, clip=0.2)


# ----------------------------------------------------------------------------- hand-written baseline
#: ``--device``: where rlpipe's and Stable-Baselines3's runs train (None: auto for both); the hand-written loop
#: stays on the CPU (its reference figures)
DEVICE = None


def run_hand(env_steps: int, seed: int = 0, env_id: str = 'CartPole-v1', n_envs: int = 8, n_steps: int = 32,
             batch_size: int = 256, n_epochs: int = 20, gamma: float = 0.98, gae_lambda: float = 0.8,
             lr: float = 1e-3, clip: float = 0.2) -> dict:
    """A single-file PPO loop: plain gymnasium envs, numpy buffers, GAE, shuffled minibatches, Adam."""
    torch.manual_seed(seed)
    envs = [gym.make(env_id) for _ in range(n_envs)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    space = envs[0].action_space
    assert isinstance(space, gym.spaces.Discrete), f'{env_id}: the loop needs discrete actions, got {space}'
    model = ActorCritic(obs.shape[1], int(space.n))
    params = list(model.parameters())
    opt = torch.optim.Adam(params, lr=lr, eps=1e-5, **kernel_kwargs(params))  # as rlpipe's PPO
    gen = torch.Generator().manual_seed(seed)
    lr_at, clip_at = linear_schedule(lr, env_steps), linear_schedule(clip, env_steps)
    T, N = n_steps, n_envs
    steps, updates = 0, 0
    t0, c0 = time.perf_counter(), time.process_time()
    while steps < env_steps:
        b_obs = np.empty((T, N, obs.shape[1]), np.float32)
        b_act = np.empty((T, N), np.int64)
        b_logp, b_val, b_rew = (np.empty((T, N), np.float32) for _ in range(3))
        b_term, b_trunc = np.zeros((T, N), bool), np.zeros((T, N), bool)
        b_final = np.zeros((T, N), np.float32)
        for t in range(T):
            with torch.no_grad():
                logits, v = model(torch.from_numpy(obs))
                a, logp = sample(logits, None, gen)
            acts = a.numpy()
            b_obs[t], b_act[t], b_logp[t], b_val[t] = obs, acts, logp.numpy(), v.numpy()
            nxt = np.empty_like(obs)
            for i, e in enumerate(envs):
                o, r, te, tr, _ = e.step(int(acts[i]))
                b_rew[t, i], b_term[t, i], b_trunc[t, i] = r, te, tr
                if te or tr:
                    if tr and not te:
                        with torch.no_grad():
                            b_final[t, i] = model.value(torch.as_tensor(o, dtype=torch.float32)[None])[0]
                    o, _ = e.reset()
                nxt[i] = o
            obs = nxt
        steps += T * N
        with torch.no_grad():
            last = model.value(torch.from_numpy(obs)).numpy()
        # GAE(lambda); truncation bootstraps from the final observation's value
        adv = np.empty((T, N), np.float32)
        running = np.zeros(N, np.float32)
        for t in reversed(range(T)):
            nv = last if t == T - 1 else b_val[t + 1]
            nv = np.where(b_trunc[t], b_final[t], nv)
            delta = b_rew[t] + gamma * nv * ~b_term[t] - b_val[t]
            running = delta + gamma * gae_lambda * ~(b_term[t] | b_trunc[t]) * running
            adv[t] = running
        ret = adv + b_val
        rows = T * N
        data = {'obs': torch.from_numpy(b_obs.reshape(rows, -1)), 'action': torch.from_numpy(b_act.reshape(rows)),
                'logp': torch.from_numpy(b_logp.reshape(rows)), 'value': torch.from_numpy(b_val.reshape(rows)),
                'advantage': torch.from_numpy(adv.reshape(rows)), 'return': torch.from_numpy(ret.reshape(rows))}
        for g in opt.param_groups:
            g['lr'] = lr_at(steps)
        c = max(clip_at(steps), 1e-8)
        m = min(batch_size, rows)
        for _ in range(n_epochs):
            perm = torch.randperm(rows, generator=gen)
            for s in range(0, rows - m + 1, m):
                idx = perm[s:s + m]
                mb = {k: v[idx] for k, v in data.items()}
                pi_out, value = model(mb['obs'])
                out = ppo_loss(pi_out, value, mb, None, c)
                opt.zero_grad(set_to_none=True)
                out['total_loss'].backward()
                torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
                opt.step()
                updates += 1
                for k in ('policy_loss', 'value_loss', 'entropy', 'approx_kl', 'clip_fraction'):
                    float(out[k])  # the metrics a user looks at (SB3 reads them too)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {'wall': wall, 'cpu': cpu, 'env_steps': steps, 'updates': updates}


# ----------------------------------------------------------------------------- rlpipe
def run_rlpipe(env_steps: int, seed: int = 0, solve: bool = False, user: Optional[dict] = None,
               keep_policy: bool = False, device: Optional[str] = None) -> dict:
    from contexts import OnlineRLContext
    from middleware import (OnPolicyTrainer, RolloutCollector, gae_estimator, interaction_evaluator,
                            termination_checker)
    from pipeline import task
    from pipeline.envs import EnvManager
    from pipeline.policy.ppo import PPOPolicy, make_ppo_config

    cfg = make_ppo_config(user or {'seed': seed, 'policy': {'learn': {'total_env_steps': env_steps}}})
    env = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=seed, env_kwargs=cfg.env.env_kwargs)
    eval_env = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=seed + 10_000) if solve else None
    policy = PPOPolicy(cfg, env.observation_space, env.action_space, seed=seed, device=device or DEVICE)
    learner = policy.learn_mode
    evaluated_at = []

    def mark_eval(ctx):
        if ctx.eval_value > float('-inf'):
            evaluated_at.append(int(ctx.env_step))

    t0, c0 = time.perf_counter(), time.process_time()
    with task.start(ctx=OnlineRLContext()):
        if eval_env is not None:
            task.use(interaction_evaluator(cfg, policy.eval_mode, eval_env))
            task.use(mark_eval)  # the env steps trained on when an evaluation ran (it runs before collecting)
        task.use(RolloutCollector(cfg, policy.collect_mode, env))
        task.use(gae_estimator(cfg, policy.model))
        task.use(OnPolicyTrainer(cfg, learner, log_freq=0))
        task.use(termination_checker(max_env_step=env_steps))
        task.run()
        ctx = cast(OnlineRLContext, task.ctx)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    solved = solve and ctx.last_eval_value >= cfg.env.stop_value
    # solved: the env steps trained on when the solving evaluation ran (the step that evaluates still
    # collects one more rollout before the run ends; SB3's EvalCallback stops right after evaluating)
    steps = evaluated_at[-1] if solved and evaluated_at else ctx.env_step
    out = {'wall': wall, 'cpu': cpu, 'env_steps': steps, 'updates': learner.num_minibatch_updates_lifetime,
           'solved': solved, 'last_eval': ctx.last_eval_value}
    if keep_policy:
        out['policy'] = policy
    return out


# ----------------------------------------------------------------------------- Stable-Baselines3
def sb3_available() -> bool:
    try:
        import stable_baselines3  # noqa: F401
        return True
    except ImportError:
        return False


def run_sb3(env_steps: int, seed: int = 0, solve: bool = False) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
    from stable_baselines3.common.env_util import make_vec_env

    def lin(v):
        return lambda progress: v * progress

    env = make_vec_env('CartPole-v1', n_envs=8, seed=seed)
    model = PPO('MlpPolicy', env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                ent_coef=0.0, learning_rate=lin(1e-3), clip_range=lin(0.2), seed=seed, device=DEVICE or 'auto',
                verbose=0)
    cb = None
    if solve:
        eval_env = make_vec_env('CartPole-v1', n_envs=5, seed=seed + 10_000)
        cb = EvalCallback(eval_env, n_eval_episodes=10, eval_freq=1024 // 8, deterministic=True, verbose=0,
                          callback_on_new_best=StopTrainingOnRewardThreshold(475, verbose=0))
    t0, c0 = time.perf_counter(), time.process_time()
    model.learn(env_steps, callback=cb)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out = {'wall': wall, 'cpu': cpu, 'env_steps': model.num_timesteps}
    if cb is not None:
        out['solved'] = cb.best_mean_reward >= 475
        out['last_eval'] = cb.last_mean_reward
    return out


# ----------------------------------------------------------------------------- main
def timing(args) -> None:
    runners = [('hand-written loop', lambda: run_hand(args.env_steps, args.seed)),
               ('rlpipe pipeline', lambda: run_rlpipe(args.env_steps, args.seed))]
    if sb3_available() and not args.no_sb3:
        runners.append(('stable-baselines3', lambda: run_sb3(args.env_steps, args.seed)))
    else:
        print('stable-baselines3 not installed (pip install torch==2.13.0 stable-baselines3): SB3 row skipped')
    run_hand(512, args.seed)  # warm-up: first-call costs (lazy imports, allocator) paid outside the timings
    run_rlpipe(512, args.seed)
    walls: Dict[str, List[float]] = {name: [] for name, _ in runners}
    cpus: Dict[str, List[float]] = {name: [] for name, _ in runners}
    for r in range(args.repeats):
        for name, fn in (runners if r % 2 == 0 else runners[::-1]):  # alternate the order: no position bias
            res = fn()
            walls[name].append(res['wall'])
            cpus[name].append(res['cpu'])
            print(f'  repeat {r}: {name:18s} {res["wall"]:7.1f} s wall {res["cpu"]:7.1f} s CPU  '
                  f'({res["env_steps"]} env steps' + (f', {res["updates"]} updates)' if 'updates' in res else ')'),
                  flush=True)
    base, cbase = min(walls['hand-written loop']), min(cpus['hand-written loop'])
    print(f'\nPPO CartPole-v1, {args.env_steps} env steps, best of {args.repeats} (torch threads {args.threads}, '
          f'load average {os.getloadavg()[0]:.1f}):')
    for name, w in walls.items():
        c = cpus[name]
        print(f'  {name:18s} wall best {min(w):7.1f} s  median {statistics.median(w):7.1f} s  '
              f'ratio {min(w) / base:5.2f}x | CPU best {min(c):7.1f} s  ratio {min(c) / cbase:5.2f}x')


def solve(args) -> None:
    print(f'env steps to mean eval return >= 475 (10 episodes every 1,024 env steps), budget {args.env_steps}:')
    rows: List[Tuple[dict, Optional[dict]]] = []
    for seed in args.seeds:
        r = run_rlpipe(args.env_steps, seed, solve=True)
        line = f'  seed {seed}: rlpipe {r["env_steps"] if r["solved"] else "not solved"} ({r["wall"]:.0f} s)'
        s = None
        if sb3_available() and not args.no_sb3:
            s = run_sb3(args.env_steps, seed, solve=True)
            line += f'   SB3 {s["env_steps"] if s["solved"] else "not solved"} ({s["wall"]:.0f} s)'
        print(line, flush=True)
        rows.append((r, s))
    for name, i in (('rlpipe', 0), ('SB3', 1)):
        got = [run['env_steps'] for run in (row[i] for row in rows) if run is not None and run['solved']]
        if got:
            print(f'  {name}: median {statistics.median(got):.0f} env steps, solved {len(got)}/{len(rows)}')


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--env-steps', type=int, default=100_000)
    ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2])
    ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--solve', action='store_true', help='env steps to solve over --seeds instead of timing')
    ap.add_argument('--pendulum', action='store_true', help='Pendulum-v1 returns, rlpipe vs SB3, over --seeds')
    ap.add_argument('--no-sb3', action='store_true', help='skip Stable-Baselines3 even when installed')
    from pipeline.run import add_device_flags  # no torch

    add_device_flags(ap)
    args = ap.parse_args(argv)
    global DEVICE
    DEVICE = args.device
    torch.set_num_threads(args.threads)
    if args.pendulum:
        from benchmarks.bench_ppo_pendulum import pendulum
        pendulum(args, run_rlpipe, sb3_available())
    elif args.solve:
        solve(args)
    else:
        timing(args)


if __name__ == '__main__':
    main()
