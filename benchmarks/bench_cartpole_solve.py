"""Env steps and time to solve CartPole-v1 (mean return >= 475 over 10 evaluation episodes):
``examples/dqn_cartpole.py`` with its default config next to Stable-Baselines3's tuned DQN (RL-Zoo
settings), both measured in this run, one seed at a time, torch threads 1.

    python benchmarks/bench_cartpole_solve.py                 # seeds 0-4, rlpipe and (if installed) SB3
    python benchmarks/bench_cartpole_solve.py --seeds 0 1 --no-sb3

Env steps count evaluation: rlpipe's figure is training + evaluation env steps. SB3 is evaluated as
RL-Zoo does (EvalCallback, 10 episodes every 1,000 env steps, stop at 475); its evaluation env steps are
counted and shown separately. The machine is shared: each row also shows the CPU time of the run and the
1-minute load average when it ended. SB3 (``pip install torch==2.13.0 stable-baselines3``) is a
benchmark-only dependency.

The summary is on docs/benchmarks.md, the per-seed table (seeds 0-9) in benchmarks/experiments/NOTES.md; this script
prints each seed's training + evaluation env steps, wall and CPU time. ``--set KEY=VALUE`` (repeatable)
passes a config override to the example, e.g. ``--set policy.learn.learning_rate=0.002``, to measure another
setting the same way.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from pipeline.run import add_device_flags, device_argv  # noqa: E402 - no torch

#: Stable-Baselines3 2.9's DQN with RL-Zoo settings on this kind of machine (/work/shared/anchors.md, 2026-11-30):
#: 14-15k env steps and ~85 s to a 10-episode mean >= 475. A seed "beats the anchor" with fewer env steps
#: (training + evaluation) than 14,000 and less wall time than 85 s.
ANCHOR_ENV_STEPS, ANCHOR_WALL = 14_000, 85.0

RLPIPE_CODE = r'''
import json, os, re, sys, time, io, contextlib
sys.path.insert(0, {root!r})
import torch
torch.set_num_threads(1)
sys.path.insert(0, os.path.join({root!r}, 'examples'))
import dqn_cartpole
t0, c0 = time.perf_counter(), time.process_time()
out = io.StringIO()
with contextlib.redirect_stdout(out):
    rc = dqn_cartpole.main(['--seed', str({seed}), '--no-progress', '--max-env-step', str({budget}),
                            '--exp-name', {exp!r}, *{sets!r}])
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
m = re.search(r'after (\d+) training \+ (\d+) evaluation env steps, (\d+) train iters', out.getvalue())
print(json.dumps(dict(solved=rc == 0, train=int(m.group(1)), eval=int(m.group(2)), iters=int(m.group(3)),
                      wall=wall, cpu=cpu)))
'''

SB3_CODE = r'''
import json, sys, time
import gymnasium as gym
import torch
torch.set_num_threads(1)
from stable_baselines3 import DQN
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold

class Count(gym.Wrapper):
    steps = 0
    def step(self, a):
        Count.steps += 1
        return self.env.step(a)

t0, c0 = time.perf_counter(), time.process_time()
env = gym.make('CartPole-v1')
eval_env = Count(gym.make('CartPole-v1'))
model = DQN('MlpPolicy', env, learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000,
            gamma=0.99, target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
            exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]), seed={seed}, verbose=0,
            device={device!r})
stop = StopTrainingOnRewardThreshold(reward_threshold=475, verbose=0)
cb = EvalCallback(eval_env, n_eval_episodes=10, eval_freq=1000, callback_on_new_best=stop, verbose=0)
model.learn(total_timesteps={budget}, callback=cb)
wall, cpu = time.perf_counter() - t0, time.process_time() - c0
print(json.dumps(dict(solved=cb.best_mean_reward >= 475, train=int(model.num_timesteps), eval=Count.steps,
                      wall=wall, cpu=cpu)))
'''


def run(code: str, timeout: float) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get('PYTHONPATH', '')]))
    p = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith('{')]
    if p.returncode not in (0,) or not lines:
        raise RuntimeError(f'run failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}')
    r = json.loads(lines[-1])
    r['load'] = os.getloadavg()[0]
    return r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--seeds', type=int, nargs='+', default=[0, 1, 2, 3, 4])
    ap.add_argument('--no-sb3', action='store_true')
    ap.add_argument('--budget', type=int, default=50_000, help='env-step budget of each run')
    ap.add_argument('--timeout', type=float, default=3600)
    ap.add_argument('--set', action='append', default=[], metavar='KEY=VALUE',
                    help='config override passed to examples/dqn_cartpole.py (repeatable)')
    add_device_flags(ap)  # both trainers: rlpipe's --device, SB3's device= (default auto for both)
    args = ap.parse_args()
    sb3 = not args.no_sb3
    if sb3:
        try:
            import stable_baselines3  # noqa: F401
        except ImportError:
            print('stable-baselines3 is not installed: rlpipe only (pip install torch==2.13.0 stable-baselines3)')
            sb3 = False
    out = tempfile.mkdtemp(prefix='bench-cartpole-')
    rows = []
    for seed in args.seeds:
        sets = [a for kv in args.set for a in ('--set', kv)] + device_argv(args)
        r = run(RLPIPE_CODE.format(root=ROOT, seed=seed, budget=args.budget, exp=os.path.join(out, 'rlpipe'),
                                   sets=sets), args.timeout)
        s = run(SB3_CODE.format(seed=seed, budget=args.budget, device=args.device or 'auto'), args.timeout) if sb3 else None
        rows.append((seed, r, s))
        print(json.dumps({'seed': seed, 'rlpipe': r, 'sb3': s}), flush=True)
    print(f"\nCartPole-v1 to mean eval return >= 475 over 10 episodes (one seed at a time, torch threads 1; "
          f"anchor: SB3 RL-Zoo DQN {ANCHOR_ENV_STEPS:,} env steps, {ANCHOR_WALL:.0f} s)")
    print(table(rows))


def table(rows: list) -> str:
    """The markdown table of the example's docstring: one row per (seed, rlpipe result, SB3 result or None)."""
    lines = ['| seed | rlpipe env steps: training + evaluation = total | rlpipe wall / CPU | load | '
             'beats the anchor (env steps / wall) | SB3 in this run: training env steps (+ evaluation), wall / CPU |',
             '|---|---|---|---|---|---|']
    for seed, r, s in rows:
        total = r['train'] + r['eval']
        rp = f"{r['train']:,} + {r['eval']:,} = {total:,}{'' if r['solved'] else ' (not solved)'}"
        beat = (f"{'yes' if r['solved'] and total < ANCHOR_ENV_STEPS else 'no'} / "
                f"{'yes' if r['solved'] and r['wall'] < ANCHOR_WALL else 'no'}")
        sp = (f"{s['train']:,} (+ {s['eval']:,}){'' if s['solved'] else ' not solved'}, "
              f"{s['wall']:.0f} s / {s['cpu']:.0f} s (load {s['load']:.1f})" if s else '-')
        lines.append(f"| {seed} | {rp} | {r['wall']:.0f} s / {r['cpu']:.0f} s | {r['load']:.1f} | {beat} | {sp} |")
    return '\n'.join(lines)


if __name__ == '__main__':
    main()
