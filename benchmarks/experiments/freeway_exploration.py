"""Does exploration alone score on Freeway? Points collected by exploratory actions in the first agent steps.

    python benchmarks/experiments/freeway_exploration.py                       # plain eps-greedy and ez-greedy, seeds 0-9
    python benchmarks/experiments/freeway_exploration.py --exponents none 2.0 1.5 --steps 6600 --seeds 0 1 2

The table agent's exploration (``benchmarks/atari100k.py``) without its network: eps 1.0 for the first 1,600
agent steps, then linear to 0.01 over 5,000, on the training env of the benchmark (``ALE/Freeway-v5``,
frame skip 4, life loss and reward clipping as in training). A greedy step takes NOOP, the argmax of an
untrained network with equal outputs. ``--exponents none`` is plain eps-greedy; a number is ez-greedy
(:class:`pipeline.policy.dqn.DQNCollectMode` with that ``repeat_exponent``, ``repeat_max`` 100). Printed per
exponent: the points each seed collected and the agent step of its first point. A run of the table agent
learns to cross only after it has scored in training (benchmarks/experiments/NOTES.md).
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def table_eps(step: int, warmup: int = 1600, decay: int = 5000, end: float = 0.01) -> float:
    """The table agent's eps at agent step ``step``."""
    return 1.0 + (end - 1.0) * min(max(step - warmup, 0) / decay, 1.0)


def explore(seed: int, exponent: Optional[float], steps: int) -> Tuple[float, Optional[int]]:
    """(points, agent step of the first point or None) of ``steps`` exploratory steps on Freeway."""
    import numpy as np
    import torch

    from pipeline.envs.atari import AtariEnvFn
    from pipeline.policy.dqn import DQNCollectMode

    class Untrained(torch.nn.Module):  # equal Q-values: the greedy action is 0 (NOOP)
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.zeros(x.shape[0], 3) + 0 * self.w

    env = AtariEnvFn('ALE/Freeway-v5', training=True)()
    obs, _ = env.reset(seed=seed)
    mode = DQNCollectMode(Untrained(), 3, seed=seed, repeat_exponent=exponent, repeat_max=100)
    points, first = 0.0, None
    for t in range(steps):
        action = int(mode.forward(np.asarray(obs, np.float32)[None], eps=table_eps(t))[0])
        obs, reward, terminated, truncated, _ = env.step(action)
        if float(reward) > 0:
            points += float(reward)
            first = t if first is None else first
        if terminated or truncated:
            obs, _ = env.reset()
    env.close()
    return points, first


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--exponents', nargs='+', default=['none', '2.0'], help="'none' (eps-greedy) or zeta exponents > 1")
    p.add_argument('--seeds', nargs='+', type=int, default=list(range(10)))
    p.add_argument('--steps', type=int, default=6600, help='agent steps (6,600: until eps reaches 0.01)')
    args = p.parse_args(argv)
    for e in args.exponents:
        exponent = None if e.lower() == 'none' else float(e)
        res = [explore(s, exponent, args.steps) for s in args.seeds]
        name = 'eps-greedy' if exponent is None else f'ez-greedy, exponent {exponent}'
        print(f'{name}: points per seed {[p for p, _ in res]}; first point at agent step {[f for _, f in res]}; '
              f'{sum(p > 0 for p, _ in res)} of {len(res)} seeds scored', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
