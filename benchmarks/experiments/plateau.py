"""When did each stored run leave its plateau? The first agent step where the mean score of the last few training
games passes a threshold, for every stored full run of one game.

    python benchmarks/experiments/plateau.py                                   # RoadRunner, 2,000 over 10 games
    python benchmarks/experiments/plateau.py --game Freeway --threshold 10 --window 5

Reads the table agent's runs (``benchmarks/results/atari100k-<agent>/``) and the lab's
(``benchmarks/experiments/results/atari100k-<agent>/``): each result's ``curve.points`` are ``[agent step,
raw score]`` of its finished training games. Prints a row per run: agent, seed, final evaluation score and the
agent step of the crossing ('-' for a run that never crossed). The RoadRunner figures in
benchmarks/experiments/NOTES.md come from the default command.
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from benchmarks.report import load_atari  # noqa: E402  (after ROOT is on sys.path)

RESULT_DIRS = (os.path.join(ROOT, 'benchmarks', 'results'), os.path.join(ROOT, 'benchmarks', 'experiments', 'results'))


def crossing(points: Sequence[Sequence[float]], threshold: float, window: int) -> Optional[int]:
    """The agent step of the first training game after which the mean score of the last ``window`` games is above
    ``threshold`` (None if it never is). ``points``: ``[agent step, score]`` per finished game, in order."""
    if window < 1:
        raise ValueError(f'window must be >= 1, got {window}')
    scores = [float(p[1]) for p in points]
    for i in range(window, len(points) + 1):
        if sum(scores[i - window:i]) / window > threshold:
            return int(points[i - 1][0])
    return None


def runs(game: str, dirs: Sequence[str] = RESULT_DIRS) -> List[Dict[str, Any]]:
    """The full stored runs of ``game`` under ``dirs`` (those :func:`benchmarks.report.load_atari` keeps): in the
    order of ``dirs``, then by agent, then by seed; each with its agent (its directory's name) under
    ``'_agent_dir'``."""
    found = []
    for d in dirs:
        agents = sorted(os.path.basename(p)[len('atari100k-'):] for p in glob.glob(os.path.join(d, 'atari100k-*')))
        for agent in agents:
            here = [dict(r, _agent_dir=agent) for r in load_atari(d, agent)[0] if r['game'] == game]
            found += sorted(here, key=lambda r: r['seed'])
    return found


def table(game: str, threshold: float, window: int, dirs: Sequence[str] = RESULT_DIRS) -> List[Tuple[str, int, float,
                                                                                                      Optional[int]]]:
    """(agent, seed, final score, crossing step) of every full run of ``game``."""
    return [(r['_agent_dir'], int(r['seed']), float(r['eval']['mean']),
             crossing(r['curve']['points'], threshold, window)) for r in runs(game, dirs)]


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--game', default='RoadRunner')
    p.add_argument('--threshold', type=float, default=2000.0, help='mean training-game score to pass')
    p.add_argument('--window', type=int, default=10, help='training games in the mean')
    args = p.parse_args(argv)
    if args.window < 1:
        p.error(f'--window must be >= 1, got {args.window}')
    rows = table(args.game, args.threshold, args.window)
    if not rows:
        print(f'no full run of {args.game} is stored')
        return 1
    print(f'{args.game}: first agent step where the mean of the last {args.window} training games > {args.threshold:g}')
    print(f'{"agent":<28} {"seed":>4} {"final":>9} {"crossed at":>10}')
    for agent, seed, final, step in rows:
        print(f'{agent:<28} {seed:>4} {final:>9,.1f} {"-" if step is None else f"{step:,}":>10}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
