"""Pendulum-v1 PPO: rlpipe (examples/ppo_pendulum.py's settings) vs Stable-Baselines3 with the same
hyperparameters and env steps; final mean return over 10 deterministic episodes per seed.

    python benchmarks/bench_ppo.py --pendulum [--seeds 0 1 2] [--env-steps 100000]

SB3 gets the same normalisation (``VecNormalize`` of observations and rewards, gamma 0.9; evaluation
with the frozen observation statistics and raw rewards), 4 envs x 1,024 steps, minibatch 64, 10 epochs,
lambda 0.95, lr 1e-3, clip 0.2, no gSDE. ``bench_ppo.py`` hands in its rlpipe runner (this module does not import
it back).
"""
from __future__ import annotations

import copy
import statistics
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np


def run_rlpipe_pendulum(run_rlpipe: Callable[..., dict], env_steps: int, seed: int, device: Optional[str] = None) -> dict:
    """``run_rlpipe``: ``bench_ppo.run_rlpipe`` (the example's pipeline, timed), run with Pendulum's settings."""
    from examples.ppo_pendulum import USER_CONFIG
    from middleware import evaluate_episodes
    from pipeline.envs import EnvManager

    user: Dict[str, Any] = copy.deepcopy(USER_CONFIG)
    user['seed'] = seed
    user['policy']['learn']['total_env_steps'] = env_steps
    out = run_rlpipe(env_steps, seed, user=user, keep_policy=True, device=device)
    eval_env = EnvManager('Pendulum-v1', 5, seed=seed + 10_000)
    returns, _ = evaluate_episodes(out['policy'].eval_mode, eval_env, 10)
    out['final_return'] = float(returns.mean())
    return out


def run_sb3_pendulum(env_steps: int, seed: int, device: Optional[str] = None) -> dict:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.evaluation import evaluate_policy
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env('Pendulum-v1', n_envs=4, seed=seed), gamma=0.9)
    model = PPO('MlpPolicy', env, n_steps=1024, batch_size=64, gae_lambda=0.95, gamma=0.9, n_epochs=10,
                ent_coef=0.0, learning_rate=1e-3, clip_range=0.2, seed=seed,
                device=device or 'auto', verbose=0)
    t0 = time.perf_counter()
    model.learn(env_steps)
    wall = time.perf_counter() - t0
    eval_env = VecNormalize(make_vec_env('Pendulum-v1', n_envs=5, seed=seed + 10_000), training=False,
                            norm_reward=False, gamma=0.9)
    eval_env.obs_rms = copy.deepcopy(env.obs_rms)
    mean, _ = evaluate_policy(model, eval_env, n_eval_episodes=10, deterministic=True)
    return {'wall': wall, 'env_steps': model.num_timesteps, 'final_return': float(np.mean(mean))}


def pendulum(args, run_rlpipe: Callable[..., dict], sb3_installed: bool) -> None:
    """``bench_ppo.py --pendulum``: ``run_rlpipe`` is ``bench_ppo.run_rlpipe``; ``sb3_installed``: whether
    Stable-Baselines3 imports."""
    use_sb3 = sb3_installed and not args.no_sb3
    steps = args.env_steps
    print(f'Pendulum-v1 PPO, {steps} env steps, final mean return over 10 deterministic episodes:')
    ours: List[float] = []
    theirs: List[float] = []
    for seed in args.seeds:
        r = run_rlpipe_pendulum(run_rlpipe, steps, seed, getattr(args, 'device', None))
        ours.append(r['final_return'])
        line = f'  seed {seed}: rlpipe {r["final_return"]:8.1f} ({r["env_steps"]} env steps, {r["wall"]:.0f} s)'
        if use_sb3:
            s = run_sb3_pendulum(steps, seed, getattr(args, 'device', None))
            theirs.append(s['final_return'])
            line += f'   SB3 {s["final_return"]:8.1f} ({s["env_steps"]} env steps, {s["wall"]:.0f} s)'
        print(line, flush=True)
    print(f'  mean over seeds {args.seeds}: rlpipe {statistics.mean(ours):.1f} (per seed {np.round(ours, 1).tolist()})'
          + (f', SB3 {statistics.mean(theirs):.1f} (per seed {np.round(theirs, 1).tolist()})' if theirs else
             ', SB3 not installed'))
