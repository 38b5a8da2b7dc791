"""A hand-written, single-file torch DQN on CartPole: the baseline for ``bench_dqn.py``.

It does exactly the work of DI-engine's default CartPole DQN (see shared anchors): 8 envs,
8 env steps per collect, 5 updates of batch 64 per collect once 64 transitions are stored, Adam
1e-3, discount 0.97, double-DQN target with MSE loss, truncation treated as terminal, dueling
128-128-64 net, hard target update every 100 updates, FIFO buffer of 20,000 sampled uniformly
without replacement, eps 0.95 -> 0.1 exponentially over 10,000 env steps.  No framework code.
"""
from __future__ import annotations

import math
import random
import time

import gymnasium as gym
import numpy as np
import torch
from torch import nn


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


def run_baseline(env_steps: int = 10_000, seed: int = 0, env_id: str = 'CartPole-v0') -> dict:
    """Run the loop for exactly ``env_steps`` env steps; return wall time and counters."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    n_env, batch, upc, gamma, cap = 8, 64, 5, 0.97, 20_000
    envs = [gym.make(env_id) for _ in range(n_env)]
    obs = np.stack([e.reset(seed=seed + i)[0] for i, e in enumerate(envs)]).astype(np.float32)
    obs_dim, n_act = obs.shape[1], envs[0].action_space.n
    net, tgt = QNet(obs_dim, n_act), QNet(obs_dim, n_act)
    tgt.load_state_dict(net.state_dict())
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    b_obs = np.zeros((cap, obs_dim), np.float32)
    b_next = np.zeros((cap, obs_dim), np.float32)
    b_act = np.zeros(cap, np.int64)
    b_rew = np.zeros(cap, np.float32)
    b_done = np.zeros(cap, np.float32)
    size = ptr = 0
    step = updates = 0
    t0 = time.perf_counter()
    while step < env_steps:
        eps = 0.1 + (0.95 - 0.1) * math.exp(-step / 10_000)
        with torch.no_grad():
            act = net(torch.from_numpy(obs)).argmax(-1).numpy()
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
            o = torch.from_numpy(b_obs[idx])
            a = torch.from_numpy(b_act[idx])
            r = torch.from_numpy(b_rew[idx])
            o2 = torch.from_numpy(b_next[idx])
            d = torch.from_numpy(b_done[idx])
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
    wall = time.perf_counter() - t0
    for e in envs:
        e.close()
    return {'wall_time': wall, 'env_steps': step, 'updates': updates}


if __name__ == '__main__':
    print(run_baseline())
