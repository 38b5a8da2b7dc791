"""The pieces the HER/RND examples share from the library: NoRelabel, goal_success_rate, RunRecorder,
play_without_rendering, and CkptSaver(modules=...) so that a resumed RND run keeps its predictor (issue 17 item 6)."""
import argparse
import importlib.util
import logging
import os

import numpy as np
import pytest
import torch

from middleware import CkptSaver
from pipeline.checkpoint import CheckpointError
from pipeline.reward_model import NoRelabel, RndRewardModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _episode(n, tag):
    return [{"obs": np.full(2, i, np.float32), "reward": -1.0, "tag": tag} for i in range(n)]


def test_no_relabel_copies_and_samples_each_episode_reproducibly():
    eps = [_episode(10, "a"), _episode(3, "b")]
    out = NoRelabel(episode_size=4, sample_per_episode=5, seed=1).relabel(eps)
    assert [t["tag"] for t in out] == ["a"] * 5 + ["b"] * 3  # a short episode is kept whole
    firsts = [float(t["obs"][0]) for t in out[:5]]
    assert firsts == sorted(firsts) and len(set(firsts)) == 5  # a subset, in order, no repeats
    assert out == NoRelabel(episode_size=4, sample_per_episode=5, seed=1).relabel(eps)
    out[0]["reward"] = 5.0
    assert all(t["reward"] == -1.0 for ep in eps for t in ep)  # the input is never modified
    assert len(NoRelabel().relabel(eps)) == 13
    with pytest.raises(ValueError, match="sample_per_episode"):
        NoRelabel(sample_per_episode=0)


def test_goal_success_rate_counts_episodes_that_reached_the_goal(monkeypatch):
    import middleware.functional.evaluator as ev
    from middleware.her import goal_success_rate

    # returns above -length: some step paid 0 (the goal); -length: never reached
    monkeypatch.setattr(ev, "evaluate_episodes", lambda p, e, n: (np.array([-3.0, -5.0, 0.0, -4.0]),
                                                                    np.array([5, 5, 1, 4])))
    assert goal_success_rate(None, None, 4) == 0.5


def test_run_recorder_keeps_the_last_step_and_sums_up():
    from contexts import OnlineRLContext
    from pipeline.run.record import RunRecorder

    rec = RunRecorder()
    ctx = OnlineRLContext()
    ctx.train_output, ctx.train_data, ctx.env_step, ctx.train_iter = [{"loss": 1.0}], {"obs": 1}, 7, 3
    rec(ctx)
    s = rec.summary(ctx, "/runs/1", False, success_rate=0.5)
    assert list(s)[0] == "success_rate" and s["success_rate"] == 0.5
    assert (s["env_step"], s["train_iter"], s["train_output"], s["train_data"]) == (7, 3, [{"loss": 1.0}], {"obs": 1})
    assert s["run_dir"] == "/runs/1" and s["interrupted"] is False and s["wall_time"] >= 0


def test_play_checkpoint_refuses_rendering_for_an_env_without_it():
    from pipeline.run import play_without_rendering

    args = argparse.Namespace(render=True, video=None, episodes=1, seed=0)
    with pytest.raises(SystemExit, match="DeepSea has no rendering"):
        play_without_rendering("x.pth.tar", None, lambda: None, args, "DeepSea")


class _Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)


def _rnd(seed):
    return RndRewardModel(obs_dim=4, hidden=(8,), embed_dim=4, seed=seed)


def test_ckpt_saver_saves_and_restores_extra_modules(tmp_path, caplog):
    from contexts import OnlineRLContext

    rnd = _rnd(0)
    for _ in range(3):
        rnd.train([{"next_obs": np.random.rand(4).astype(np.float32), "reward": 0.0} for _ in range(8)])
    path = CkptSaver(_Policy(), str(tmp_path), modules={"rnd": rnd}).save_final(OnlineRLContext())
    fresh = _rnd(1)
    assert not torch.equal(fresh.predictor[0].weight, rnd.predictor[0].weight)
    CkptSaver(_Policy(), str(tmp_path / "b"), resume_from=path, modules={"rnd": fresh})
    for a, b in zip(rnd.predictor.parameters(), fresh.predictor.parameters()):
        assert torch.equal(a, b)
    assert fresh.train_iter == 3 and torch.equal(fresh.obs_rms.mean, rnd.obs_rms.mean)
    # a checkpoint without it: a warning, the module starts afresh; one that does not fit: refused
    plain = CkptSaver(_Policy(), str(tmp_path / "c")).save_final(OnlineRLContext())
    with caplog.at_level(logging.WARNING):
        CkptSaver(_Policy(), str(tmp_path / "d"), resume_from=plain, modules={"rnd": _rnd(2)})
    assert "holds no state for 'rnd'" in caplog.text
    with pytest.raises(CheckpointError, match="the saved 'rnd' does not fit"):
        CkptSaver(_Policy(), str(tmp_path / "e"), resume_from=path,
                  modules={"rnd": RndRewardModel(obs_dim=5, hidden=(8,), embed_dim=4)})
    with pytest.raises(TypeError, match="state_dict"):
        CkptSaver(_Policy(), str(tmp_path / "f"), modules={"rnd": object()})


def test_dqn_rnd_resume_continues_the_rnd_predictor(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = importlib.util.spec_from_file_location("dqn_rnd", os.path.join(ROOT, "examples", "dqn_rnd.py"))
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    first = ex.main(["--size", "6", "--max-episodes", "14", "--quiet"])
    final = os.path.join(first["run_dir"], "ckpt", "final.pth.tar")
    assert first["rnd_train_iter"] == first["train_iter"] > 0
    saved = torch.load(final, weights_only=True)["modules"]["rnd"]
    assert saved["train_iter"] == first["rnd_train_iter"]
    again = ex.main(["--size", "6", "--max-episodes", "16", "--quiet", "--resume", final])
    # the predictor continued from the saved one: its update count goes on from the first run's
    assert again["rnd_train_iter"] == again["train_iter"] > first["train_iter"]


def test_run_script_exits_with_the_code_of_main_and_one_line_on_ctrl_c(capsys):
    from pipeline.run import run_script

    def interrupted():
        raise KeyboardInterrupt

    for main, code in ((lambda: 3, 3), (lambda: {"success_rate": 1.0}, 0), (interrupted, 130)):
        with pytest.raises(SystemExit) as e:
            run_script(main)
        assert e.value.code == code
    assert capsys.readouterr().out.strip() == "interrupted before training started; nothing saved"
