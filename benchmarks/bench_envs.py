"""Env layer benchmark: rlpipe's collector on each backend next to the bare vector env it runs on,
and replay memory for Atari transitions.

Run: ``python benchmarks/bench_envs.py [--quick] [--skip-memory] [--skip-envs] [--game cartpole|pong] [--cnn]
[--rounds N]``.

Rows (8 envs, uniformly random actions, all in this one run):

- CartPole-v1 and Pong (``PongNoFrameskip-v4`` with rlpipe's Atari preprocessing; EnvPool's
  ``Pong-v5`` with the same settings): env steps per second of rlpipe's ``StepCollector`` (an
  ``EnvManager`` of each backend, a random policy, transitions built as for training) next to the
  bare vector env of the same kind stepping the same envs:

  - ``rlpipe sync`` / ``bare SyncVectorEnv``: every env in this process, stepped in turn;
  - ``rlpipe subprocess`` / ``bare AsyncVectorEnv``: the subprocess backend's default layout (one
    worker process per core, each stepping a group of consecutive envs; the layout is printed) next
    to gymnasium's ``AsyncVectorEnv`` (shared memory) with the same layout: as many workers, each
    running a ``SyncVectorEnv`` of its group;
  - ``rlpipe envpool`` / ``bare EnvPool``: EnvPool's C++ thread pool;
  - ``rlpipe subprocess+overlap``: the subprocess backend's default layout with
    ``StepCollector(..., overlap=True)``: the envs step in two halves (one per worker with the
    default two workers), this process computing one half's actions and transitions while the
    other half steps (``EnvManager.step_async`` / ``step_wait``);
  - ``rlpipe subprocess+local``: ``EnvManager(..., backend='subprocess', local_envs=N // cores)``:
    that many envs stepped in this process while one worker per remaining core steps the others
    (8 envs on 2 cores: 4 here, 4 in one worker).

  Targets: each rlpipe row >= 0.9x its bare row; on Pong ``rlpipe subprocess`` (and
  ``subprocess+overlap``, ``subprocess+local``) >= 1.6x ``rlpipe sync`` (on 2 free cores). The CPU column is each row's
  CPU time per env step (this process and its worker processes), which depends less on other load
  than the rates do.
- ``--cnn``: the Pong rows act with the Nature-DQN Q-network (torch, one thread) as
  ``examples/dqn_atari.py`` does, where choosing the actions costs about as much CPU as a step: the
  case overlapped stepping is for. No bare rows there.
- Replay memory for 100k Pong transitions (growth of this process's resident set size): ``FrameStorage``
  (each frame once) measured on 100k synthetic transitions with distinct frames (the worst case for
  sharing), next to the default layout (a plain ``DequeBuffer``: its columns hold two full 4-frame
  stacks per transition) measured on 2,000 transitions pushed and sampled as training does, and scaled.

Wall-clock rates with worker processes depend on what else runs on the machine: the load
average is printed with the results. Rounds are interleaved; each ratio is the median over rounds of
the two rows' ratio within a round (with the ratio of their best rounds next to it).
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import statistics
import sys
import time
from pathlib import Path
from functools import partial
from typing import Any, Callable, Dict, List, NamedTuple, Tuple, cast

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contexts import OnlineRLContext  # noqa: E402
from middleware import StepCollector  # noqa: E402
from pipeline.envs import EnvManager  # noqa: E402
from pipeline.envs.subprocess_backend import SubprocessBackend, default_workers  # noqa: E402

N_ENVS = 8
HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
HAVE_ENVPOOL = importlib.util.find_spec('envpool') is not None


class RandomPolicy:
    def __init__(self, n_actions: int, seed: int = 0) -> None:
        self.n = n_actions
        self.rng = np.random.default_rng(seed)

    def forward(self, obs: Any, **_: Any) -> np.ndarray:
        return self.rng.integers(0, self.n, len(obs))


class CNNPolicy:
    """Greedy actions of the Nature-DQN Q-network (``AtariQNetwork``, random weights, torch on one
    thread), as ``examples/dqn_atari.py`` acts: for rows where choosing actions costs about as much
    CPU as stepping the envs."""

    def __init__(self, n_actions: int) -> None:
        import torch
        from pipeline.policy.conv import AtariQNetwork
        torch.manual_seed(0)
        self.torch = torch
        self.net = AtariQNetwork(n_actions).eval()

    def forward(self, obs: Any, **_: Any) -> np.ndarray:
        with self.torch.no_grad():
            return self.net(self.torch.as_tensor(np.asarray(obs))).argmax(1).numpy()


def collector_runner(mgr: EnvManager, n_actions: int, overlap: bool = False,
                     policy: Callable[[int], Any] = RandomPolicy) -> Callable[[int], None]:
    """Run rlpipe's StepCollector for ``steps`` env steps, one step of every env per call, as the DQN
    examples collect (``n_sample`` = env count). Collecting 16 steps per call (PPO-style rollouts)
    keeps 16 steps of observations alive, which on Pong costs ~10 % more CPU per step in cache
    misses whatever the env layer: a bare loop keeping its observations as long would pay it too.
    ``overlap``: ``StepCollector(..., overlap=True)`` (two halves of the envs, one stepping in the
    workers while this process computes the other's actions and transitions)."""
    cfg = {'policy': {'collect': {'n_sample': N_ENVS}}}
    col = StepCollector(cfg, policy(n_actions), mgr, overlap=overlap)
    ctx = OnlineRLContext()

    def run(steps: int) -> None:
        end = ctx.env_step + steps
        while ctx.env_step < end:
            col(ctx)
    return run


class GroupFn:
    """One worker's share of the grouped bare baseline: a gymnasium ``SyncVectorEnv`` of ``k`` envs
    whose infos stay in the worker (``AsyncVectorEnv`` cannot merge a vector env's batched infos;
    rlpipe's workers send none either unless asked)."""

    def __init__(self, make: Callable[[], Any], k: int) -> None:
        self.make, self.k = make, k

    def __call__(self) -> Any:
        import gymnasium as gym

        class InfoFreeSyncVectorEnv(gym.vector.SyncVectorEnv):
            def reset(self, **kwargs: Any) -> Any:
                return super().reset(**kwargs)[0], {}

            def step(self, actions: Any) -> Any:
                return super().step(actions)[:4] + ({},)

        return InfoFreeSyncVectorEnv([self.make] * self.k)


def bare_runner(vec: Any, n_actions: int, envpool: bool = False, shape: tuple = (N_ENVS,)) -> Callable[[int], None]:
    """Step a bare vector env with random actions of ``shape`` (it resets finished envs itself)."""
    rng = np.random.default_rng(0)
    vec.reset(seed=0) if not envpool else vec.reset()
    all_ids = np.arange(N_ENVS, dtype=np.int32)

    def run(steps: int) -> None:
        for _ in range(steps // N_ENVS):
            a = rng.integers(0, n_actions, shape)
            if envpool:
                vec.step(a.astype(np.int32), all_ids)
            else:
                vec.step(a)
    return run


class Row(NamedTuple):
    run: Callable[[int], None]
    pids: List[int]  # worker processes, for their CPU time


def _cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` so far (Linux; 0 elsewhere)."""
    try:
        with open(f'/proc/{pid}/stat') as f:
            fields = f.read().rsplit(')', 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')
    except (OSError, ValueError, IndexError):
        return 0.0


def measure(rows: Dict[str, Row], steps: int, rounds: int) -> Tuple[Dict[str, List[float]], Dict[str, float]]:
    """Env steps/s of each row in each of ``rounds`` interleaved rounds of ``steps`` steps, and each
    row's CPU time per env step in µs (this process and its workers; less sensitive to other load)."""
    rates: Dict[str, List[float]] = {k: [] for k in rows}
    cpu: Dict[str, float] = {k: 0.0 for k in rows}
    for row in rows.values():
        row.run(N_ENVS * 8)  # warm up
    for _ in range(rounds):
        for k, row in rows.items():
            w0 = sum(_cpu_seconds(p) for p in row.pids)
            c0 = time.process_time()
            t0 = time.perf_counter()
            row.run(steps)
            rates[k].append(steps / (time.perf_counter() - t0))
            cpu[k] += time.process_time() - c0 + sum(_cpu_seconds(p) for p in row.pids) - w0
    return rates, {k: v / (steps * rounds) * 1e6 for k, v in cpu.items()}


def env_rows(game: str, cnn: bool = False) -> tuple:
    """(rows, closers) for one game: rlpipe on each backend and the matching bare vector envs.

    ``rlpipe subprocess`` runs the backend's default layout (one worker per core, each stepping a
    group of envs); ``bare AsyncVectorEnv`` is gymnasium's ``AsyncVectorEnv`` with the same layout:
    as many worker processes, each running a ``SyncVectorEnv`` of the same group of envs.
    ``cnn``: the rlpipe rows act with :class:`CNNPolicy`; no bare rows (they cannot run a policy)."""
    import gymnasium as gym
    from gymnasium.vector import AutoresetMode
    rows: Dict[str, Row] = {}
    closers: List[Any] = []
    if game == 'CartPole-v1':
        fn: Any = 'CartPole-v1'
        make: Any = partial(gym.make, 'CartPole-v1', disable_env_checker=True)  # as EnvManager makes it
        ep_task, ep_kwargs, n_act = 'CartPole-v1', {}, 2
    else:
        from pipeline.envs.atari import AtariEnvFn, envpool_atari_kwargs
        fn = AtariEnvFn('PongNoFrameskip-v4', training=True)
        make = fn
        ep_task, ep_kwargs, n_act = 'Pong-v5', envpool_atari_kwargs(True), 6
    pol: Callable[[int], Any] = CNNPolicy if cnn else RandomPolicy
    mgr = EnvManager(fn, N_ENVS, seed=0, backend='sync')
    closers.append(mgr)
    rows['rlpipe sync'] = Row(collector_runner(mgr, n_act, policy=pol), [])
    if not cnn:
        vec: Any = gym.vector.SyncVectorEnv([make] * N_ENVS)
        closers.append(vec)
        rows['bare SyncVectorEnv'] = Row(bare_runner(vec, n_act), [])
    mgr = EnvManager(fn, N_ENVS, seed=0, backend='subprocess')
    closers.append(mgr)
    layout = cast(SubprocessBackend, mgr._backend)
    rows['rlpipe subprocess'] = Row(collector_runner(mgr, n_act, policy=pol), [p.pid for p in layout._procs if p.pid is not None])
    if not cnn:
        vec = gym.vector.AsyncVectorEnv([GroupFn(make, layout.group_size)] * layout.workers, shared_memory=True,
                                        autoreset_mode=AutoresetMode.DISABLED)  # each group resets its own envs
        closers.append(vec)
        rows['bare AsyncVectorEnv'] = Row(bare_runner(vec, n_act, shape=(layout.workers, layout.group_size)),
                                          [p.pid for p in vec.processes])
    mgr = EnvManager(fn, N_ENVS, seed=0, backend='subprocess')
    closers.append(mgr)
    rows['rlpipe subprocess+overlap'] = Row(collector_runner(mgr, n_act, overlap=True, policy=pol),
                                            [p.pid for p in cast(SubprocessBackend, mgr._backend)._procs if p.pid is not None])
    local = N_ENVS // default_workers(N_ENVS) if default_workers(N_ENVS) > 1 else 0
    if local:
        mgr = EnvManager(fn, N_ENVS, seed=0, backend='subprocess', local_envs=local)
        closers.append(mgr)
        rows['rlpipe subprocess+local'] = Row(collector_runner(mgr, n_act, policy=pol),
                                              [p.pid for p in cast(SubprocessBackend, mgr._backend)._procs if p.pid is not None])
    if HAVE_ENVPOOL:
        import envpool
        mgr = EnvManager(ep_task, N_ENVS, seed=0, backend='envpool', env_kwargs=dict(ep_kwargs))
        closers.append(mgr)
        rows['rlpipe envpool'] = Row(collector_runner(mgr, n_act, policy=pol), [])
        if not cnn:
            pool = envpool.make_gymnasium(ep_task, num_envs=N_ENVS, batch_size=N_ENVS, seed=0, **ep_kwargs)
            closers.append(pool)
            rows['bare EnvPool'] = Row(bare_runner(pool, n_act, envpool=True), [])
    return rows, closers, f'{layout.workers} worker processes x {layout.group_size} envs'


def ratio(rates: Dict[str, List[float]], a: str, b: str) -> str:
    """``a / b``: the median over rounds of the two rows' ratio in the same round (rows that ran next
    to each other, so a change in the machine's load hits both), and the ratio of their best rounds."""
    paired = sorted(x / y for x, y in zip(rates[a], rates[b]))
    return f'{statistics.median(paired):.2f}x (best rounds: {max(rates[a]) / max(rates[b]):.2f}x)'


def bench_game(game: str, steps: int, rounds: int, cnn: bool = False) -> Dict[str, List[float]]:
    rows, closers, layout = env_rows(game, cnn)
    try:
        res, cpu = measure(rows, steps, rounds)
    finally:
        for c in closers:
            c.close()
    acting = 'actions from the Nature-DQN CNN (torch, 1 thread)' if cnn else 'random actions'
    print(f'\n{game}, {N_ENVS} envs, {acting} ({rounds} interleaved rounds of {steps} steps); subprocess '
          f'and bare AsyncVectorEnv: {layout}')
    print(f'  {"":25s} {"env steps/s":>11s} {"best":>10s} {"CPU us/step":>12s}')
    for k, v in res.items():
        print(f'  {k:25s} {statistics.median(v):11.0f} {max(v):10.0f} {cpu[k]:12.1f}')
    for kind, bare in (('sync', 'bare SyncVectorEnv'), ('subprocess', 'bare AsyncVectorEnv'),
                       ('envpool', 'bare EnvPool')):
        if f'rlpipe {kind}' in res and bare in res:
            print(f'  rlpipe {kind} / {bare}: {ratio(res, f"rlpipe {kind}", bare)} (target >= 0.9x)')
    target = ' (target >= 1.6x on 2 free cores)' if game != 'CartPole-v1' else ''
    print(f'  rlpipe subprocess / rlpipe sync: {ratio(res, "rlpipe subprocess", "rlpipe sync")}{target}')
    print(f'  rlpipe subprocess+overlap / rlpipe sync: '
          f'{ratio(res, "rlpipe subprocess+overlap", "rlpipe sync")}{target}')
    print(f'  rlpipe subprocess+overlap / rlpipe subprocess: '
          f'{ratio(res, "rlpipe subprocess+overlap", "rlpipe subprocess")}')
    if 'rlpipe subprocess+local' in res:
        print(f'  rlpipe subprocess+local / rlpipe sync: '
              f'{ratio(res, "rlpipe subprocess+local", "rlpipe sync")}{target}')
        print(f'  rlpipe subprocess+local / rlpipe subprocess: '
              f'{ratio(res, "rlpipe subprocess+local", "rlpipe subprocess")}')
    return res


def rss() -> int:
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * os.sysconf('SC_PAGE_SIZE')


def pong_like_transitions(n: int, seed: int = 0):
    """``n`` transitions of 8 interleaved envs with one new distinct 84x84 frame per step."""
    rng = np.random.default_rng(seed)
    stacks = [rng.integers(0, 256, (4, 84, 84), dtype=np.uint8) for _ in range(N_ENVS)]
    for i in range(n):
        e = i % N_ENVS
        obs = stacks[e]
        nxt = np.concatenate([obs[1:], rng.integers(0, 256, (1, 84, 84), dtype=np.uint8)])
        stacks[e] = nxt
        yield {'obs': obs, 'action': int(i % 6), 'reward': 0.0, 'next_obs': nxt, 'terminated': False,
               'truncated': False, 'env_id': e}


def bench_memory(n: int, n_naive: int) -> None:
    from pipeline.data import DequeBuffer
    from pipeline.data.frame_storage import FrameStorage
    gc.collect()
    r0 = rss()
    naive = DequeBuffer(n_naive, seed=0)
    for i, t in enumerate(pong_like_transitions(n_naive)):
        naive.push(t)
        if i >= 64 and i % N_ENVS == 0:
            naive.sample_batch(32)  # as training does: rows written, the items keep no arrays of their own
    naive.sample_batch(32)
    per_naive = (rss() - r0) / n_naive
    del naive
    gc.collect()
    r0 = rss()
    t0 = time.perf_counter()
    st = FrameStorage(n, seed=0)
    buf = DequeBuffer(n, seed=0, storage=st)
    for t in pong_like_transitions(n + 2 * N_ENVS):
        buf.push(t)
    push_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(100):
        buf.sample_batch(32)
    sample_ms = (time.perf_counter() - t0) * 10
    used = rss() - r0
    assert st.pool is not None  # made at the first push
    print('\nReplay memory, Pong transitions (obs/next_obs 4x84x84 uint8):')
    print(f'  default layout: {per_naive / 1e3:.1f} kB per transition (measured on {n_naive}, pushing and '
          f'sampling as training does) -> {per_naive * 1e5 / 1e9:.2f} GB for 100k: the buffer\'s columns '
          f'(obs and next_obs: 2 x 28.2 kB); a stored item keeps no arrays of its own once its row is written')
    print(f'  FrameStorage:   {used / 1e9:.3f} GB resident for {buf.count()} transitions '
          f'({st.pool.live} frames, {st.memory_bytes() / 1e9:.3f} GB in frames + columns); '
          f'{used / max(per_naive * buf.count(), 1):.2f}x the default layout')
    print(f'  FrameStorage push {buf.count() / push_s:.0f} transitions/s, sample_batch(32) {sample_ms:.2f} ms')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--quick', action='store_true', help='fewer steps and a 20k-transition buffer')
    ap.add_argument('--skip-memory', action='store_true')
    ap.add_argument('--skip-envs', action='store_true')
    ap.add_argument('--game', choices=['all', 'cartpole', 'pong'], default='all', help='env rows of one game only')
    ap.add_argument('--cnn', action='store_true',
                    help='Pong only: act with the Nature-DQN CNN (torch, 1 thread) instead of random actions, '
                         'as dqn_atari.py does; no bare rows')
    ap.add_argument('--rounds', type=int, default=None,
                    help='interleaved rounds per game (default 9 CartPole, 7 Pong; 3 with --quick): more rounds '
                         'steady the medians on a noisy machine')
    args = ap.parse_args()
    if args.cnn:
        import torch
        torch.set_num_threads(1)
    load0 = os.getloadavg()
    print(f'load average at start: {load0[0]:.1f} (1 min), {os.cpu_count()} cores; envpool: '
          f'{"installed" if HAVE_ENVPOOL else "not installed"}')
    if not args.skip_envs:
        if args.game != 'pong' and not args.cnn:
            bench_game('CartPole-v1', 2_000 if args.quick else 4_000, args.rounds or (3 if args.quick else 9))
        if args.game == 'cartpole':
            pass
        elif HAVE_ATARI:
            bench_game('Pong', 400 if args.quick else 800, args.rounds or (3 if args.quick else 7), cnn=args.cnn)
        else:
            print("\nPong skipped: pip install 'rlpipe[atari]'")
    if not args.skip_memory:
        bench_memory(20_000 if args.quick else 100_000, 2_000)
    print(f'\nload average at end: {os.getloadavg()[0]:.1f} (1 min)')


if __name__ == '__main__':
    main()
