"""Smoke runs of the Atari and MuJoCo examples (a few hundred env steps each); learning itself is
documented in the README, not tested here."""
import importlib.util
import os

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
HAVE_MUJOCO = all(importlib.util.find_spec(m) is not None for m in ('mujoco', 'imageio'))
pytestmark = pytest.mark.timeout(300)


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'examples', f'{name}.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')")
def test_dqn_atari_smoke(tmp_path):
    ex = load('dqn_atari')
    r = ex.main(['--max-env-step', '320', '--env-num', '4', '--learning-starts', '200', '--buffer-size', '1000',
                 '--eval-episodes', '1', '--eval-freq', '1000', '--max-episode-steps', '60',
                 '--exp-name', str(tmp_path / 'atari'), '--threads', str(torch.get_num_threads()), '--quiet'])
    assert r['env_step'] >= 320 and r['train_iter'] > 0
    assert r['buffer_count'] == r['env_step'] - 2 * 4   # 3-step returns hold back 2 steps per env
    assert r['env_episode'] >= 4                         # 60-step episodes were cut and reset
    assert -60 <= r['last_eval_score'] <= 60             # a raw game score from the evaluator


@pytest.mark.skipif(not HAVE_MUJOCO, reason="mujoco not installed (pip install 'rlpipe[mujoco]')")
def test_sac_mujoco_smoke(tmp_path):
    ex = load('sac_mujoco')
    r = ex.main(['--max-env-step', '300', '--learning-starts', '256', '--random-steps', '256',
                 '--eval-episodes', '1', '--eval-freq', '1000', '--max-episode-steps', '100',
                 '--buffer-size', '1000', '--exp-name', str(tmp_path / 'sac'),
                 '--threads', str(torch.get_num_threads()), '--quiet'])
    assert r['env_step'] == 300 and r['buffer_count'] == 300 and r['env_episode'] == 3
    assert r['train_iter'] == 300 - 256 + 1             # one update per env step once 256 are stored


@pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')")
def test_ppo_atari_smoke(tmp_path):
    ex = load('ppo_atari')
    r = ex.main(['--max-env-step', '256', '--env-num', '4', '--n-steps', '32', '--eval-episodes', '1',
                 '--eval-freq', '100', '--max-episode-steps', '50', '--exp-name', str(tmp_path / 'ppo'),
                 '--threads', str(torch.get_num_threads()), '--quiet'])
    assert r['env_step'] == 256 and r['train_iter'] == 2    # two rollouts of 4 envs x 32 steps, one update each
    assert r['env_episode'] >= 4
    assert -50 <= r['last_eval_score'] <= 50
