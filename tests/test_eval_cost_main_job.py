"""The main job's evaluation costs fewer env steps than its training (issue 48). Seed 9 solved after 3,732
training + 5,010 evaluation env steps before: a solved 10-episode evaluation alone costs ~5,000, so a policy
that learned faster than that paid more for evaluating than for training. Now an evaluation starts only when
its worst case keeps evaluation below training (``pipeline.run.recipes.EVAL_COST_RATIO``); per-seed figures:
docs/benchmarks.md."""
import importlib.util
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_seed_9_solves_with_fewer_evaluation_than_training_env_steps(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location('dqn_cartpole_eval_cost', os.path.join(ROOT, 'examples',
                                                                                         'dqn_cartpole.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    try:
        rc = mod.main(['--seed', '9', '--no-progress', '--max-env-step', '50000'])
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    m = re.search(r'after (\d+) training \+ (\d+) evaluation env steps', out)
    assert m, out[-2000:]
    train, evaluation = int(m.group(1)), int(m.group(2))
    assert evaluation < train, out[-2000:]
    assert rc == 0 and evaluation >= 4750  # solved: 10 complete episodes with a mean >= 475 were run
