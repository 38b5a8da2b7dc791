"""CPU per update of the Atari-100k agent against a bare torch loop of the same network, in one process.

    python benchmarks/bench_atari100k_update.py                 # 5 interleaved rounds of 200 updates each
    python benchmarks/bench_atari100k_update.py --rounds 3 --updates 100
    python benchmarks/bench_atari100k_update.py --agent drq_eps   # a lab variant's network (the DER encoder)

Rows (one torch thread, batch 32, the network of ``--agent`` (default: the table's agent, ``TABLE_AGENT`` in
``benchmarks/atari100k.py``; or one of the lab's ``benchmarks/experiments/atari100k_variants.py``), Adam, Huber loss, grad clip 10, double-DQN target with the target net
equal to the online net, as in DrQ(eps)):

- ``bare``: a hand-written loop on a batch already in memory: forward, one no-grad forward of the
  next observations, loss, backward, clip, Adam step;
- ``bare+shift``: the same plus the random shifts of obs and next obs (``random_shift``);
- ``rlpipe``: one round of ``OffPolicyLearner`` as ``benchmarks/atari100k.py`` runs it: sample 32
  n-step transitions from a ``FrameStorage`` replay buffer (stacks rebuilt from stored frames),
  ``RandomShift``, ``DQNLearner.update``;
- ``rlpipe, 2 next-obs forwards``: the same with the general double-DQN path (a forward pass of the
  online net and one of the target net on the next observations), i.e. without the shortcut taken
  when the target net is copied after every update;
- with ``--channels-last``, ``rlpipe, channels-last``: the ``rlpipe`` row with the network's convs in
  channels-last memory format (``AtariQNetwork(..., channels_last=True)``; Nature encoders only).

Prints process CPU milliseconds per update (median over rounds) and each row's ratio to ``bare``
within a round (median over rounds).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, cast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _batch(g: Any, n_actions: int) -> Dict[str, Any]:
    import torch
    return {'obs': torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8, generator=g),
            'next_obs': torch.randint(0, 256, (32, 4, 84, 84), dtype=torch.uint8, generator=g),
            'action': torch.randint(0, n_actions, (32,), generator=g), 'reward': torch.randn(32, generator=g),
            'terminated': torch.zeros(32, dtype=torch.bool), 'nstep': torch.full((32,), 10)}


def bare_step(net: Any, opt: Any, shift: bool, gen: Any) -> Callable[[Dict[str, Any]], None]:
    import torch
    import torch.nn.functional as F
    from pipeline.data.augment import random_shift

    def step(b: Dict[str, Any]) -> None:
        obs, nxt = b['obs'], b['next_obs']
        if shift:
            obs, nxt = random_shift(obs, 4, gen), random_shift(nxt, 4, gen)
        q = net(obs).gather(1, b['action'].unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            nq = net(nxt)
            target = b['reward'] + 0.99 ** 10 * (1.0 - b['terminated'].float()) * nq.max(1).values
        loss = F.smooth_l1_loss(q, target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 10.0)
        opt.step()
    return step


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--rounds', type=int, default=5)
    p.add_argument('--updates', type=int, default=200, help='updates per row per round')
    p.add_argument('--channels-last', action='store_true',
                   help="add a row: the rlpipe round with the network in channels-last memory format")
    p.add_argument('--agent', default=None, help="whose network: an agent of benchmarks/atari100k.py's AGENTS "
                                                 "(default: its TABLE_AGENT) or of benchmarks/experiments/"
                                                 "atari100k_variants.py's VARIANTS")
    from pipeline.run import add_device_flags  # no torch

    add_device_flags(p)  # every row runs there (default auto)
    args = p.parse_args(argv)

    import numpy as np
    import torch

    from contexts import OnlineRLContext
    from middleware import OffPolicyLearner
    from pipeline import task
    from pipeline.data import DequeBuffer
    from pipeline.data.augment import RandomShift
    from pipeline.data.frame_storage import FrameStorage
    from pipeline.policy import DQNPolicy
    from pipeline.learner.optim import kernel_kwargs

    from benchmarks.atari100k import AGENTS, TABLE_AGENT, dqn_config, q_network
    from benchmarks.experiments.atari100k_variants import VARIANTS

    AGENTS = dict(AGENTS, **VARIANTS)

    from pipeline.device import resolve_device, to_device

    dev = resolve_device(args.device or 'auto')
    torch.set_num_threads(1)
    n_actions = 6
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    batch = _batch(g, n_actions)
    bare_batch = to_device(batch, dev)  # the bare loops' batch is on the device already
    args.agent = args.agent or TABLE_AGENT
    if args.agent not in AGENTS:
        p.error(f'--agent {args.agent}: not an agent of benchmarks/atari100k.py or of the lab\'s variants '
                f'(one of {", ".join(sorted(AGENTS))})')
    agent = AGENTS[args.agent]
    if args.channels_last and agent['encoder'] != 'nature':
        p.error(f"--channels-last: --agent {args.agent}'s encoder is {agent['encoder']!r}; only the Nature encoders "
                "take channels_last")
    net = q_network(agent, n_actions).to(dev)
    opt = torch.optim.Adam(list(net.parameters()), lr=1e-4, eps=1.5e-4, **kernel_kwargs(list(net.parameters())))
    net2 = q_network(agent, n_actions).to(dev)
    opt2 = torch.optim.Adam(list(net2.parameters()), lr=1e-4, eps=1.5e-4, **kernel_kwargs(list(net2.parameters())))
    bare = bare_step(net, opt, False, g)
    bare_shift = bare_step(net2, opt2, True, g)

    cfg = dqn_config(dict(agent, learning_starts=32), seed=0)
    policy = DQNPolicy(cfg, model=q_network(agent, n_actions), seed=0, device=dev)
    buf = DequeBuffer(5000, seed=0, storage=FrameStorage(5000, seed=0))
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, (2100, 84, 84), dtype=np.uint8)
    for i in range(2000 - 14):
        buf.push({'obs': frames[i:i + 4], 'action': int(rng.integers(n_actions)), 'reward': float(rng.standard_normal()),
                  'next_obs': frames[i + 10:i + 14], 'terminated': False, 'truncated': False, 'nstep': 10},
                 {'env': 0})
    policy2 = DQNPolicy(cfg, model=q_network(agent, n_actions), seed=0, device=dev)
    policy2.learn_mode._target_is_online = False
    rows: Dict[str, List[float]] = {'bare': [], 'bare+shift': [], 'rlpipe': [], 'rlpipe, 2 next-obs forwards': []}
    with task.start(ctx=OnlineRLContext()):
        learner = OffPolicyLearner(cfg, policy.learn_mode, buf, batch_transform=RandomShift(4, seed=0), log_freq=0)
        learner2 = OffPolicyLearner(cfg, policy2.learn_mode, buf, batch_transform=RandomShift(4, seed=0), log_freq=0)
        ctx = cast(OnlineRLContext, task.ctx)

        def rl(_: Any) -> None:
            learner(ctx)

        def rl2(_: Any) -> None:
            learner2(ctx)

        runs = {'bare': bare, 'bare+shift': bare_shift, 'rlpipe': rl, 'rlpipe, 2 next-obs forwards': rl2}
        if args.channels_last:
            policy3 = DQNPolicy(cfg, model=q_network(dict(agent, channels_last=True), n_actions), seed=0, device=dev)
            learner3 = OffPolicyLearner(cfg, policy3.learn_mode, buf, batch_transform=RandomShift(4, seed=0),
                                        log_freq=0)

            def rl3(_: Any) -> None:
                learner3(ctx)

            runs['rlpipe, channels-last'] = rl3
            rows['rlpipe, channels-last'] = []
        for fn in runs.values():  # warm-up
            for _ in range(10):
                fn(bare_batch)
        for _ in range(args.rounds):
            for name, fn in runs.items():
                c0 = time.process_time()
                for _ in range(args.updates):
                    fn(bare_batch)
                if dev.type == 'cuda':
                    torch.cuda.synchronize(dev)
                rows[name].append((time.process_time() - c0) / args.updates * 1000)
    load = os.getloadavg()[0] if hasattr(os, 'getloadavg') else float('nan')
    print(f'# CPU per batch-32 update, the network of --agent {args.agent}, 1 torch thread; {args.rounds} rounds x '
          f'{args.updates} updates; load average {load:.1f}')
    print('| row | CPU ms per update (median) | ratio to bare (median over rounds) |')
    print('|---|---|---|')
    for name, ms in rows.items():
        ratio = statistics.median(m / b for m, b in zip(ms, rows['bare']))
        print(f'| {name} | {statistics.median(ms):.2f} | {ratio:.2f} |')
    return 0


if __name__ == '__main__':
    sys.exit(main())
