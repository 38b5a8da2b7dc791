"""One Adam step with each of torch's kernels: the default, multi-tensor (foreach) and fused.

The learners take the kernels ``pipeline.learner.optim.kernel_kwargs`` picks (fused where the device has
them). This prints the time of one optimizer step for two network sizes of the examples, and each
kernel's ratio to torch's default, from one interleaved run:

    python benchmarks/bench_adam_kernels.py [--steps 3000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Dict, List

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.learner.optim import KernelKwargs, kernel_kwargs  # noqa: E402

NETS = {
    'DQN-sized MLP (4-128-128-64-64-2)': [4, 128, 128, 64, 64, 2],
    'SAC Hopper critic (14-256-256-1)': [14, 256, 256, 1],
}
KERNELS: Dict[str, KernelKwargs] = {'default': {}, 'foreach': {'foreach': True}, 'fused': {'fused': True}}


def mlp(sizes: List[int]) -> nn.Module:
    layers: List[nn.Module] = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def step_time(sizes: List[int], kernels: KernelKwargs, steps: int) -> float:
    """Seconds per ``optimizer.step()`` with fixed gradients (after 200 warm-up steps)."""
    net = mlp(sizes)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, **kernels)
    for p in net.parameters():
        p.grad = torch.randn_like(p)
    for _ in range(200):
        opt.step()
    t = time.perf_counter()
    for _ in range(steps):
        opt.step()
    return (time.perf_counter() - t) / steps


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--steps', type=int, default=3000)
    ap.add_argument('--repeats', type=int, default=5)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    probe = list(mlp([4, 2]).parameters())
    print(f'torch {torch.__version__}; the learners pick {kernel_kwargs(probe) or "the default"} on the CPU')
    for name, sizes in NETS.items():
        best = {k: float('inf') for k in KERNELS}
        for _ in range(args.repeats):  # interleaved: each repeat times every kernel once
            for k, kw in KERNELS.items():
                best[k] = min(best[k], step_time(sizes, kw, args.steps))
        row = '  '.join(f'{k} {best[k] * 1e6:6.1f} us ({best[k] / best["default"]:.2f}x)' for k in KERNELS)
        print(f'{name:42s} {row}')


if __name__ == '__main__':
    main()
