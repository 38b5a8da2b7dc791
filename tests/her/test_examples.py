"""The HER/RND examples run end to end on a tiny budget; counters and shapes are checked.

Learning itself (success rates) is measured by benchmarks/bench_her_rnd.py, not here.
"""
import importlib.util
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(autouse=True)
def _in_tmp_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the examples write their run folders under the current directory


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
    n = b["obs"].shape[0]
    assert 16 <= n <= 128 and b["obs"].shape == b["next_obs"].shape == (n, 15)  # 16 episodes x <= 8 rows
    assert b["reward"].shape == b["terminated"].shape == b["action"].shape == (n,)
    assert 0.0 <= r["success_rate"] <= 1.0


def test_her_point_tiny_budget():
    ex = load("her_point")
    r = ex.main(["--max-env-step", "800", "--eval-episodes", "3", "--stop-success", "2", "--quiet"])
    assert r["her"] and r["distance_threshold"] == 0.05
    # episodes never end early: 4 envs x 8 episodes x 50 steps = 400 env steps per pipeline step
    assert r["env_step"] == 800 and r["env_episode"] == 16 and r["buffer_count"] == 16
    # learning starts once the buffer holds 16 episodes (the 2nd step), which trains 64 rounds
    assert r["train_iter"] == 64
    b = r["train_data"]
    n = b["obs"].shape[0]
    assert n == 128 and b["obs"].shape == (n, 6) and b["action"].shape == (n, 2) and b["reward"].shape == (n,)
    assert b["action"].dtype == torch.float32 and bool((b["action"].abs() <= 1).all())
    assert bool(((b["reward"] == 0) | (b["reward"] == -1)).all()) and not bool(b["terminated"].any())
    out = r["train_output"]
    assert len(out) == 64 and all({"actor", "critic", "alpha"} <= set(o) for o in out)
    assert 0.0 <= r["success_rate"] <= 1.0


@pytest.mark.parametrize("no_rnd", [False, True])
def test_dqn_rnd_tiny_budget(no_rnd):
    ex = load("dqn_rnd")
    r = ex.main(["--size", "6", "--max-episodes", "12", "--quiet"] + (["--no-rnd"] if no_rnd else []))
    assert r["rnd"] == (not no_rnd)
    # one env, n_sample = size: each pipeline step collects exactly one episode of 6 steps
    steps = r["env_step"] // 6
    assert r["env_step"] == 6 * steps and r["env_episode"] == steps and r["buffer_count"] == r["env_step"]
    assert steps <= 12 and (r["found"] or steps == 12)
    # training starts once 64 transitions are stored (after 11 episodes), 8 rounds per step
    trained_steps = max(0, steps - 10)
    assert r["train_iter"] == 8 * trained_steps
    assert r["rnd_train_iter"] == (0 if no_rnd else r["train_iter"])
    if r["train_iter"]:
        assert r["train_data"]["obs"].shape == (64, 36) and r["train_data"]["reward"].shape == (64,)
        if not no_rnd:
            assert (r["train_data"]["reward"] > 0.001).any()  # env rewards are 0 or -0.0005: the bonus shows


def test_dqn_rnd_is_reproducible_per_seed():
    ex = load("dqn_rnd")
    args = ["--size", "6", "--max-episodes", "14", "--quiet", "--seed", "3"]
    a, b = ex.main(args), ex.main(args)
    assert a["train_iter"] == b["train_iter"] > 0
    assert torch.equal(a["train_data"]["obs"], b["train_data"]["obs"])
    assert torch.equal(a["train_data"]["reward"], b["train_data"]["reward"])
