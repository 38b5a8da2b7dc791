"""DQN on CartPole-v0 for exactly 10,000 env steps: the rlpipe pipeline vs a hand-written torch loop.

Both do DI-engine 0.5.3's default CartPole DQN work (see shared anchors): 8 collector envs, 8 env
steps per collect, 5 updates of batch 64 per collect once 64 transitions are stored (6,215 updates
in all), Adam 1e-3, discount 0.97, double-DQN target with MSE loss, truncation treated as terminal,
dueling 128-128-64 net, hard target update every 100 updates, FIFO buffer of 20,000 sampled
uniformly without replacement, eps 0.95 -> 0.1 exponentially over 10,000 env steps; no evaluation.

    python benchmarks/bench_dqn.py [--repeats 2] [--env-steps 10000] [--threads 1]

Runs are interleaved (baseline, pipeline, baseline, ...) in one process; the ratio of the best
times is printed (target: pipeline within 1.05x of the hand-written loop). Only the training
loop is timed (env and network construction are not).
"""
from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple, cast

import gymnasium as gym
import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ----------------------------------------------------------------------------- hand-written baseline
class QNet(nn.Module):
    def __init__(self, obs_dim: int, n_act: int) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(obs_dim, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(),
                                 nn.Linear(128, 64), nn.ReLU())
        self.adv = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, n_act))
        self.val = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.enc(x)
        a = self.adv(h)
        return self.val(h) + a - a.mean(-1, keepdim=True)


def run_baseline(env_steps: int = 10_000, seed: int = 0, env_id: str = 'CartPole-v0',
                 same_kernels: bool = False, device: Optional[str] = None) -> dict:
    """Run the loop for exactly ``env_steps`` env steps; return wall time and counters.

    ``same_kernels=False`` is torch's default Adam, what a hand-written loop usually has;
    ``same_kernels=True`` uses the Adam kernels rlpipe's learner picks (``kernel_kwargs``: fused on the
    CPU), isolating the framework's own cost.
    ``device``: where the networks and batches live (default auto, as rlpipe's).
    """
    from pipeline.device import resolve_device
    from pipeline.learner.optim import kernel_kwargs

    dev = resolve_device(device or 'auto')
    put = (lambda t: t) if dev.type == 'cpu' else (lambda t: t.to(dev, non_blocking=True))  # noqa: E731
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    n_env, batch, upc, gamma, cap = 8, 64, 5, 0.97, 20_000
    envs = [gym.make(env_id) for _ in range(n_env)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    space = envs[0].action_space
    assert isinstance(space, gym.spaces.Discrete), f'{env_id}: the loop needs discrete actions, got {space}'
    obs_dim, n_act = obs.shape[1], int(space.n)
    net, tgt = QNet(obs_dim, n_act).to(dev), QNet(obs_dim, n_act).to(dev)
    tgt.load_state_dict(net.state_dict())
    params = list(net.parameters())
    opt = torch.optim.Adam(params, lr=1e-3, **(kernel_kwargs(params) if same_kernels else {}))
    b_obs = np.zeros((cap, obs_dim), np.float32)
    b_next = np.zeros((cap, obs_dim), np.float32)
    b_act = np.zeros(cap, np.int64)
    b_rew = np.zeros(cap, np.float32)
    b_done = np.zeros(cap, np.float32)
    size = ptr = 0
    step = updates = 0
    t0, c0 = time.perf_counter(), time.process_time()
    while step < env_steps:
        eps = 0.1 + (0.95 - 0.1) * math.exp(-step / 10_000)
        with torch.no_grad():
            act = net(put(torch.from_numpy(obs))).argmax(-1).cpu().numpy()
        rnd = np.random.rand(n_env) < eps
        act = np.where(rnd, np.random.randint(0, n_act, n_env), act)
        next_obs = np.empty_like(obs)
        new_obs = np.empty_like(obs)
        for i, env in enumerate(envs):
            o, r, te, tr, _ = env.step(int(act[i]))
            next_obs[i] = o
            b_rew[ptr] = r
            b_done[ptr] = float(te or tr)
            if te or tr:
                o, _ = env.reset()
            new_obs[i] = o
            b_obs[ptr] = obs[i]
            b_act[ptr] = act[i]
            b_next[ptr] = next_obs[i]
            ptr = (ptr + 1) % cap
            size = min(size + 1, cap)
        obs = new_obs
        step += n_env
        if size < batch:
            continue
        for _ in range(upc):
            idx = np.fromiter(random.sample(range(size), batch), np.int64, batch)
            o = put(torch.from_numpy(b_obs[idx]))
            a = put(torch.from_numpy(b_act[idx]))
            r = put(torch.from_numpy(b_rew[idx]))
            o2 = put(torch.from_numpy(b_next[idx]))
            d = put(torch.from_numpy(b_done[idx]))
            q = net(o).gather(1, a[:, None]).squeeze(1)
            with torch.no_grad():
                a2 = net(o2).argmax(-1, keepdim=True)
                target = r + gamma * (1 - d) * tgt(o2).gather(1, a2).squeeze(1)
            loss = ((q - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            updates += 1
            if updates % 100 == 0:
                tgt.load_state_dict(net.state_dict())
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    for e in envs:
        e.close()
    return {'wall_time': wall, 'cpu_time': cpu, 'env_steps': step, 'updates': updates}


# ----------------------------------------------------------------------------- rlpipe pipeline
def run_pipeline(env_steps: int = 10_000, seed: int = 0, env_id: str = 'CartPole-v0', device: Optional[str] = None) -> dict:
    """The same work as ``run_baseline`` composed from rlpipe middleware."""
    from contexts import OnlineRLContext
    from middleware import OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler, termination_checker
    from pipeline import task
    from pipeline.config import compile_config
    from pipeline.data import DequeBuffer
    from pipeline.envs import EnvManager
    from pipeline.policy import DQNPolicy

    random.seed(seed)
    np.random.seed(seed)
    cfg = compile_config({'env': {'env_id': env_id},
                          'policy': {'model': {'obs_shape': 4, 'action_shape': 2}}})  # DI-engine defaults
    env = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=seed)
    policy = DQNPolicy(cfg, seed=seed, device=device)
    buffer_ = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=seed)
    with task.start(ctx=OnlineRLContext()):
        task.use(eps_greedy_handler(cfg))
        task.use(StepCollector(cfg, policy.collect_mode, env))
        task.use(data_pusher(cfg, buffer_))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buffer_, log_freq=0))
        task.use(termination_checker(max_env_step=env_steps))
        t0, c0 = time.perf_counter(), time.process_time()
        task.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        ctx = cast(OnlineRLContext, task.ctx)
    env.close()
    return {'wall_time': wall, 'cpu_time': cpu, 'env_steps': ctx.env_step, 'updates': ctx.train_iter}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--env-steps', type=int, default=10_000)
    ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--threads', type=int, default=1, help='torch intra-op threads for both (default 1)')
    ap.add_argument('--warmup-steps', type=int, default=400)
    from pipeline.run import add_device_flags  # no torch

    add_device_flags(ap)  # both loops run there (default auto)
    args = ap.parse_args(argv)
    dev = args.device
    torch.set_num_threads(args.threads)
    import warnings
    warnings.filterwarnings('ignore', category=DeprecationWarning)
    run_baseline(args.warmup_steps, device=dev)
    run_pipeline(args.warmup_steps, device=dev)
    runs: Tuple[Tuple[str, Callable[[int, int], dict]], ...] = (
        ('baseline', lambda steps, seed: run_baseline(steps, seed, device=dev)),
        ('baseline_kernels', lambda steps, seed: run_baseline(steps, seed, same_kernels=True, device=dev)),
        ('pipeline', lambda steps, seed: run_pipeline(steps, seed, device=dev)))
    wall: Dict[str, List[float]] = {name: [] for name, _ in runs}
    cpu: Dict[str, List[float]] = {name: [] for name, _ in runs}
    for r in range(args.repeats):
        for name, fn in runs:
            out = fn(args.env_steps, r)
            wall[name].append(out['wall_time'])
            cpu[name].append(out['cpu_time'])
            print(f'run {r}: {name:16s} wall {out["wall_time"]:7.2f} s  cpu {out["cpu_time"]:7.2f} s  '
                  f'env_steps {out["env_steps"]}  updates {out["updates"]}', flush=True)
    for label, res in (('wall', wall), ('cpu', cpu)):
        p = min(res['pipeline'])
        for base, what in (('baseline', "hand-written (torch's default Adam)"),
                           ('baseline_kernels', "hand-written with rlpipe's Adam kernels")):
            b = min(res[base])
            med = statistics.median(res['pipeline']) / statistics.median(res[base])
            print(f'{label} time, best of {args.repeats}: {what} {b:.2f} s, rlpipe pipeline {p:.2f} s -> '
                  f'ratio {p / b:.3f} (median ratio {med:.3f})')
    print(f'target: ratio <= 1.05 against the hand-written loop (torch threads {args.threads}; on a shared '
          f'machine the cpu-time ratio is the steadier one). The second ratio is the framework overhead alone.')


if __name__ == '__main__':
    main()
