"""The HER/RND examples run end to end on a tiny budget; counters and shapes are checked.

Learning itself (success rates) is measured by benchmarks/bench_her_rnd.py, not here.
"""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "examples", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("no_her", [False, True])
def test_her_bitflip_tiny_budget(no_her):
    ex = load("her_bitflip")
    args = ["--bits", "5", "--max-env-step", "300", "--eval-episodes", "4", "--stop-success", "2", "--quiet"]
    r = ex.main(args + (["--no-her"] if no_her else []))
    assert r["her"] == (not no_her)
    assert r["env_step"] >= 300
    assert r["buffer_count"] == r["env_episode"]  # each finished episode is pushed whole, once
    steps = r["train_iter"] // 16  # every pipeline step trains update_per_collect=16 rounds
    assert r["train_iter"] == 16 * steps and steps >= 1
    assert 16 * steps <= r["env_episode"]  # each step collected at least n_episode=16 episodes
    assert r["env_step"] <= 5 * r["env_episode"] + 4 * 5  # episodes last at most 5 steps (plus partials)
    out = r["train_output"]
    assert isinstance(out, list) and len(out) == 16 and all("total_loss" in o for o in out)
    b = r["train_data"]
    n = b.obs.shape[0]
    assert 16 <= n <= 128 and b.obs.shape == b.next_obs.shape == (n, 15)  # 16 episodes x <= 8 rows
    assert b.reward.shape == b.terminated.shape == b.action.shape == (n,)
    assert 0.0 <= r["success_rate"] <= 1.0
