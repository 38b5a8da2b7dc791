"""Env steps/s of the DQN CartPole example as 4 nodes (1 learner, 2 collectors, 1 evaluator) next to the
same example in one process, in the same run.

    python benchmarks/bench_distributed.py                 # 10,000 env steps each
    python benchmarks/bench_distributed.py --env-steps 4000 --repeat 2

Both runs are ``examples/dqn_cartpole.py`` unchanged (the single process with ``python``, the 4 nodes with
``rlpipe run --parallel-workers 4 --topology mesh``), with ``--max-env-step N`` and a stop value that cannot
be reached, so both run exactly to N env steps. Time is ``task.run`` on the learner (the single process's one
process), excluding imports and the nodes' connection set-up. The learner's env steps are those the
collectors delivered (counted once). Printed: env steps/s, train iterations/s, updates per env step, and the
distributed/single ratios. The machine's other load makes the numbers noisy: compare the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
OUT_ENV = 'RLPIPE_BENCH_OUT'


def timed_main() -> int:
    """Run the example's main with ``task.run`` timed; write ``<out>/node-<id>.json`` (used as --main)."""
    sys.path.insert(0, ROOT)
    from pipeline import task

    run = task.run
    record: Dict[str, object] = {}

    def timed_run(*args, **kwargs):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            run(*args, **kwargs)
        finally:
            record.update(seconds=time.perf_counter() - t0, cpu=time.process_time() - c0,
                          env_step=task.ctx.env_step, train_iter=task.ctx.train_iter,
                          roles=sorted(str(r) for r in task.roles), node=int(task.router.node_id))

    setattr(task, 'run', timed_run)  # the example's own task.run, timed
    from examples.dqn_cartpole import main
    try:
        rc = main()
    finally:
        out = os.environ[OUT_ENV]
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"node-{record.get('node', 0)}.json"), 'w') as f:
            json.dump(record, f)
    return rc


#: more arguments for the example (``--device X`` when given)
EXTRA_ARGV: list = []


def _example_args(n: int, exp: str) -> list:
    return ['--max-env-step', str(n), '--set', 'env.stop_value=1000000', '--exp-name', exp, *EXTRA_ARGV]


def _run(cmd: list, out: str, timeout: float) -> dict:
    env = dict(os.environ)
    env[OUT_ENV] = out
    env['PYTHONPATH'] = os.pathsep.join([ROOT, HERE, env.get('PYTHONPATH', '')])
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=out, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    wall = time.perf_counter() - t0
    records = {}
    for name in os.listdir(out):
        if name.startswith('node-') and name.endswith('.json'):
            with open(os.path.join(out, name)) as f:
                r = json.load(f)
            records[r.get('node', 0)] = r
    if not records:
        raise RuntimeError(f'the run wrote no results (exit code {p.returncode}):\n{p.stdout[-4000:]}')
    learner = next((r for r in records.values() if 'learner' in r['roles'] or not r['roles']), None)
    if learner is None:
        raise RuntimeError(f'no learner result:\n{p.stdout[-4000:]}')
    return dict(learner, wall=wall, nodes=len(records))


def single(n: int, timeout: float) -> dict:
    out = tempfile.mkdtemp(prefix='bench-single-')
    code = f'import sys; sys.argv = ["dqn_cartpole"] + {_example_args(n, out + "/exp")!r}; ' \
           'import bench_distributed as b; sys.exit(b.timed_main())'
    return _run([sys.executable, '-c', code], out, timeout)


def distributed(n: int, timeout: float) -> dict:
    out = tempfile.mkdtemp(prefix='bench-dist-')
    cmd = [sys.executable, '-m', 'pipeline.run.cli', 'run', '--package', HERE, '--main',
           'bench_distributed.timed_main', '--parallel-workers', '4', '--topology', 'mesh', '--startup-interval', '0',
           '--ports', str(40000 + os.getpid() % 20000), '--', *_example_args(n, out + '/exp')]
    return _run(cmd, out, timeout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--env-steps', type=int, default=10_000)
    ap.add_argument('--repeat', type=int, default=1, help='alternate single/distributed this many times')
    ap.add_argument('--timeout', type=float, default=600)
    sys.path.insert(0, ROOT)
    from pipeline.run import add_device_flags, device_argv  # no torch

    add_device_flags(ap)
    args = ap.parse_args()
    EXTRA_ARGV[:] = device_argv(args)
    print(f'DQN CartPole example, {args.env_steps} env steps per run; {os.cpu_count()} CPUs; '
          f'load average {os.getloadavg()[0]:.1f} at start')
    print(f'{"run":<22} {"env steps":>9} {"train it":>9} {"seconds":>8} {"env st/s":>9} {"iters/s":>8} '
          f'{"upd/step":>8} {"cpu s":>6}')
    rows: Dict[str, List[Dict[str, Any]]] = {'single': [], 'distributed': []}
    for _ in range(args.repeat):
        for name, fn in (('single', single), ('distributed', distributed)):
            r = fn(args.env_steps, args.timeout)
            rows[name].append(r)
            label = name if name == 'single' else f'4 nodes (learner)'
            print(f'{label:<22} {r["env_step"]:>9} {r["train_iter"]:>9} {r["seconds"]:>8.1f} '
                  f'{r["env_step"] / r["seconds"]:>9.0f} {r["train_iter"] / r["seconds"]:>8.0f} '
                  f'{r["train_iter"] / max(r["env_step"], 1):>8.3f} {r["cpu"]:>6.1f}', flush=True)
    best = {k: max(v, key=lambda r: r['env_step'] / r['seconds']) for k, v in rows.items()}
    s, d = best['single'], best['distributed']
    trained = (f'{(d["train_iter"] / d["seconds"]) / (s["train_iter"] / s["seconds"]):.2f}x' if s['train_iter']
               else 'none: the single run never trained (fewer env steps than learning starts after)')
    print(f'best of {args.repeat}: env steps/s 4 nodes / single = '
          f'{(d["env_step"] / d["seconds"]) / (s["env_step"] / s["seconds"]):.2f}x; '
          f'train iters/s 4 nodes / single = {trained}')


if __name__ == '__main__':
    main()
