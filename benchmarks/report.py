"""Render docs/benchmarks.md from its template and the stored Atari-100k and MuJoCo results.

    python benchmarks/report.py                      # -> docs/benchmarks.md and docs/img/*.png
    python benchmarks/report.py --results /tmp/res --page /tmp/page.md --img-dir /tmp/img

The page is ``benchmarks/page_template.md`` (hand-written prose: edit it there, not on the page) with three
marker lines replaced: ``<!-- report: atari100k -->``, ``<!-- report: atari100k-candidate -->`` and
``<!-- report: mujoco -->``.

Atari-100k: reads ``<results>/atari100k-<TABLE_AGENT>/*.json`` (``benchmarks/atari100k.py``; smoke runs and
runs shorter than 100k agent steps are skipped) and the published scores in ``benchmarks/anchors/atari100k.json``
(random, human, DER's per-game means, the per-run scores of DrQ(eps) and SPR). Writes a per-game table (mean
+- std over seeds, human-normalised score, the anchors beside it), an aggregate table over the games of
human-normalised scores: IQM, mean and optimality gap with 95% stratified bootstrap confidence intervals
(``rliable``, a fixed bootstrap seed so the page is the same every time), a line naming where this project is
below an anchor, and three pictures: the aggregate intervals, the performance profile and the learning curves.

Atari-100k candidates: the lab agents :data:`CANDIDATE_AGENTS` whose full runs are being collected to replace the
table's (``<lab results>/atari100k-<agent>/*.json``, default ``benchmarks/experiments/results``): per game and
candidate, its runs so far (mean +- std, seeds) beside the table agent's runs of the same seeds, and a last row
with both agents' mean HNS over those paired runs (per game, then over the games they cover).

MuJoCo: reads ``<results>/mujoco/*.json`` (``benchmarks/mujoco_vs_sb3.py``: fields ``algo``, ``env``, ``seed``,
``framework`` ('rlpipe' or 'sb3'), ``final_return``, ``wall``, ``cpu_s``; smoke runs skipped) and
``benchmarks/anchors/mujoco.json``. Writes one row per algorithm and env, rlpipe and SB3 side by side (mean
+- std, IQM with its 95% CI where a framework has 3 or more seeds, wall and CPU ratios), a line naming where
this project is below an anchor, and one picture of the learning curves.

Needs ``rliable`` and ``matplotlib`` (``pip install -e '.[bench]'``).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = os.path.join(ROOT, 'benchmarks', 'page_template.md')
ATARI_ANCHORS = os.path.join(ROOT, 'benchmarks', 'anchors', 'atari100k.json')
MUJOCO_ANCHORS = os.path.join(ROOT, 'benchmarks', 'anchors', 'mujoco.json')
LAB_RESULTS = os.path.join(ROOT, 'benchmarks', 'experiments', 'results')
MARKERS = {'atari100k': '<!-- report: atari100k -->', 'atari100k-candidate': '<!-- report: atari100k-candidate -->',
           'mujoco': '<!-- report: mujoco -->'}
#: The lab agents whose full runs are collected to replace the table's (their results: ``LAB_RESULTS``).
CANDIDATE_AGENTS = ('drq_eps_narrow_ez_warmup', 'drq_eps_narrow_same_bf16', 'drq_eps_narrow_same_bf16_ez_warmup')
#: Agent steps of an Atari-100k run; a result of fewer (``--steps``) is left out of the tables.
ATARI_STEPS = 100_000
#: The CPU minutes one Atari-100k run may take on one core (issue 47); the page counts the runs over it.
ATARI_CPU_BUDGET_MIN = 45
#: Bootstrap replications of the aggregate confidence intervals, and the seed of their resampling.
REPS = 10_000
BOOTSTRAP_SEED = 0
METRICS = ('IQM', 'mean', 'optimality gap')
#: Fewest seeds for which a per-env IQM and its interval are shown.
MIN_SEEDS_FOR_IQM = 3


# ----------------------------------------------------------------------------------------------- statistics

def aggregate_metrics(scores: np.ndarray) -> np.ndarray:
    """[IQM, mean, optimality gap] of a (runs x tasks) array of normalised scores (rliable's definitions:
    the mean of the middle 50 % of all scores; the mean; the mean shortfall below 1)."""
    from rliable import metrics

    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_mean(scores),
                     metrics.aggregate_optimality_gap(scores)])


def interval_estimates(score_dict: Dict[str, np.ndarray], func: Callable[[np.ndarray], np.ndarray] = aggregate_metrics,
                       reps: int = REPS, seed: int = BOOTSTRAP_SEED) -> Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``{name: (point, low, high)}``: ``func`` of each (runs x tasks) array and its 95 % stratified bootstrap
    confidence interval (runs resampled within each task, ``reps`` times, resampling seeded by ``seed``)."""
    from rliable import library as rly

    out = {}
    saved = np.random.get_state()
    try:
        for name, scores in score_dict.items():
            # rliable 1.2's StratifiedBootstrap draws its indices from numpy's global generator (its random_state
            # argument seeds only arch's): seed that one, and give it back as it was
            np.random.seed(seed)
            with warnings.catch_warnings():
                warnings.simplefilter('ignore', FutureWarning)  # arch's notice about random_state
                point, ci = rly.get_interval_estimates({name: scores}, func, reps=reps,
                                                       random_state=np.random.RandomState(seed))
            out[name] = (np.asarray(point[name]), np.asarray(ci[name][0]), np.asarray(ci[name][1]))
    finally:
        np.random.set_state(saved)
    return out


def _mean_std(xs: Sequence[float]) -> Tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    sd = (sum((x - m) ** 2 for x in xs) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return m, sd


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return '-'
    return f'{x:,.1f}' if abs(x) < 1000 else f'{x:,.0f}'


def _ci(point: float, lo: float, hi: float, fmt: Callable[[float], str] = lambda v: f'{v:.2f}') -> str:
    return f'{fmt(point)} [{fmt(lo)}, {fmt(hi)}]'


def _names(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ', '.join(items[:-1]) + ' and ' + items[-1]


# ----------------------------------------------------------------------------------------------- loading

def load_anchors(path: str = ATARI_ANCHORS) -> Dict[str, Any]:
    with open(path) as f:
        return json.load(f)


def human_normalised(score: Any, game: str, anchors: Dict[str, Any]) -> Any:
    """(score - random) / (human - random) with the anchors' random and human scores (arrays too)."""
    r, h = anchors['random']['scores'][game], anchors['human']['scores'][game]
    return (np.asarray(score, dtype=float) - r) / (h - r)


def table_agent() -> str:
    """The agent of the results table: ``TABLE_AGENT`` in ``benchmarks/atari100k.py``."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    from benchmarks.atari100k import TABLE_AGENT

    return TABLE_AGENT


def load_atari(results_dir: str, agent: str) -> Tuple[List[Dict[str, Any]], int]:
    """(``agent``'s full Atari-100k results under ``results_dir``, how many were skipped: smoke runs and runs
    shorter than :data:`ATARI_STEPS`)."""
    atari, skipped = [], 0
    for file in sorted(glob.glob(os.path.join(results_dir, f'atari100k-{agent}', '*.json'))):
        with open(file) as f:
            r = json.load(f)
        if r.get('smoke') or r.get('agent_steps', 0) < ATARI_STEPS:
            skipped += 1
            continue
        atari.append(r)
    return atari, skipped


def load_results(results_dir: str, agent: str) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], Dict[str, int]]:
    """(Atari-100k results of ``agent``, MuJoCo results, ``{'atari100k': n, 'mujoco': n}`` results skipped:
    smoke runs, and Atari runs shorter than :data:`ATARI_STEPS`)."""
    atari, skipped_atari = load_atari(results_dir, agent)
    skipped = {'atari100k': skipped_atari, 'mujoco': 0}
    mujoco = []
    for path in sorted(glob.glob(os.path.join(results_dir, 'mujoco', '*.json'))):
        with open(path) as f:
            r = json.load(f)
        if r.get('smoke'):
            skipped['mujoco'] += 1
            continue
        missing = [k for k in ('algo', 'env', 'seed', 'framework', 'final_return', 'wall') if k not in r]
        if missing:
            raise ValueError(f'{path}: a MuJoCo result needs the fields {missing}')
        mujoco.append(r)
    return atari, mujoco, skipped


def atari_scores(results: List[Dict[str, Any]], anchors: Dict[str, Any]) -> Tuple[Dict[str, np.ndarray], List[str]]:
    """(``{agent: (runs x games) human-normalised scores}``, the games): this project's runs as 'rlpipe' and
    every anchor with per-run scores, over the games every one of them has. rlpipe's runs per game are
    truncated to the fewest any game has (the bootstrap needs the same number of runs in every game)."""
    by_game: Dict[str, List[float]] = {}
    for r in sorted(results, key=lambda r: r['seed']):
        by_game.setdefault(r['game'], []).append(float(r['eval']['mean']))
    games = [g for g in anchors['games'] if g in by_game]
    n = min(len(by_game[g]) for g in games) if games else 0
    out = {'rlpipe': np.array([[human_normalised(by_game[g][i], g, anchors) for g in games] for i in range(n)])}
    for name, a in anchors['agents'].items():
        if 'runs' in a:
            out[name] = np.stack([human_normalised(a['runs'][g], g, anchors) for g in games], axis=1)
    return out, games


# ----------------------------------------------------------------------------------------------- plots

def _plt() -> Any:
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt
    return plt


def plot_intervals(est: Dict[str, Tuple[np.ndarray, np.ndarray, np.ndarray]], extra: Dict[str, float], path: str) -> None:
    """Aggregate intervals: one panel per metric, one row per agent (a bar for the 95 % CI, a tick for the
    point); ``extra``: agents with a mean only (a point on the mean panel)."""
    plt = _plt()
    names = list(est) + [n for n in extra if n not in est]
    fig, axes = plt.subplots(1, 3, figsize=(9, 0.45 * len(names) + 1.2), dpi=100, sharey=True)
    for j, (ax, metric) in enumerate(zip(axes, METRICS)):
        for i, name in enumerate(names):
            color = f'C{i}'
            if name in est:
                p, lo, hi = (v[j] for v in est[name])
                ax.barh(i, hi - lo, left=lo, height=0.6, color=color, alpha=0.75)
                ax.vlines(p, i - 0.3, i + 0.3, color='black', lw=1.5)
            elif metric == 'mean':
                ax.plot([extra[name]], [i], 'D', color=color)
        ax.set_title(metric)
        ax.set_xlabel('human-normalised score')
        ax.grid(axis='x', alpha=0.3)
    axes[0].set_yticks(range(len(names)))
    axes[0].set_yticklabels(names)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_profile(scores: Dict[str, np.ndarray], path: str, reps: int = 2000) -> None:
    """Performance profile: the fraction of runs (all games) above each human-normalised score tau, with
    its 95 % stratified bootstrap band."""
    plt = _plt()
    taus = np.linspace(0.0, 2.0, 81)

    def profile(x: np.ndarray) -> np.ndarray:
        return (x.reshape(-1)[:, None] > taus[None, :]).mean(axis=0)

    est = interval_estimates(scores, profile, reps=reps)
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    for i, (name, (p, lo, hi)) in enumerate(est.items()):
        ax.plot(taus, p, color=f'C{i}', lw=1.5, label=f'{name} ({scores[name].shape[0]} runs per game)')
        ax.fill_between(taus, lo, hi, color=f'C{i}', alpha=0.15)
    ax.set_xlabel('human-normalised score tau')
    ax.set_ylabel('fraction of runs with score > tau')
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _smooth(ys: List[float], k: int = 10) -> List[float]:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= k:
            acc -= ys[i - k]
        out.append(acc / min(i + 1, k))
    return out


def plot_atari_curves(results: List[Dict[str, Any]], anchors: Dict[str, Any], path: str) -> None:
    """Learning curves, one panel per game: each seed's training-game raw scores (mean of the last 10
    games) vs agent steps, with the random, human and DER lines."""
    plt = _plt()
    games = [g for g in anchors['games'] if any(r['game'] == g for r in results)]
    games += sorted({r['game'] for r in results} - set(games))
    cols = min(3, len(games))
    rows = -(-len(games) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.6 * rows), dpi=100, squeeze=False)
    for ax in axes.flat[len(games):]:
        ax.set_visible(False)
    for ax, game in zip(axes.flat, games):
        for r in sorted((r for r in results if r['game'] == game), key=lambda r: r['seed']):
            pts = r['curve']['points']
            if pts:
                ax.plot([p[0] for p in pts], _smooth([p[1] for p in pts]), lw=1.0, label=f'seed {r["seed"]}')
        lines = [('random', anchors['random']['scores'], ':'), ('human', anchors['human']['scores'], '--'),
                 ('DER', anchors['agents'].get('DER', {}).get('mean', {}), '-.')]
        for label, scores, style in lines:
            if game in scores:
                ax.axhline(scores[game], ls=style, color='gray', lw=0.9, label=label)
        ax.set_title(game)
        ax.set_xlabel('agent steps')
        ax.set_ylabel('raw score')
    axes[0][0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_mujoco_curves(results: List[Dict[str, Any]], path: str) -> bool:
    """Learning curves, one panel per algorithm and env: each run's evaluation returns vs env steps, rlpipe
    solid, SB3 dashed. False (nothing drawn) when no run has a curve."""
    groups: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for r in results:
        if (r.get('curve') or {}).get('points'):
            groups.setdefault((r['algo'], r['env']), []).append(r)
    if not groups:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups), 3.0), dpi=100, squeeze=False)
    for ax, ((algo, env), runs) in zip(axes[0], sorted(groups.items())):
        for r in sorted(runs, key=lambda r: (r['framework'], r['seed'])):
            pts = r['curve']['points']
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.0, ls='-' if r['framework'] == 'rlpipe' else '--',
                    color=f'C{r["seed"]}', label=f'{r["framework"]} seed {r["seed"]}')
        ax.set_title(f'{algo.upper()} {env}')
        ax.set_xlabel('env steps')
        ax.legend(fontsize=6)
    axes[0][0].set_ylabel('evaluation return')
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


# ----------------------------------------------------------------------------------------------- sections

def atari_section(results: List[Dict[str, Any]], skipped: int, agent: str, anchors: Dict[str, Any],
                  img_dir: str, img_rel: str, reps: int = REPS) -> List[str]:
    """Markdown lines of the Atari-100k results (tables, the below-an-anchor line, pictures)."""
    if not results:
        return [f'No Atari-100k result is stored yet (`benchmarks/results/atari100k-{agent}/` holds none'
                + (f'; {skipped} smoke or short result(s) skipped' if skipped else '') + ').']
    agents = anchors['agents']

    def anchor_mean(name: str, game: str) -> Optional[float]:
        a = agents[name]
        if 'runs' in a:
            return float(np.mean(a['runs'][game])) if game in a['runs'] else None
        return a['mean'].get(game)

    by_game: Dict[str, List[Dict[str, Any]]] = {}
    for r in results:
        by_game.setdefault(r['game'], []).append(r)
    order = [g for g in anchors['games'] if g in by_game] + sorted(set(by_game) - set(anchors['games']))
    lines = ['| game | rlpipe: mean +- std (seeds) | HNS | random | human | ' + ' | '.join(agents) + ' |',
             '|---|---|---|---|---|' + '---|' * len(agents)]
    below: Dict[str, List[str]] = {name: [] for name in agents}
    for game in order:
        m, sd = _mean_std([float(r['eval']['mean']) for r in by_game[game]])
        known = game in anchors['games']
        cells = [_fmt(anchors['random']['scores'][game]), _fmt(anchors['human']['scores'][game])] if known else ['-', '-']
        for name in agents:
            v = anchor_mean(name, game) if known else None
            cells.append(_fmt(v))
            if v is not None and m < v:
                below[name].append(game)
        hns = f'{float(human_normalised(m, game, anchors)):.2f}' if known else '-'
        lines.append(f'| {game} | {_fmt(m)} +- {_fmt(sd)} ({len(by_game[game])}) | {hns} | ' + ' | '.join(cells) + ' |')
    walls = [float(r['wall_s']) / 60 for r in results]
    cpu_min = [float(r['cpu_s']) / 60 for r in results if 'cpu_s' in r]
    over = sum(c > ATARI_CPU_BUDGET_MIN for c in cpu_min)
    cpu = [r['update_phase']['cpu_ms_per_step'] for r in results if r.get('update_phase')]
    lines += ['', f'Wall time per run {min(walls):.0f}-{max(walls):.0f} min'
              + (f', CPU time {min(cpu_min):.0f}-{max(cpu_min):.0f} min ({over} of {len(cpu_min)} runs over the '
                 f'{ATARI_CPU_BUDGET_MIN}-min budget)' if cpu_min else '')
              + (f'; CPU per agent step after the first update {min(cpu):.0f}-{max(cpu):.0f} ms' if cpu else '')
              + f'. Anchors: {_names([n + (" (100 runs per game)" if "runs" in agents[n] else " (published means)") for n in agents])}.']

    scores, games = atari_scores(results, anchors)
    est = interval_estimates(scores, reps=reps)
    means_only = {n: float(np.mean([human_normalised(agents[n]['mean'][g], g, anchors) for g in games]))
                  for n, a in agents.items() if 'runs' not in a and all(g in a['mean'] for g in games)}
    lines += ['', f'Over the {len(games)} games, human-normalised, 95 % stratified bootstrap CIs ({reps:,} '
              'resamples, rliable):', '',
              '| agent | runs per game | IQM | mean | optimality gap |', '|---|---|---|---|---|']
    for name, (p, lo, hi) in est.items():
        lines.append(f'| {name} | {scores[name].shape[0]} | ' + ' | '.join(_ci(p[j], lo[j], hi[j]) for j in range(3)) + ' |')
    for name, v in means_only.items():
        lines.append(f'| {name} | published means | - | {v:.2f} | - |')

    ours = est['rlpipe']
    worse = [f'{n}\'s {_ci(p[0], lo[0], hi[0])}' for n, (p, lo, hi) in est.items() if n != 'rlpipe' and p[0] > ours[0][0]]
    text = ['**Where rlpipe is below an anchor.**']
    if worse:
        overlap = [n for n, (p, lo, hi) in est.items() if n != 'rlpipe' and p[0] > ours[0][0] and lo[0] <= ours[2][0]]
        text.append(f'IQM {_ci(ours[0][0], ours[1][0], ours[2][0])} is below {_names(worse)}'
                    + (f' (the intervals overlap for {_names(overlap)})' if overlap else '') + '.')
    worse_mean = [n for n, v in means_only.items() if v > ours[0][1]]
    if worse_mean:
        text.append(f'Mean HNS {ours[0][1]:.2f} is below ' + _names([f'{n}\'s {means_only[n]:.2f}' for n in worse_mean]) + '.')
    per_game = [f'{n}\'s on {_names(gs)}' for n, gs in below.items() if gs]
    if per_game:
        text.append('Per game, the mean is below ' + '; '.join(per_game) + '.')
    if len(text) == 1:
        text.append('nowhere.')
    lines += ['', ' '.join(text)]

    os.makedirs(img_dir, exist_ok=True)
    plot_intervals(est, means_only, os.path.join(img_dir, 'atari100k_aggregates.png'))
    plot_profile(scores, os.path.join(img_dir, 'atari100k_profile.png'))
    plot_atari_curves(results, anchors, os.path.join(img_dir, 'atari100k_curves.png'))
    lines += ['', f'![Atari-100k: IQM, mean and optimality gap with 95 % CIs]({img_rel}/atari100k_aggregates.png)',
              f'![Atari-100k: performance profile]({img_rel}/atari100k_profile.png)',
              f'![Atari-100k: learning curves, training games, mean of the last 10]({img_rel}/atari100k_curves.png)']
    return lines


def candidate_section(candidates: Dict[str, List[Dict[str, Any]]], table: List[Dict[str, Any]],
                      anchors: Dict[str, Any]) -> List[str]:
    """Markdown lines of the candidate agents' runs so far (``candidates``: agent -> its full runs): a row per
    game, a column per candidate, each cell its mean +- std (seeds) vs the table agent's on the same seeds; a last
    row with the mean HNS of the candidate's runs that the table agent has a run of the same game and seed for, and
    of those table runs (the mean per game, then over the games covered)."""
    if not any(candidates.values()):
        return ['No candidate has a full run stored yet (`benchmarks/experiments/results/atari100k-<agent>/`, agents: '
                + ', '.join(f'`{a}`' for a in candidates) + ').']
    table_score = {(r['game'], r['seed']): float(r['eval']['mean']) for r in table}

    def cell(scores: List[float]) -> str:
        if not scores:
            return '-'
        m, sd = _mean_std(scores)
        return f'{_fmt(m)} +- {_fmt(sd)} ({len(scores)})'

    lines = ['| game | ' + ' | '.join(f'`{a}` vs the table agent on its seeds' for a in candidates) + ' |',
             '|---|' + '---|' * len(candidates)]
    for game in anchors['games']:
        cells = []
        for runs in candidates.values():
            mine = [r for r in runs if r['game'] == game]
            same = [table_score[(game, r['seed'])] for r in mine if (game, r['seed']) in table_score]
            cells.append(f'{cell([float(r["eval"]["mean"]) for r in mine])} vs {cell(same)}' if mine else '-')
        lines.append(f'| {game} | ' + ' | '.join(cells) + ' |')
    paired: List[str] = []
    for runs in candidates.values():
        per_game: Dict[str, List[np.ndarray]] = {}
        for r in runs:
            if (r['game'], r['seed']) in table_score:
                pair = (float(r['eval']['mean']), table_score[(r['game'], r['seed'])])
                per_game.setdefault(r['game'], []).append(human_normalised(pair, r['game'], anchors))
        if not per_game:
            paired.append('-')
            continue
        cand_hns, table_hns = np.mean([np.mean(v, axis=0) for v in per_game.values()], axis=0)
        n_runs = sum(len(v) for v in per_game.values())
        n_games = len(per_game)
        paired.append(f'{cand_hns:.2f} vs {table_hns:.2f} ({n_runs} run{"s" if n_runs > 1 else ""}, '
                      f'{n_games} game{"s" if n_games > 1 else ""})')
    lines.append('| mean HNS, paired runs | ' + ' | '.join(paired) + ' |')
    return lines


def mujoco_section(results: List[Dict[str, Any]], skipped: int, img_dir: str, img_rel: str,
                   anchors_path: str = MUJOCO_ANCHORS, reps: int = REPS) -> List[str]:
    """Markdown lines of the MuJoCo results (table, the below-an-anchor line, one picture)."""
    if not results:
        return ['No MuJoCo result is stored yet (`benchmarks/results/mujoco/` holds none'
                + (f'; {skipped} smoke result(s) skipped' if skipped else '') + ').']
    with open(anchors_path) as f:
        published = json.load(f)
    groups: Dict[Tuple[str, str], Dict[str, List[Dict[str, Any]]]] = {}
    for r in results:
        groups.setdefault((r['algo'], r['env']), {}).setdefault(r['framework'], []).append(r)
    lines = ['| algo | env | env steps | rlpipe: mean +- std (seeds) | rlpipe: IQM [95% CI] | SB3: mean +- std (seeds) | '
             'SB3: IQM [95% CI] | wall rlpipe / SB3 | CPU rlpipe / SB3 | rlpipe commit |',
             '|---|---|---|---|---|---|---|---|---|---|']
    below = []
    for (algo, env) in sorted(groups):
        cells, means, wall, cpu = [], {}, {}, {}
        for fw in ('rlpipe', 'sb3'):
            runs = sorted(groups[(algo, env)].get(fw, []), key=lambda r: r['seed'])
            if not runs:
                cells += ['-', '-']
                continue
            rets = [float(r['final_return']) for r in runs]
            m, sd = _mean_std(rets)
            means[fw] = m
            cells.append(f'{_fmt(m)} +- {_fmt(sd)} ({len(runs)})')
            if len(runs) >= MIN_SEEDS_FOR_IQM:
                p, lo, hi = interval_estimates({fw: np.array(rets)[:, None]}, reps=reps)[fw]
                cells.append(_ci(p[0], lo[0], hi[0], _fmt))
            else:
                cells.append(f'- ({len(runs)} seed{"" if len(runs) == 1 else "s"})')
            wall[fw] = sum(float(r['wall']) for r in runs) / len(runs)
            if all('cpu_s' in r for r in runs):
                cpu[fw] = sum(float(r['cpu_s']) for r in runs) / len(runs)
        steps = sorted({int(r['env_steps']) for rs in groups[(algo, env)].values() for r in rs if 'env_steps' in r})
        ratio = {k: f'{v["rlpipe"] / v["sb3"]:.2f}x' if len(v) == 2 else '-' for k, v in (('wall', wall), ('cpu', cpu))}
        commits = sorted({str(r.get('versions', {}).get('rlpipe_commit', 'unknown'))[:7]
                          for r in groups[(algo, env)].get('rlpipe', [])})
        lines.append(f'| {algo} | {env} | {"/".join(f"{s:,}" for s in steps) or "-"} | ' + ' | '.join(cells)
                     + f' | {ratio["wall"]} | {ratio["cpu"]} | {", ".join(commits) or "-"} |')
        if 'rlpipe' in means and 'sb3' in means and means['rlpipe'] < means['sb3']:
            below.append(f'SB3 on {algo.upper()} {env} ({_fmt(means["rlpipe"])} vs {_fmt(means["sb3"])})')
        for a in published['runs']:
            if (a['algo'], a['env']) == (algo, env) and 'rlpipe' in means and means['rlpipe'] < a['return']:
                budget = '' if steps == [a['env_steps']] else \
                    '; this row ran ' + '/'.join(f'{s:,}' for s in steps) + ', so not the same budget'
                below.append(f'RL-Zoo\'s published {algo.upper()} {a["published_env"]} ({_fmt(a["return"])} at '
                             f'{a["env_steps"]:,} env steps, one run{budget})')
    lines += ['', '**Where rlpipe is below an anchor.** ' + ('Below ' + '; below '.join(below) + '.' if below else 'nowhere.')]
    os.makedirs(img_dir, exist_ok=True)
    if plot_mujoco_curves(results, os.path.join(img_dir, 'mujoco_curves.png')):
        lines += ['', f'![MuJoCo: evaluation return during training, rlpipe solid, SB3 dashed]({img_rel}/mujoco_curves.png)']
    return lines


def render_page(template: str, results_dir: str, img_dir: str, img_rel: str, agent: Optional[str] = None,
                reps: int = REPS, lab_results: str = LAB_RESULTS) -> str:
    """The page: ``template`` (markdown) with its markers replaced by the sections of the results under
    ``results_dir`` (the Atari agent ``agent``, default :func:`table_agent`) and of the :data:`CANDIDATE_AGENTS`'
    under ``lab_results``; writes the PNGs into ``img_dir``, linked as ``<img_rel>/<file>``."""
    for marker in MARKERS.values():
        if template.count(marker + '\n') != 1:
            raise ValueError(f'the page template needs the line {marker!r} exactly once')
    agent = agent or table_agent()
    atari, mujoco, skipped = load_results(results_dir, agent)
    anchors = load_anchors()
    candidates = {a: load_atari(lab_results, a)[0] for a in CANDIDATE_AGENTS}
    sections = {'atari100k': atari_section(atari, skipped['atari100k'], agent, anchors, img_dir, img_rel, reps),
                'atari100k-candidate': candidate_section(candidates, atari, anchors),
                'mujoco': mujoco_section(mujoco, skipped['mujoco'], img_dir, img_rel, reps=reps)}
    for key, marker in MARKERS.items():
        template = template.replace(marker + '\n', '\n'.join(sections[key]) + '\n')
    return template


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--results', default=os.path.join(ROOT, 'benchmarks', 'results'))
    p.add_argument('--lab-results', default=LAB_RESULTS, help="the lab's results (the candidate agents' runs)")
    p.add_argument('--template', default=TEMPLATE, help='the page with its markers (default benchmarks/page_template.md)')
    p.add_argument('--page', default=os.path.join(ROOT, 'docs', 'benchmarks.md'))
    p.add_argument('--img-dir', default=None, help='where the PNGs go (default: img/ next to the page)')
    p.add_argument('--reps', type=int, default=REPS, help='bootstrap resamples of the confidence intervals')
    args = p.parse_args(argv)
    img_dir = args.img_dir or os.path.join(os.path.dirname(os.path.abspath(args.page)), 'img')
    img_rel = os.path.relpath(img_dir, os.path.dirname(os.path.abspath(args.page)))
    with open(args.template) as f:
        template = f.read()
    text = render_page(template, args.results, img_dir, img_rel, reps=args.reps, lab_results=args.lab_results)
    with open(args.page, 'w') as f:
        f.write(text)
    print(f'wrote {args.page} ({text.count(chr(10))} lines) and its pictures in {img_dir}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
