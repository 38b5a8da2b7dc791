"""Render every stored Atari-100k and MuJoCo result into docs/benchmarks.md (section "## Atari-100k and MuJoCo").

    python benchmarks/report.py                      # benchmarks/results/ -> docs/benchmarks.md, docs/img/
    python benchmarks/report.py --results /tmp/res --page /tmp/page.md --img-dir /tmp/img

Reads ``<results>/atari100k-<agent>/*.json`` (written by ``benchmarks/atari100k.py --agent <agent>``;
``--smoke`` results are skipped): the table agent's (``TABLE_AGENT`` in ``benchmarks/atari100k.py``) make
the results table and the curves, every other agent's a row in a table beside it; and ``<results>/mujoco/*.json`` (written by ``benchmarks/mujoco_vs_sb3.py``: fields ``algo``,
``env``, ``seed``, ``framework`` ('rlpipe' or 'sb3'), ``final_return``, ``wall``; ``--smoke`` results are
skipped). Writes one table per benchmark (mean +- std over seeds, the published anchors beside it,
human-normalised scores for Atari; rlpipe and SB3 side by side for MuJoCo) and one learning-curve PNG per
game (``<img-dir>/atari100k_<game>.png``) and per MuJoCo algorithm and env (``mujoco_<algo>_<env>.png``),
linked from the page. Only the body of the section is replaced;
the rest of the page is kept. With no stored results the section says so.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTION = '## Atari-100k and MuJoCo'
GAMES = ('Boxing', 'Breakout', 'Freeway', 'Pong', 'RoadRunner')

#: Published per-game mean scores. random, human, DER: as in /work/shared/anchors.md (Kaiser et al. 2019's
#: random/human; DER = data-efficient Rainbow, van Hasselt et al. 2019). DrQ(eps) and SPR: the means of the
#: 100 runs per game in rliable's released scores (Agarwal et al. 2021; where read: ANCHOR_NOTES).
ANCHORS: Dict[str, Dict[str, Optional[float]]] = {
    'Boxing': {'random': 0.1, 'human': 12.1, 'DER': 0.2, 'DrQ(eps)': 9.04, 'SPR': 35.7},
    'Breakout': {'random': 1.7, 'human': 30.5, 'DER': 1.9, 'DrQ(eps)': 19.76, 'SPR': 19.58},
    'Freeway': {'random': 0.0, 'human': 29.6, 'DER': 27.9, 'DrQ(eps)': 20.26, 'SPR': 19.28},
    'Pong': {'random': -20.7, 'human': 14.6, 'DER': -19.3, 'DrQ(eps)': -9.06, 'SPR': -5.41},
    'RoadRunner': {'random': 11.5, 'human': 7845.0, 'DER': 9600.0, 'DrQ(eps)': 11211.43, 'SPR': 12213.13},
}
ANCHOR_NOTES = (
    'Random, human and DER: the project\'s anchors (Kaiser et al. 2019 for random and human; DER as '
    'reported for data-efficient Rainbow, van Hasselt et al. 2019). DrQ(eps) and SPR: the mean of the 100 '
    'runs per game of the Atari-100k scores released with rliable (Agarwal et al. 2021, "Deep RL at the '
    'edge of the statistical precipice"), read from the copy in the IRIS repository '
    '(github.com/eloialonso/iris, results/data/DrQ(eps).json and SPR.json, commit 75e5ab5); these SPR '
    'means come from those 100 runs, not from the SPR paper\'s table (Schwarzer et al. 2021, 10 runs).')

MUJOCO_NOTES = (
    'For scale, RL-Zoo\'s published agents (rl-baselines3-zoo benchmark.md, one run each, 1M env steps, '
    'gymnasium v3 envs): PPO Hopper-v3 2,410.4, SAC Hopper-v3 2,325.5, SAC HalfCheetah-v3 9,535.5. A '
    'Hopper return near 1,000 is a hopper that stays upright for the 1,000 steps of an episode (1 per '
    'step for being healthy) without moving forward.')


def human_normalised(score: float, game: str) -> float:
    """(score - random) / (human - random) with the anchors' random and human scores."""
    a = ANCHORS[game]
    return (score - a['random']) / (a['human'] - a['random'])


def _mean_std(xs: List[float]) -> Tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    sd = (sum((x - m) ** 2 for x in xs) / (n - 1)) ** 0.5 if n > 1 else 0.0
    return m, sd


def _fmt(x: Optional[float]) -> str:
    if x is None:
        return '-'
    return f'{x:,.1f}' if abs(x) < 1000 else f'{x:,.0f}'


#: Agent steps of an Atari-100k run; a result of fewer (``--steps``) is left out of the tables.
ATARI_STEPS = 100_000


def _load_atari_dir(path: str) -> Tuple[List[Dict[str, Any]], int]:
    """(the Atari-100k results in directory ``path``, how many were skipped: smoke results and runs
    shorter than :data:`ATARI_STEPS` agent steps)."""
    results, skipped = [], 0
    for file in sorted(glob.glob(os.path.join(path, '*.json'))):
        with open(file) as f:
            r = json.load(f)
        if r.get('smoke') or r.get('agent_steps', 0) < ATARI_STEPS:
            skipped += 1
            continue
        r['_path'] = file
        results.append(r)
    return results, skipped


def table_agent() -> str:
    """The agent of the results table: ``TABLE_AGENT`` in ``benchmarks/atari100k.py``."""
    sys.path.insert(0, os.path.join(ROOT, 'benchmarks'))
    try:
        from atari100k import TABLE_AGENT
    finally:
        sys.path.pop(0)
    return TABLE_AGENT


def load_results(results_dir: str, agent: str) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]], Dict[str, int]]:
    """(Atari-100k results of ``agent``, MuJoCo results, ``{'atari100k': n, 'mujoco': n}`` results
    skipped: smoke runs, and Atari runs shorter than :data:`ATARI_STEPS`)."""
    atari, n_atari_skipped = _load_atari_dir(os.path.join(results_dir, f'atari100k-{agent}'))
    mujoco, skipped = [], {'atari100k': n_atari_skipped, 'mujoco': 0}
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


def load_other_agents(results_dir: str, table: str) -> Dict[str, List[Dict[str, Any]]]:
    """``{agent: results}`` from ``<results_dir>/atari100k-<agent>/`` (``benchmarks/atari100k.py --agent
    <agent>``) for every agent but ``table``, smoke and short results skipped; agents with no other result
    are left out."""
    prefix = os.path.join(results_dir, 'atari100k-')
    out = {}
    for path in sorted(glob.glob(prefix + '*')):
        if os.path.isdir(path) and path[len(prefix):] != table:
            results, _ = _load_atari_dir(path)
            if results:
                out[path[len(prefix):]] = results
    return out


def other_agents_table(agent: str, table: List[Dict[str, Any]], others: Dict[str, List[Dict[str, Any]]]) -> List[str]:
    """Markdown lines: one row per agent (the table's, ``agent``, first, then ``others``), one column per
    game: evaluation mean +- std (seeds), and the mean human-normalised score of agents with every game."""
    rows = [(f'the table\'s (`{agent}`)', table)] + [(f'`{name}`', runs) for name, runs in sorted(others.items())]
    games = sorted({r['game'] for _, runs in rows for r in runs}, key=lambda g: (g not in GAMES, g))
    lines = ['| agent | ' + ' | '.join(games) + ' | mean HNS |', '|---|' + '---|' * (len(games) + 1)]
    for label, runs in rows:
        cells, hns = [], []
        for game in games:
            scores = [float(r['eval']['mean']) for r in runs if r['game'] == game]
            if not scores:
                cells.append('-')
                continue
            m, sd = _mean_std(scores)
            cells.append(f'{_fmt(m)} +- {_fmt(sd)} ({len(scores)})' if len(scores) > 1 else f'{_fmt(m)} (1)')
            if game in ANCHORS:
                hns.append(human_normalised(m, game))
        mean_hns = f'{sum(hns) / len(hns):.2f}' if len(hns) == len(games) else '-'  # only over every game
        lines.append(f'| {label} | ' + ' | '.join(cells) + f' | {mean_hns} |')
    return lines


def atari_table(results: List[Dict[str, Any]]) -> List[str]:
    """Markdown lines: one row per game with results, then the mean human-normalised score."""
    by_game: Dict[str, List[Dict[str, Any]]] = {}
    for r in results:
        by_game.setdefault(r['game'], []).append(r)
    lines = ['| game | rlpipe mean +- std (seeds) | HNS | random | human | DER | DrQ(eps) | SPR | wall per run |',
             '|---|---|---|---|---|---|---|---|---|']
    hns_ours: List[float] = []
    hns_pub: Dict[str, List[float]] = {'DER': [], 'DrQ(eps)': [], 'SPR': []}
    for game in sorted(by_game, key=lambda g: (g not in GAMES, g)):
        runs = sorted(by_game[game], key=lambda r: r['seed'])
        m, sd = _mean_std([float(r['eval']['mean']) for r in runs])
        walls = [float(r['wall_s']) / 60 for r in runs]
        a = ANCHORS.get(game)
        hns = human_normalised(m, game) if a else None
        if a:
            hns_ours.append(hns)
            for agent, scores in hns_pub.items():
                if a[agent] is not None:
                    scores.append(human_normalised(a[agent], game))
        anchor = [_fmt(a[k]) if a else '-' for k in ('random', 'human', 'DER', 'DrQ(eps)', 'SPR')]
        lines.append(f'| {game} | {_fmt(m)} +- {_fmt(sd)} ({len(runs)}) | {"-" if hns is None else f"{hns:.2f}"} | '
                     f'{" | ".join(anchor)} | {min(walls):.0f}-{max(walls):.0f} min |')
    if hns_ours:
        lines.append('')
        published = ', '.join(f'{agent} {sum(v) / len(v):.2f}' for agent, v in hns_pub.items()
                              if len(v) == len(hns_ours))  # only agents with a score for every game
        lines.append(f'Mean human-normalised score over the {len(hns_ours)} game(s) above: rlpipe '
                     f'{sum(hns_ours) / len(hns_ours):.2f}, {published}.')
    return lines


def mujoco_table(results: List[Dict[str, Any]]) -> List[str]:
    """Markdown lines: one row per algorithm and env, rlpipe and SB3 side by side."""
    groups: Dict[Tuple[str, str], Dict[str, List[Dict[str, Any]]]] = {}
    for r in results:
        groups.setdefault((r['algo'], r['env']), {}).setdefault(r['framework'], []).append(r)
    lines = ['| algo | env | rlpipe final return mean +- std (seeds) | SB3 final return mean +- std (seeds) | '
             'rlpipe wall per run | SB3 wall per run | wall rlpipe / SB3 |',
             '|---|---|---|---|---|---|---|']
    for (algo, env) in sorted(groups):
        cells, walls = [], {}
        for fw in ('rlpipe', 'sb3'):
            runs = groups[(algo, env)].get(fw, [])
            if runs:
                m, sd = _mean_std([float(r['final_return']) for r in runs])
                cells.append(f'{_fmt(m)} +- {_fmt(sd)} ({len(runs)})')
                walls[fw] = sum(float(r['wall']) for r in runs) / len(runs)
            else:
                cells.append('-')
        wall_cells = [f'{walls[fw] / 60:.0f} min' if fw in walls else '-' for fw in ('rlpipe', 'sb3')]
        ratio = f'{walls["rlpipe"] / walls["sb3"]:.2f}x' if len(walls) == 2 else '-'
        lines.append(f'| {algo} | {env} | {cells[0]} | {cells[1]} | {wall_cells[0]} | {wall_cells[1]} | {ratio} |')
    return lines


def plot_mujoco_curves(results: List[Dict[str, Any]], img_dir: str) -> Dict[str, str]:
    """One PNG per algorithm and env: each run's evaluation returns vs env steps, rlpipe solid, SB3 dashed.
    Returns ``{'<algo> <env>': file name}`` (runs without a curve are left out)."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    groups: Dict[Tuple[str, str], List[Dict[str, Any]]] = {}
    for r in results:
        if (r.get('curve') or {}).get('points'):
            groups.setdefault((r['algo'], r['env']), []).append(r)
    out = {}
    if groups:
        os.makedirs(img_dir, exist_ok=True)
    for (algo, env), runs in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        for r in sorted(runs, key=lambda r: (r['framework'], r['seed'])):
            pts = r['curve']['points']
            ax.plot([p[0] for p in pts], [p[1] for p in pts], lw=1.2, ls='-' if r['framework'] == 'rlpipe' else '--',
                    label=f'{r["framework"]} seed {r["seed"]}')
        ax.set_title(f'{algo.upper()} {env}: evaluation return (deterministic)')
        ax.set_xlabel('env steps')
        ax.set_ylabel('return')
        ax.legend(fontsize=7, loc='best')
        fig.tight_layout()
        name = f'mujoco_{algo}_{env}.png'
        fig.savefig(os.path.join(img_dir, name))
        plt.close(fig)
        out[f'{algo} {env}'] = name
    return out


def _smooth(ys: List[float], k: int = 10) -> List[float]:
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= k:
            acc -= ys[i - k]
        out.append(acc / min(i + 1, k))
    return out


def plot_curves(results: List[Dict[str, Any]], img_dir: str) -> Dict[str, str]:
    """One PNG per game: each seed's training-game raw scores (mean of the last 10 games) vs agent
    steps, with the random, human and DER lines. Returns ``{game: file name}``."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    os.makedirs(img_dir, exist_ok=True)
    by_game: Dict[str, List[Dict[str, Any]]] = {}
    for r in results:
        by_game.setdefault(r['game'], []).append(r)
    out = {}
    for game, runs in sorted(by_game.items()):
        fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
        for r in sorted(runs, key=lambda r: r['seed']):
            pts = r['curve']['points']
            if pts:
                ax.plot([p[0] for p in pts], _smooth([p[1] for p in pts]), lw=1.2, label=f'seed {r["seed"]}')
        for key, style in (('random', ':'), ('human', '--'), ('DER', '-.')):
            v = ANCHORS.get(game, {}).get(key)
            if v is not None:
                ax.axhline(v, ls=style, color='gray', lw=0.9, label=key)
        ax.set_title(f'{game}: training games (raw score, mean of last 10)')
        ax.set_xlabel('agent steps')
        ax.set_ylabel('score')
        ax.legend(fontsize=7, loc='best')
        fig.tight_layout()
        name = f'atari100k_{game}.png'
        fig.savefig(os.path.join(img_dir, name))
        plt.close(fig)
        out[game] = name
    return out


def render_section(results_dir: str, img_dir: str, img_rel: str, agent: Optional[str] = None) -> str:
    """The section body (markdown, without the heading) for the results under ``results_dir``, with
    ``agent`` (default :func:`table_agent`) in the results table; writes the PNGs into ``img_dir``,
    linked as ``<img_rel>/<file>``."""
    agent = agent or table_agent()
    atari, mujoco, skipped = load_results(results_dir, agent)
    lines = ['Rendered by `python benchmarks/report.py` from the JSON results in `benchmarks/results/`; '
             'do not edit by hand.', '', '### Atari-100k', '',
             'One command per game and seed: `python benchmarks/atari100k.py --game <Game> --seed <k>` '
             '(100k agent steps = 400k frames; games Boxing, Breakout, Freeway, Pong, RoadRunner; ALE v5 ids). '
             'Protocol: sticky actions off, frame skip 4 with max-pool, 84x84 gray, 4 stacked frames, up to 30 '
             'no-op actions at reset, games capped at 108k frames; life loss ends the episode and rewards are '
             'sign-clipped for training only. Score: the raw game score of evaluation games after training '
             '(10 games, eps-greedy with eps 0.001; the papers average 100 episodes). Agent (`--agent '
             f'{agent}`, the default): DrQ(eps) built '
             'from rlpipe\'s DQN (see the docstring of `benchmarks/atari100k.py`): one batch-32 update per '
             'agent step from step 1,600, 10-step double DQN with a dueling head on the Nature-DQN encoder '
             'at half width, Adam 1e-4 (eps 1.5e-4), random shifts of +-4 px, eps 1 -> 0.01 over the 5k steps after the first '
             'update. Its target net is copied after every update, as in DrQ(eps), not every 2,000 updates '
             'as in DER: DrQ(eps) is the published agent this one follows, and with the copy the '
             'double-DQN target needs one forward pass of the next observations instead of two. These are '
             'the settings of Dopamine\'s `labs/atari_100k/configs/DrQ_eps.gin` (update horizon 10, first '
             'update after 1,600 steps, update and target period 1, eps 0.01 for training after a linear '
             'decay over 5k steps, 0.001 for evaluation, Adam 1e-4 with eps 1.5e-4, dueling and double '
             'DQN, no noisy nets, no C51, uniform replay).',
             '',
             'Deviations from the published protocol and agent: after a life is lost (training only) the '
             'env takes one no-op step before the next episode starts, as OpenAI Baselines and SB3 do, and '
             'that step is not counted as an agent step (at most 4 per Breakout game and 2 per RoadRunner '
             'game; Boxing, Freeway and Pong have no lives). The network is that of Dopamine\'s DrQ(eps) '
             'config (Nature-DQN convs 8/4/3 with strides 4/2/1 -> 512 features -> linear value and '
             'advantage branches) at half width (16/32/32 channels, 256 features), chosen for CPU time: at '
             'full width an update costs about two and a half times the CPU of one on the DER encoder, at half '
             'width about 1.35 times (section "Atari-100k agent: CPU per update"). Gradients '
             'are clipped at norm 10. The '
             'augmentation is random shifts only (Dopamine\'s DrQ code also scales intensities). Evaluation '
             'uses 10 games per run, not 100.',
             '']
    others = load_other_agents(results_dir, agent)
    if atari:
        lines += atari_table(atari)
        if others:
            lines += ['', 'Other agents, same protocol (`python benchmarks/atari100k.py --game <Game> --seed <k> '
                      '--agent <name>`; results in `benchmarks/results/atari100k-<name>/`; what each one is: the '
                      'docstring of `benchmarks/atari100k.py`): evaluation mean +- std (seeds).', '']
            lines += other_agents_table(agent, atari, others)
        plots = plot_curves(atari, img_dir)
        lines += ['', 'Learning curves (raw scores of training games, so life-loss episodes are joined into whole '
                  'games):', '']
        lines += [f'![{g}]({img_rel}/{name})' for g, name in plots.items()]
    else:
        lines.append(f'No Atari-100k result is stored yet (`benchmarks/results/atari100k-{agent}/` holds none'
                     + (f'; {skipped["atari100k"]} smoke or short result(s) skipped' if skipped['atari100k'] else '') + ').')
    lines += ['', ANCHOR_NOTES, '', '### MuJoCo', '',
              'One command per row and seed: `python benchmarks/mujoco_vs_sb3.py --algo <sac|ppo> --env <id> --seed <k> '
              '--with-sb3` (rlpipe, then Stable-Baselines3 with the same settings, each in a process of its own '
              'with one torch thread). SAC: HalfCheetah-v5 and Hopper-v5, 100k env steps, the first 5k uniformly '
              'random, then one update per env step, 256x256 nets, batch 256. PPO: Hopper-v5, 1M env steps, '
              'RL-Zoo\'s tuned Hopper settings. Final return: the mean of 10 deterministic episodes of the final '
              'policy, the same reset seeds for both frameworks. Wall: training time including the evaluations '
              'during training, not the final evaluation; the load average at start and end is in each result.',
              '']
    if mujoco:
        lines += mujoco_table(mujoco)
        lines += ['', MUJOCO_NOTES]
        plots = plot_mujoco_curves(mujoco, img_dir)
        if plots:
            lines += ['', 'Learning curves (mean return of 5 deterministic episodes):', '']
            lines += [f'![{k}]({img_rel}/{name})' for k, name in plots.items()]
    else:
        lines.append('No MuJoCo result is stored yet (`benchmarks/results/mujoco/` holds none'
                     + (f'; {skipped["mujoco"]} smoke result(s) skipped' if skipped['mujoco'] else '') + ').')
    return '\n'.join(lines) + '\n'


def update_page(page: str, body: str) -> None:
    """Replace the body of ``SECTION`` in ``page`` (up to the next ``## `` heading) by ``body``."""
    with open(page) as f:
        text = f.read()
    start = text.find('\n' + SECTION + '\n')
    if start < 0:
        raise ValueError(f'{page} has no line {SECTION!r}')
    body_start = start + len(SECTION) + 2
    nxt = text.find('\n## ', body_start)
    end = len(text) if nxt < 0 else nxt + 1
    text = text[:body_start] + '\n' + body + ('\n' if nxt >= 0 else '') + text[end:]
    with open(page, 'w') as f:
        f.write(text)


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--results', default=os.path.join(ROOT, 'benchmarks', 'results'))
    p.add_argument('--page', default=os.path.join(ROOT, 'docs', 'benchmarks.md'))
    p.add_argument('--img-dir', default=None, help='where the PNGs go (default: img/ next to the page)')
    args = p.parse_args(argv)
    img_dir = args.img_dir or os.path.join(os.path.dirname(os.path.abspath(args.page)), 'img')
    img_rel = os.path.relpath(img_dir, os.path.dirname(os.path.abspath(args.page)))
    update_page(args.page, render_section(args.results, img_dir, img_rel))
    print(f'updated {args.page} (section "{SECTION}")')
    return 0


if __name__ == '__main__':
    sys.exit(main())
