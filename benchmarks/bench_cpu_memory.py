"""Short Atari-100k runs with and without ``pipeline.cpu_memory.retain_freed_memory``: CPU per agent step and the
ratio, in paired rounds.

    python benchmarks/bench_cpu_memory.py                                   # 3 rounds of 3,000 agent steps, Boxing
    python benchmarks/bench_cpu_memory.py --agent drq_eps_narrow_same_bf16  # a lab variant
    python benchmarks/bench_cpu_memory.py --rounds 1 --steps 400            # a quick look

Each round runs ``benchmarks/atari100k.py`` (``benchmarks/experiments/atari100k_variants.py`` for a lab agent)
twice, one process after the other: with glibc's ``malloc`` thresholds raised (the default of the runs) and with
``--malloc-default``; the order alternates between rounds. Both runs of a round train the same seed for the same
steps, so they must end with the same weights (``weights_sha256``): the setting changes where temporaries live,
not a number. Prints, per round, the CPU milliseconds per agent step after the first update and the process's
minor page faults of each run, then the median ratio retained / default over the rounds. Run it with nothing else
busy: the default's cost depends on how glibc's dynamic thresholds move, which itself varies from run to run.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.atari100k import TABLE_AGENT  # noqa: E402  (after ROOT is on sys.path)

# in the child: the run, then its minor page faults on stderr's last line
_CHILD = ('import resource, runpy, sys; sys.argv = sys.argv[1:]\n'
          'try:\n    runpy.run_path(sys.argv[0], run_name="__main__")\n'
          'except SystemExit as e:\n    code = e.code\nelse:\n    code = 0\n'
          'print("minflt", resource.getrusage(resource.RUSAGE_SELF).ru_minflt, file=sys.stderr)\n'
          'sys.exit(code)\n')


def one_run(agent: str, game: str, seed: int, steps: int, default: bool, out: str) -> Dict[str, Any]:
    """One training run in a fresh process; its result's CPU per agent step, weights digest and page faults."""
    lab = agent != TABLE_AGENT
    script = os.path.join(ROOT, 'benchmarks', 'experiments', 'atari100k_variants.py') if lab else \
        os.path.join(ROOT, 'benchmarks', 'atari100k.py')
    cmd = [sys.executable, '-c', _CHILD, script, '--game', game, '--seed', str(seed), '--steps', str(steps),
           '--eval-episodes', '1', '--no-progress', '--fresh', '--agent', agent, '--out', out]
    if default:
        cmd.append('--malloc-default')
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit(f'error: the run failed ({" ".join(cmd[3:])}):\n{p.stderr[-2000:]}')
    faults = int(p.stderr.strip().splitlines()[-1].split()[1])
    with open(os.path.join(out, f'{game}_seed{seed}.json')) as f:
        r = json.load(f)
    phase = r['update_phase'] or {}
    return {'ms': phase.get('cpu_ms_per_step', float('nan')), 'sha': r['weights_sha256'], 'faults': faults,
            'retained': r.get('retain_freed_memory')}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0], epilog=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--agent', default=TABLE_AGENT, help="the table's agent (default) or a lab variant's name")
    p.add_argument('--game', default='Boxing')
    p.add_argument('--seed', type=int, default=9)
    p.add_argument('--steps', type=int, default=3000, help='agent steps per run (updates start at 1,600)')
    p.add_argument('--rounds', type=int, default=3)
    args = p.parse_args(argv)
    if args.steps <= 1600:
        p.error(f'--steps must be above 1600 (the first update), got {args.steps}')
    if args.rounds < 1:
        p.error(f'--rounds must be >= 1, got {args.rounds}')
    ratios = []
    print(f'{args.agent}, {args.game} seed {args.seed}, {args.steps} agent steps per run; CPU ms per agent step '
          f'after the first update (minor page faults)', flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            runs = {}
            for default in ((False, True) if i % 2 == 0 else (True, False)):
                runs[default] = one_run(args.agent, args.game, args.seed, args.steps, default,
                                        os.path.join(tmp, 'default' if default else 'retained'))
            kept, base = runs[False], runs[True]
            if kept['sha'] != base['sha']:
                raise SystemExit(f'error: round {i + 1}: the two runs ended with different weights')
            if kept['retained'] is not True:
                print('note: no glibc here, so both runs kept the default thresholds', flush=True)
            ratios.append(kept['ms'] / base['ms'])
            print(f'round {i + 1}: retained {kept["ms"]:.1f} ms ({kept["faults"]:,}), default {base["ms"]:.1f} ms '
                  f'({base["faults"]:,}), ratio {ratios[-1]:.2f}x; same weights', flush=True)
    print(f'retained / default, median over {len(ratios)} rounds: {statistics.median(ratios):.2f}x')
    return 0


if __name__ == '__main__':
    sys.exit(main())
