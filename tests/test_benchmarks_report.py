"""benchmarks/report.py: the page is its template with the stored results' tables, statistics and pictures."""
import importlib.util
import json
import os

import numpy as np
import pytest

pytestmark = pytest.mark.bench

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEMPLATE = '# Benchmarks\n\nintro\n\n## Atari-100k\n\n<!-- report: atari100k -->\n\ncandidate:\n\n' \
           '<!-- report: atari100k-candidate -->\n\n## MuJoCo\n\n<!-- report: mujoco -->\n\n## Replay buffers\n\nkept\n'
REPS = 500  # bootstrap resamples in these tests (the page uses report.REPS)


def _load():
    pytest.importorskip('rliable', reason="the report's statistics need rliable: pip install -e '.[bench]'")
    pytest.importorskip('matplotlib', reason="the report's pictures need matplotlib: pip install -e '.[bench]'")
    spec = importlib.util.spec_from_file_location('report', os.path.join(ROOT, 'benchmarks', 'report.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _result(game, seed, mean, points, smoke=False, steps=100_000):
    return {'benchmark': 'atari100k', 'game': game, 'seed': seed, 'smoke': smoke, 'eval': {'mean': mean},
            'curve': {'points': points}, 'wall_s': 1800.0 + 60 * seed, 'cpu_s': 2000.0 + 800 * seed, 'agent_steps': steps,
            'update_phase': {'cpu_ms_per_step': 20.0 + seed}}


def _render(report, tmp_path, results, mujoco=(), candidate=(), second=()):
    """Renders the page of ``results`` (the table agent's), ``candidate`` and ``second`` (the first and second of
    report.CANDIDATE_AGENTS) and ``mujoco``; returns (its text, the command line)."""
    res, lab = tmp_path / 'results', tmp_path / 'lab'
    for where, runs in ((res / f'atari100k-{report.table_agent()}', results),
                        (lab / f'atari100k-{report.CANDIDATE_AGENTS[0]}', candidate),
                        (lab / f'atari100k-{report.CANDIDATE_AGENTS[1]}', second)):
        where.mkdir(parents=True)
        for r in runs:
            with open(where / f'{r["game"]}_seed{r["seed"]}{"_smoke" if r["smoke"] else ""}.json', 'w') as f:
                json.dump(r, f)
    (res / 'mujoco').mkdir()
    for i, r in enumerate(mujoco):
        with open(res / 'mujoco' / f'run{i}.json', 'w') as f:
            json.dump(r, f)
    (tmp_path / 'template.md').write_text(TEMPLATE)
    page = tmp_path / 'benchmarks.md'
    argv = ['--results', str(res), '--lab-results', str(lab), '--template', str(tmp_path / 'template.md'),
            '--page', str(page), '--img-dir', str(tmp_path / 'img'), '--reps', str(REPS)]
    assert report.main(argv) == 0
    return page.read_text(), argv


def test_the_aggregates_are_rliables_on_a_known_input():
    report = _load()
    x = np.array([[0.0], [1.0], [2.0], [3.0]])                 # 4 runs of one task
    np.testing.assert_allclose(report.aggregate_metrics(x), [1.5, 1.5, 0.25])   # IQM: mean of 1 and 2; gap: 1/4
    y = np.array([[0.0, 0.5], [0.2, 0.9], [2.0, 4.0], [0.1, 1.0]])
    flat = np.sort(y.ravel())
    np.testing.assert_allclose(report.aggregate_metrics(y)[0], flat[2:6].mean())  # the middle 4 of 8
    np.testing.assert_allclose(report.aggregate_metrics(y)[2], np.mean(1 - np.minimum(flat, 1)))
    est = report.interval_estimates({'a': y}, reps=REPS)
    again = report.interval_estimates({'a': y}, reps=REPS)
    point, lo, hi = est['a']
    np.testing.assert_allclose(point, report.aggregate_metrics(y))
    assert np.all(lo <= point) and np.all(point <= hi) and np.all(lo < hi)
    assert all(np.array_equal(u, v) for u, v in zip(est['a'], again['a']))    # the same page every time
    state = np.random.get_state()[1].copy()
    report.interval_estimates({'a': y}, reps=10)
    assert np.array_equal(np.random.get_state()[1], state)                     # numpy's global stream given back
    # one run per task: resampling cannot move it, the interval is the point
    p1, lo1, hi1 = report.interval_estimates({'b': np.array([[0.3, 0.7]])}, reps=50)['b']
    np.testing.assert_allclose(lo1, p1) and np.testing.assert_allclose(hi1, p1)


@pytest.mark.timeout(180)
def test_report_renders_tables_statistics_plots_and_keeps_the_template(tmp_path):
    report = _load()
    anchors = report.load_anchors()
    rows = [_result(g, s, m, [[1000, m - 1], [5000, m]]) for s, by_game in enumerate([
        {'Boxing': 10.0, 'Breakout': 5.0, 'Freeway': 0.0, 'Pong': -20.0, 'RoadRunner': 8000.0},
        {'Boxing': 14.0, 'Breakout': 9.0, 'Freeway': 22.0, 'Pong': -12.0, 'RoadRunner': 12000.0}]) for g, m in by_game.items()]
    rows += [_result('Pong', 2, 19.0, [], smoke=True), _result('Boxing', 3, 99.0, [], steps=10_240)]
    mujoco = [{'algo': 'sac', 'env': 'Hopper-v5', 'seed': i, 'framework': fw, 'final_return': ret, 'wall': w,
               'cpu_s': c, 'env_steps': 100_000, 'curve': {'points': [[50_000, ret / 2], [100_000, ret]]}}
              for i, (fw, ret, w, c) in enumerate([('rlpipe', 2000.0, 1500.0, 1400.0), ('rlpipe', 2400.0, 1500.0, 1400.0),
                                                   ('rlpipe', 1600.0, 1500.0, 1400.0), ('sb3', 2900.0, 3000.0, 2000.0)])]
    mujoco.append(dict(mujoco[0], seed=9, final_return=1e6, smoke=True))
    text, argv = _render(report, tmp_path, rows, mujoco)
    assert text.startswith('# Benchmarks\n\nintro\n\n## Atari-100k\n\n|') and text.endswith('## Replay buffers\n\nkept\n')
    assert '<!-- report:' not in text
    pong = next(line for line in text.splitlines() if line.startswith('| Pong |'))
    assert pong.startswith(f'| Pong | -16.0 +- 5.7 (2) | {(-16.0 + 20.7) / 35.3:.2f} | -20.7 | 14.6 | -19.3 | -9.1 | -5.4 |')
    assert '19.0' not in pong and '99.0' not in text                  # the smoke run and the short run are left out
    # seed 1's runs took 46.7 CPU minutes, over the budget
    assert 'Wall time per run 30-31 min, CPU time 33-47 min (5 of 10 runs over the 45-min budget);' in text
    # the aggregate row is rliable's over the 2 x 5 human-normalised scores
    games = anchors['games']
    ours = np.array([[report.human_normalised(r['eval']['mean'], g, anchors) for g in games
                      for r in rows[:10] if r['game'] == g and r['seed'] == s] for s in (0, 1)])
    point, lo, hi = report.interval_estimates({'rlpipe': ours}, reps=REPS)['rlpipe']
    row = next(line for line in text.splitlines() if line.startswith('| rlpipe | 2 |'))
    assert row == '| rlpipe | 2 | ' + ' | '.join(f'{point[j]:.2f} [{lo[j]:.2f}, {hi[j]:.2f}]' for j in range(3)) + ' |'
    drq = np.stack([report.human_normalised(anchors['agents']['DrQ(eps)']['runs'][g], g, anchors) for g in games], 1)
    assert any(line.startswith('| DrQ(eps) | 100 | ') and f'| {drq.mean():.2f} [' in line for line in text.splitlines())
    assert '| DER | published means | - | 0.44 | - |' in text
    below = next(line for line in text.splitlines() if line.startswith('**Where rlpipe is below an anchor.** IQM'))
    assert "DER's on Freeway" in below and "SPR's on Boxing, Breakout, Freeway, Pong and RoadRunner" in below
    # MuJoCo: 3 rlpipe seeds get an interval (the IQM of 3 is their mean), SB3's single seed does not
    assert '| sac | Hopper-v5 | 100,000 | 2,000 +- 400.0 (3) | 2,000 [' in text
    assert '| 2,900 +- 0.0 (1) | - (1 seed) | 0.50x | 0.70x |' in text and '1,000,000.0' not in text
    assert ("**Where rlpipe is below an anchor.** Below SB3 on SAC Hopper-v5 (2,000 vs 2,900); below RL-Zoo's "
            "published SAC Hopper-v3 (2,326 at 1,000,000 env steps, one run; this row ran 100,000, so not the same "
            "budget).") in text
    for name in ('atari100k_aggregates', 'atari100k_profile', 'atari100k_curves', 'mujoco_curves'):
        assert (tmp_path / 'img' / f'{name}.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
        assert f'](img/{name}.png)' in text
    first = {p.name: p.read_bytes() for p in (tmp_path / 'img').iterdir()}
    assert report.main(argv) == 0                                     # run again: the same page, the same pictures
    assert (tmp_path / 'benchmarks.md').read_text() == text
    assert {p.name: p.read_bytes() for p in (tmp_path / 'img').iterdir()} == first


def test_the_candidate_table_sets_its_runs_beside_the_table_agents_on_the_same_seeds(tmp_path):
    report = _load()
    table = [_result('Freeway', s, m, []) for s, m in enumerate([0.0, 22.0, 0.0])] + [_result('Pong', 0, -20.0, [])]
    candidate = [_result('Freeway', 0, 23.0, []), _result('Freeway', 2, 21.0, []), _result('Freeway', 7, 25.0, []),
                 _result('Pong', 1, 30.0, [], smoke=True), _result('Boxing', 4, 50.0, [], steps=10_240)]
    second = [_result('Freeway', 1, 20.0, []), _result('Pong', 0, -10.0, [])]
    text, _ = _render(report, tmp_path, table, candidate=candidate, second=second)
    lines = text.splitlines()
    first, other, *rest = (f'`{a}`' for a in report.CANDIDATE_AGENTS)
    at = lines.index('candidate:') + 2
    assert lines[at] == '| game | ' + ' | '.join(f'{a} vs the table agent on its seeds'
                                                 for a in (first, other, *rest)) + ' |'
    none = ' - |' * len(rest)                                        # the candidates after the second: no runs
    # seeds 0, 2 and 7: the table agent has seeds 0 and 2 only, so its part of the cell is over those two
    assert lines[at + 2:at + 7] == [
        '| Boxing | - | - |' + none,                                  # a short run does not count
        '| Breakout | - | - |' + none,
        '| Freeway | 23.0 +- 2.0 (3) vs 0.0 +- 0.0 (2) | 20.0 +- 0.0 (1) vs 22.0 +- 0.0 (1) |' + none,
        '| Pong | - | -10.0 +- 0.0 (1) vs -20.0 +- 0.0 (1) |' + none,   # the first's run is a smoke run
        '| RoadRunner | - | - |' + none]
    # the last row: mean HNS over the runs the table agent has the same game and seed of (the first's seed 7 is not)
    anchors = report.load_anchors()

    def hns(score, game):
        return float(report.human_normalised(score, game, anchors))
    second_mine = (hns(20.0, 'Freeway') + hns(-10.0, 'Pong')) / 2
    second_table = (hns(22.0, 'Freeway') + hns(-20.0, 'Pong')) / 2
    assert lines[at + 7] == (f'| mean HNS, paired runs | {hns(22.0, "Freeway"):.2f} vs 0.00 (2 runs, 1 game) | '
                             f'{second_mine:.2f} vs {second_table:.2f} (2 runs, 2 games) |' + none)
    assert lines[at + 8] == ''
    # without a candidate run the section says so
    text, _ = _render(report, tmp_path / 'none', table)
    assert 'No candidate has a full run stored yet' in text and first in text and other in text


def test_report_without_results_says_so(tmp_path):
    report = _load()
    text, _ = _render(report, tmp_path, [_result('Pong', 0, 5.0, [], smoke=True)])
    assert 'No Atari-100k result is stored yet' in text and '1 smoke or short result(s) skipped' in text
    assert 'No MuJoCo result is stored yet' in text and text.endswith('## Replay buffers\n\nkept\n')
    assert not (tmp_path / 'img').exists() or not list((tmp_path / 'img').iterdir())


def test_a_template_without_its_markers_is_refused(tmp_path):
    report = _load()
    with pytest.raises(ValueError, match='<!-- report: mujoco -->'):
        report.render_page('# B\n\n<!-- report: atari100k -->\n<!-- report: atari100k-candidate -->\n', str(tmp_path),
                           str(tmp_path / 'img'), 'img')
    with pytest.raises(ValueError, match='<!-- report: atari100k-candidate -->'):
        report.render_page('# B\n\n<!-- report: atari100k -->\n<!-- report: mujoco -->\n', str(tmp_path),
                           str(tmp_path / 'img'), 'img')


@pytest.mark.timeout(240)
def test_the_committed_page_is_what_report_renders_from_the_committed_results(tmp_path):
    report = _load()
    page = tmp_path / 'benchmarks.md'
    report.main(['--results', os.path.join(ROOT, 'benchmarks', 'results'), '--page', str(page),
                 '--img-dir', str(tmp_path / 'img')])
    committed = open(os.path.join(ROOT, 'docs', 'benchmarks.md')).read()
    assert page.read_text() == committed, 'docs/benchmarks.md is stale: run python benchmarks/report.py'
    assert committed.count('\n') <= 210                               # a page for a reader in a hurry
    for name in sorted(p.name for p in (tmp_path / 'img').iterdir()):
        assert (open(os.path.join(ROOT, 'docs', 'img', name), 'rb').read(8) == b'\x89PNG\r\n\x1a\n'), name
        assert f'](img/{name})' in committed
