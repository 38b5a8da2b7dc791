"""PPO reaches the maximum return (1000) of MuJoCo's InvertedPendulum-v5 in a short run
(``examples/ppo_mujoco.py``; seed 0 solves after ~16k env steps, ~11 s of CPU)."""
import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.slow
def test_ppo_inverted_pendulum_reaches_1000(tmp_path, monkeypatch, capsys):
    pytest.importorskip('mujoco', reason="mujoco is not installed (pip install 'rlpipe[mujoco]'): "
                                         "PPO on InvertedPendulum-v5 not checked")
    spec = importlib.util.spec_from_file_location('ppo_mujoco_test', os.path.join(ROOT, 'examples', 'ppo_mujoco.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.chdir(tmp_path)
    # a budget of 60k env steps (seeds 0-5 solved after 8-16k); it stops once solved
    status = mod.main(['--env', 'InvertedPendulum-v5', '--seed', '0', '--max-env-step', '60000', '--no-progress'])
    out = capsys.readouterr().out
    assert status == 0, out[-2000:]
    assert 'solved: last mean eval return 1000.0 (stop value 1000)' in out, out[-2000:]
    assert (tmp_path / 'mujoco_ppo_InvertedPendulum-v5' / '1' / 'ckpt' / 'eval.pth.tar').is_file()
