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

Measured 2026-12-01, ``--budget 30000`` (load average 11-26 on 2 cores; the table is also in the
example's docstring):

| seed | rlpipe env steps: training + evaluation = total | rlpipe wall / CPU | SB3 training env steps (+ evaluation) | SB3 wall / CPU | rlpipe: fewer env steps / less wall | load (rlpipe / SB3) |
|---|---|---|---|---|---|---|
| 0 | 6,004 + 6,147 = 12,151 | 92 s / 28 s | 2,000 (+ 5,093) | 14 s / 6 s | no / no | 12 / 11 |
| 1 | 5,244 + 9,706 = 14,950 | 93 s / 32 s | 30,000 (+ 40,588) | 251 s / 76 s | yes / yes | 11 / 16 |
| 2 | 8,164 + 9,170 = 17,334 | 152 s / 43 s | 30,208 (+ 47,492) not solved | 230 s / 68 s | yes / yes | 15 / 12 |
| 3 | 2,728 + 5,039 = 7,767 | 52 s / 14 s | 7,000 (+ 11,699) | 53 s / 17 s | no / yes | 16 / 13 |
| 4 | 10,260 + 5,551 = 15,811 | 239 s / 58 s | 26,000 (+ 37,663) | 179 s / 54 s | yes / no | 26 / 14 |

The previous defaults (load 33-41) took 26,584 + 13,445 = 40,029 / 16,988 + 12,390 = 29,378 /
33,044 + 20,018 = 53,062 env steps on seeds 0-2.
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
                            '--exp-name', {exp!r}])
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
            exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]), seed={seed}, verbose=0)
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
        r = run(RLPIPE_CODE.format(root=ROOT, seed=seed, budget=args.budget, exp=os.path.join(out, 'rlpipe')),
                args.timeout)
        s = run(SB3_CODE.format(seed=seed, budget=args.budget), args.timeout) if sb3 else None
        rows.append((seed, r, s))
        print(json.dumps({'seed': seed, 'rlpipe': r, 'sb3': s}), flush=True)
    print('\nCartPole-v1 to mean eval return >= 475 over 10 episodes (one seed at a time, torch threads 1)')
    print('| seed | rlpipe env steps (train + eval = total) | rlpipe wall / CPU s | SB3 train env steps (+ eval) '
          '| SB3 wall / CPU s | fewer env steps / less wall | load |')
    print('|---|---|---|---|---|---|---|')
    for seed, r, s in rows:
        rp = f"{r['train']:,} + {r['eval']:,} = {r['train'] + r['eval']:,}{'' if r['solved'] else ' (not solved)'}"
        sp = (f"{s['train']:,} (+ {s['eval']:,}){'' if s['solved'] else ' (not solved)'}" if s else '-')
        st = f"{s['wall']:.0f} / {s['cpu']:.0f}" if s else '-'
        won = '-'
        if s:
            fewer = r['solved'] and (not s['solved'] or r['train'] + r['eval'] < s['train'])
            faster = r['solved'] and (not s['solved'] or r['wall'] < s['wall'])
            won = f"{'yes' if fewer else 'no'} / {'yes' if faster else 'no'}"
        load = f"{r['load']:.1f}" + (f" / {s['load']:.1f}" if s else '')
        print(f"| {seed} | {rp} | {r['wall']:.0f} / {r['cpu']:.0f} | {sp} | {st} | {won} | {load} |")

if __name__ == '__main__':
    main()
