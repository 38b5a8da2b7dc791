"""The Atari-100k protocol pieces of ``make_atari_env``: no sticky actions, no-op starts, life loss and
reward clipping for training only, the 108k-frame cap."""
import importlib.util

import numpy as np
import pytest

HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
pytestmark = [pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')"),
              pytest.mark.timeout(120)]


def _make(game, training, **kw):
    from pipeline.envs.atari import make_atari_env
    return make_atari_env(f'ALE/{game}-v5', training=training, **kw)


def test_v5_ids_without_sticky_actions_and_the_108k_frame_cap():
    env = _make('Pong', True)
    kw = env.unwrapped.spec.kwargs
    assert kw['repeat_action_probability'] == 0.0 and kw['frameskip'] == 1
    assert kw['max_num_frames_per_episode'] == 108_000
    env.close()


def test_noop_starts_vary_between_1_and_30_frames():
    env = _make('Breakout', False)
    frames = set()
    for seed in range(12):
        env.reset(seed=seed)
        frames.add(env.unwrapped.ale.getEpisodeFrameNumber())
    env.close()
    assert min(frames) >= 1 and max(frames) <= 30 and len(frames) >= 5


def _play(env, actions, stop_at_first_terminal):
    env.reset(seed=3)
    rewards, info = [], None
    for t, a in enumerate(actions):
        _, r, term, trunc, info = env.step(int(a))
        rewards.append(r)
        if term or trunc:
            return t, rewards, term, trunc, env.unwrapped.ale.lives()
        if stop_at_first_terminal is not None and t >= stop_at_first_terminal:
            break
    return None, rewards, False, False, env.unwrapped.ale.lives()


def test_life_loss_ends_training_episodes_only_and_rewards_are_clipped_for_training_only():
    actions = np.random.default_rng(0).integers(0, 6, 5000)
    train, evaluate = _make('SpaceInvaders', True), _make('SpaceInvaders', False)
    t_train, r_train, term, _, lives = _play(train, actions, None)
    assert term and t_train is not None and lives == 2            # a life lost: the training episode ends
    assert not train.unwrapped.ale.game_over()
    t_eval, r_eval, _, _, lives_eval = _play(evaluate, actions, t_train)
    assert t_eval is None and lives_eval == 2                     # the same play goes on in evaluation
    # same seed and actions, no sticky actions: the same game; raw points vs their sign
    assert max(r_eval[:t_train + 1]) >= 5
    np.testing.assert_array_equal(np.sign(r_eval[:t_train + 1]), r_train)
    assert set(r_train) <= {0.0, 1.0}
    train.close()
    evaluate.close()


def test_a_game_is_truncated_at_the_frame_cap():
    env = _make('Pong', False, max_num_frames_per_episode=400)   # 100 agent steps of 4 frames
    env.reset(seed=0)
    for t in range(200):
        _, _, term, trunc, _ = env.step(0)
        if term or trunc:
            break
    assert trunc and not term and 90 <= t + 1 <= 100
    env.close()
