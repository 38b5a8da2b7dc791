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


def _check_contract(m, steps, rng, max_len):
    """Step ``m`` (CartPole, random actions, some steps on a subset of envs) and check at every step:
    obs continuity, the true final observation, same-step reset, termination vs truncation, returns."""
    n = m.env_num
    obs = m.reset().copy()
    ep_len = np.zeros(n, int)
    finished = 0
    for t in range(steps):
        ids = np.arange(n) if t % 5 else np.sort(rng.choice(n, 2, replace=False))
        s = m.step(rng.integers(0, 2, len(ids)), env_ids=None if t % 5 else ids)
        np.testing.assert_array_equal(s.obs, obs[ids])                    # acted in the observation we had
        untouched = np.setdiff1d(np.arange(n), ids)
        np.testing.assert_array_equal(m.obs[untouched], obs[untouched])    # envs not stepped did not move
        ep_len[ids] += 1
        ends = {e.env_id: e for e in s.finished}
        for j, i in enumerate(ids.tolist()):
            if s.done[j]:
                e = ends.pop(i)
                assert e.length == ep_len[i] and e.episode_return == e.length      # reward 1 per step
                assert e.terminated == bool(s.terminated[j]) and e.truncated == bool(s.truncated[j])
                out = abs(s.next_obs[j][0]) > 2.4 or abs(s.next_obs[j][2]) > 0.2095
                assert s.truncated[j] == (ep_len[i] == max_len)
                # the true final observation; EnvPool reports a fall on the time limit's step as truncated
                assert s.terminated[j] == out or (s.truncated[j] and not s.terminated[j])
                assert np.abs(m.obs[i]).max() < 0.05                               # reset in the same step
                ep_len[i] = 0
                finished += 1
            else:
                np.testing.assert_array_equal(m.obs[i], s.next_obs[j])
                assert ep_len[i] < max_len
        assert not ends
        obs = m.obs.copy()
    return finished


@needs_envpool
@pytest.mark.parametrize('path', ['spares', 'no spares left', 'envpool step'])
def test_envpool_contract_over_many_episodes(path, monkeypatch):
    """The manager's contract on every step, on each of the backend's paths: spare envs take over a
    finished slot; with no spare left the finished env is reset by a second call; pools whose layout
    the backend does not read directly go through EnvPool's own step."""
    from pipeline.envs import envpool_backend
    if path == 'envpool step':
        monkeypatch.setattr(envpool_backend, '_raw_layout', lambda pool: None)
    if path == 'no spares left':
        monkeypatch.setattr(envpool_backend, 'MAX_SPARES', 1)
    with EnvManager('CartPole-v1', 4, seed=0, backend='envpool', max_episode_steps=12) as m:
        finished = _check_contract(m, 400, np.random.default_rng(1), 12)
        assert finished > 80
        if path == 'no spares left':  # several envs finished in one step more than once
            assert m._backend._spares == 1


@needs_envpool
def test_envpool_same_seed_same_trajectories_and_infos():
    runs = []
    for seed in (5, 5, 6):
        with EnvManager('CartPole-v1', 3, seed=seed, backend='envpool', keep_infos=True) as m:
            rng = np.random.default_rng(0)
            m.reset()
            traj = []
            for _ in range(150):
                s = m.step(rng.integers(0, 2, 3))
                traj.append((s.next_obs.copy(), s.reward.copy(), s.done.copy(), m.obs.copy()))
                for j, info in enumerate(s.infos):
                    assert info['env_id'] == j                       # the slot, not the EnvPool env behind it
                    assert info['elapsed_step'] == m._ep_len[j] or s.done[j]   # one EnvPool env per episode
            runs.append(traj)
    for a, b in zip(runs[0], runs[1]):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
    assert any(not np.array_equal(a[0], b[0]) for a, b in zip(runs[0], runs[2]))
