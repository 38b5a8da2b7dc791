"""Atari through ale-py (optional extra 'atari'): preprocessing, training-only wrappers, raw score."""
import importlib.util

import numpy as np
import pytest

from pipeline.envs import EnvManager

HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
pytestmark = [pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')"),
              pytest.mark.timeout(180)]


def test_preprocessed_observations_and_clipped_rewards():
    from pipeline.envs.atari import make_atari_env
    env = make_atari_env('PongNoFrameskip-v4', training=True)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert env.action_space.n == 6
    env.close()


def test_episodic_life_for_training_and_raw_score_reported():
    from pipeline.envs.atari import AtariEnvFn
    rng = np.random.default_rng(0)
    with EnvManager(AtariEnvFn('ALE/SpaceInvaders-v5', training=True), 1, seed=0) as m:
        m.reset()
        lives, rewards = [], set()
        while True:
            s = m.step(rng.integers(0, 6, 1))
            rewards.add(float(s.reward[0]))
            if s.finished:
                lives += s.finished
                if s.finished[0].score is not None:
                    break
    assert len(lives) == 3 and all(e.terminated for e in lives)      # one training episode per life
    assert [e.score is None for e in lives] == [True, True, False]    # the raw score comes with the game over
    assert rewards <= {0.0, 1.0}                                       # clipped (invaders score 5..30)
    clipped = sum(e.episode_return for e in lives)
    assert lives[-1].score >= 5 * clipped > 0


def test_evaluation_env_keeps_whole_games_and_raw_rewards():
    from pipeline.envs.atari import AtariEnvFn
    rng = np.random.default_rng(0)
    with EnvManager(AtariEnvFn('ALE/SpaceInvaders-v5', training=False), 1, seed=0, keep_infos=True) as m:
        m.reset()
        rewards = set()
        for _ in range(2000):
            s = m.step(rng.integers(0, 6, 1))
            assert not s.done[0]                      # a lost life does not end an evaluation episode
            rewards.add(float(s.reward[0]))
            if s.infos[0]['lives'] < 3 and max(rewards) >= 5:
                break
    assert max(rewards) >= 5 and s.infos[0]['lives'] < 3


@pytest.mark.multiprocess
def test_atari_subprocess_matches_sync():
    from pipeline.envs.atari import AtariEnvFn
    acts = np.random.default_rng(1).integers(0, 6, (30, 2))
    out = []
    for backend in ('sync', 'subprocess'):
        with EnvManager(AtariEnvFn('PongNoFrameskip-v4'), 2, seed=5, backend=backend) as m:
            rec = [m.reset().copy()]
            for a in acts:
                s = m.step(a)
                rec.append(s.next_obs)
            out.append(np.stack(rec))
    np.testing.assert_array_equal(out[0], out[1])
    assert out[0][:, 0].std() > 0


def test_envpool_atari_names():
    from pipeline.envs.atari import envpool_atari_kwargs, envpool_atari_task
    assert envpool_atari_task('PongNoFrameskip-v4') == 'Pong-v5' == envpool_atari_task('ALE/Pong-v5')
    assert envpool_atari_kwargs(False)['episodic_life'] is False
