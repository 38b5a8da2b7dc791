"""The EnvPool backend (optional extra): same contract as the other backends; clear error without it."""
import importlib.util
import sys

import numpy as np
import pytest

from pipeline.envs import EnvManager, UnknownEnvError

HAVE_ENVPOOL = importlib.util.find_spec('envpool') is not None  # not imported here: its import is slow

needs_envpool = pytest.mark.skipif(not HAVE_ENVPOOL, reason="envpool not installed (pip install 'rlpipe[envpool]')")


def test_missing_envpool_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, 'envpool', None)   # import envpool now raises ImportError
    with pytest.raises(ImportError, match=r"rlpipe\[envpool\]"):
        EnvManager('CartPole-v1', 2, backend='envpool')


@needs_envpool
def test_envpool_final_obs_termination_and_auto_reset():
    with EnvManager('CartPole-v1', 3, seed=0, backend='envpool') as m:
        obs = m.reset()
        assert obs.shape == (3, 4) and np.abs(obs).max() < 0.06
        finished = []
        for _ in range(60):
            s = m.step(np.ones(3, np.int64))        # always push right: every env falls
            if s.done.any():
                j = int(np.flatnonzero(s.done)[0])
                i = int(s.env_ids[j])
                assert s.terminated[j] and not s.truncated[j]
                final = s.next_obs[j]
                assert abs(final[0]) > 2.4 or abs(final[2]) > 0.2095   # the true final observation
                assert np.abs(m.obs[i]).max() < 0.06                   # already reset
                assert m.episode_returns_so_far[i] == 0
                finished += s.finished
                break
        assert finished and finished[0].episode_return == finished[0].length > 5


@needs_envpool
def test_envpool_truncation_subset_steps_and_seeds():
    with EnvManager('CartPole-v1', 2, seed=3, backend='envpool', max_episode_steps=4) as m:
        a = m.reset().copy()
        s = m.step(np.array([0]), env_ids=[1])
        np.testing.assert_array_equal(m.obs[0], a[0])
        for _ in range(3):
            s = m.step(np.array([0, 1]))
        assert s.truncated.tolist() == [False, True] and not s.terminated.any()
        assert s.finished[0].env_id == 1 and s.finished[0].length == 4
        b = m.reset(seed=3)
        np.testing.assert_array_equal(a, b)                 # same seed: same start
        assert not np.array_equal(m.reset(seed=4), a)


@needs_envpool
def test_envpool_unknown_task_and_callables():
    with pytest.raises(UnknownEnvError, match='Pong-v5'):
        EnvManager('Pongg-v5', 1, backend='envpool')
    with pytest.raises(TypeError, match='task id'):
        EnvManager(lambda: None, 1, backend='envpool')
