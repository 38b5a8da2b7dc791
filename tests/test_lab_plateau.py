"""benchmarks/experiments/plateau.py: the agent step where a run's training-game scores leave their plateau."""
import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load():
    spec = importlib.util.spec_from_file_location('plateau', os.path.join(ROOT, 'benchmarks', 'experiments',
                                                                          'plateau.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_crossing_is_the_first_game_whose_window_mean_passes():
    plateau = _load()
    points = [[100, 900], [200, 1000], [300, 3000], [400, 3100], [500, 500]]
    assert plateau.crossing(points, 2000, 2) == 400                 # (1000 + 3000) / 2 = 2000 is not above
    assert plateau.crossing(points, 1900, 2) == 300                 # 2000 > 1900
    assert plateau.crossing(points, 2000, 1) == 300
    assert plateau.crossing(points, 2000, 5) is None and plateau.crossing([], 0, 1) is None
    assert plateau.crossing(points, 2000, 6) is None                # fewer games than the window
    with pytest.raises(ValueError, match='window must be >= 1'):
        plateau.crossing(points, 2000, 0)


def test_the_table_reads_full_runs_of_every_agent_and_skips_short_ones(tmp_path, capsys):
    plateau = _load()

    def store(root, agent, seed, score, points, **extra):
        d = tmp_path / root / f'atari100k-{agent}'
        d.mkdir(parents=True, exist_ok=True)
        r = dict({'game': 'RoadRunner', 'seed': seed, 'agent_steps': 100_000, 'eval': {'mean': score}, 'curve': {'points': points}}, **extra)
        (d / f'RoadRunner_seed{seed}{"_smoke" if extra.get("smoke") else ""}.json').write_text(json.dumps(r))

    store('results', 'table', 1, 8000.0, [[10, 3000]])
    store('results', 'table', 0, 11000.0, [[10, 500], [20, 2500]])
    store('lab', 'ez', 0, 2500.0, [[10, 900]] * 3)
    store('lab', 'ez', 1, 0.0, [[10, 9000]], smoke=True)
    store('lab', 'ez', 2, 0.0, [[10, 9000]], agent_steps=10_240)
    rows = plateau.table('RoadRunner', 2000, 1, [str(tmp_path / 'results'), str(tmp_path / 'lab')])
    assert rows == [('table', 0, 11000.0, 20), ('table', 1, 8000.0, 10), ('ez', 0, 2500.0, None)]


def test_the_stored_roadrunner_runs_give_the_figures_of_the_notes(capsys):
    """benchmarks/experiments/NOTES.md quotes these crossings (agent steps, mean of 10 games above 2,000)."""
    plateau = _load()
    assert plateau.main([]) == 0
    rows = {(a, s): step for a, s, _, step in plateau.table('RoadRunner', 2000, 10)}
    assert [rows[('drq_eps_narrow', s)] // 1000 for s in range(4)] == [19, 12, 52, 48]
    assert rows[('drq_eps_narrow_ez_decay', 0)] // 1000 == 97 and rows[('drq_eps_narrow_ez_warmup', 1)] // 1000 == 67
    out = capsys.readouterr().out
    assert 'drq_eps_narrow_ez_warmup' in out and '49,706' in out
