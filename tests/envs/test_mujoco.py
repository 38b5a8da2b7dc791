"""MuJoCo through gymnasium (optional extra 'mujoco') on the sync and subprocess backends."""
import importlib.util

import gymnasium as gym
import numpy as np
import pytest

from pipeline.envs import EnvManager, make_gym_env

HAVE_MUJOCO = all(importlib.util.find_spec(m) is not None for m in ('mujoco', 'imageio'))
needs_mujoco = pytest.mark.skipif(not HAVE_MUJOCO, reason="mujoco not installed (pip install 'rlpipe[mujoco]')")


@pytest.mark.multiprocess
@needs_mujoco
def test_halfcheetah_same_on_sync_and_subprocess_with_truncation():
    from pipeline.envs.mujoco import MujocoEnvFn
    acts = np.random.default_rng(0).uniform(-1, 1, (12, 2, 6)).astype(np.float32)
    out = []
    for backend in ('sync', 'subprocess'):
        with EnvManager(MujocoEnvFn('HalfCheetah-v5', max_episode_steps=5), 2, seed=3, backend=backend) as m:
            assert m.observation_space.shape == (17,) and m.action_space.high.max() == 1.0
            rec, eps = [m.reset().copy()], []
            for a in acts:
                s = m.step(a)
                rec += [s.next_obs, s.reward, m.obs.copy()]
                eps += s.finished
            out.append((rec, eps))
    (ra, ea), (rb, eb) = out
    assert ra[0].dtype == np.float32 and len(ea) == 4
    assert all(e.truncated and not e.terminated and e.length == 5 for e in ea) and ea == eb
    for x, y in zip(ra, rb):
        np.testing.assert_array_equal(x, y)


def test_missing_mujoco_names_the_extra(monkeypatch):
    def make(*a, **k):
        raise gym.error.DependencyNotInstalled("No module named 'mujoco'. (HINT: pip install \"gymnasium[mujoco]\")")
    monkeypatch.setattr(gym, 'make', make)
    with pytest.raises(ImportError, match=r"rlpipe\[mujoco\]"):
        make_gym_env('HalfCheetah-v5')
