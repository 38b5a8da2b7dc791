"""Smoke runs of the Atari and MuJoCo examples (a few hundred env steps each) with the flags every
training example shares: run folders, --set, --resume, --play on the checkpoint a smoke run wrote.
Learning itself is documented in the README, not tested here."""
import importlib.util
import json
import os

import numpy as np
import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HAVE_ATARI = all(importlib.util.find_spec(m) is not None for m in ('ale_py', 'cv2'))
HAVE_MUJOCO = all(importlib.util.find_spec(m) is not None for m in ('mujoco', 'imageio'))
pytestmark = pytest.mark.timeout(300)
needs_atari = pytest.mark.skipif(not HAVE_ATARI, reason="ale-py / opencv not installed (pip install 'rlpipe[atari]')")
needs_mujoco = pytest.mark.skipif(not HAVE_MUJOCO, reason="mujoco not installed (pip install 'rlpipe[mujoco]')")
THREADS = ['--threads', str(torch.get_num_threads()), '--quiet']


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, 'examples', f'{name}.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_run_folder(r, exp):
    assert os.path.dirname(r['run_dir']) == str(exp) and os.path.basename(r['run_dir']) == '1'
    saved = json.load(open(os.path.join(r['run_dir'], 'config.json')))
    assert os.listdir(os.path.join(r['run_dir'], 'log'))            # TensorBoard events
    assert os.path.isfile(os.path.join(r['run_dir'], 'ckpt', 'final.pth.tar'))
    return saved['config']


@pytest.mark.multiprocess
@pytest.mark.parametrize('name', ['dqn_atari', 'ppo_atari', 'sac_mujoco'])
def test_help_answers_without_importing_torch(name, help_without_torch):
    text = help_without_torch(os.path.join(ROOT, 'examples', f'{name}.py'))
    for flag in ('--exp-name', '--seed', '--set', '--resume', '--play', '--video', '--middleware', '--env',
                 '--backend', '--max-episode-steps'):
        assert flag in text, f'{name} --help lacks {flag}'


@pytest.mark.parametrize('name, default', [('dqn_atari', 'atari_dqn'), ('ppo_atari', 'atari_ppo'),
                                           ('sac_mujoco', 'mujoco_sac')])
def test_the_default_exp_name_gives_one_run_folder_per_env(name, default):
    parser = load(name).build_parser()
    env = parser.get_default('env')
    assert parser.parse_args([]).exp_name == f'{default}_{env}'
    assert parser.parse_args(['--env', 'ALE/Breakout-v5']).exp_name == f'{default}_Breakout-v5'
    assert parser.parse_args(['--exp-name', 'mine', '--env', 'X-v1']).exp_name == 'mine'


@pytest.mark.multiprocess
@pytest.mark.slow
@needs_atari
def test_dqn_atari_smoke_then_play(tmp_path):
    ex = load('dqn_atari')
    seen = []
    r = ex.main(['--max-env-step', '320', '--env-num', '4', '--eval-episodes', '1', '--max-episode-steps', '60',
                 '--set', 'policy.learn.learning_starts=200', '--set', 'policy.other.replay_buffer.replay_buffer_size=1000',
                 '--set', 'policy.eval.evaluator.eval_freq=1000', '--exp-name', str(tmp_path / 'atari'), *THREADS],
                extra_middleware=[lambda ctx: seen.append(ctx.env_step)])
    assert r['env_step'] >= 320 and r['train_iter'] > 0 and seen
    assert r['buffer_count'] == r['env_step'] - 2 * 4   # 3-step returns hold back 2 steps per env
    assert r['env_episode'] >= 4                         # 60-step episodes were cut and reset
    assert -60 <= r['last_eval'] <= 60                   # a raw game score from the evaluator
    cfg = check_run_folder(r, tmp_path / 'atari')
    assert cfg['policy']['learn']['learning_starts'] == 200 and cfg['env']['max_episode_steps'] == 60
    p = ex.main(['--play', os.path.join(r['run_dir'], 'ckpt', 'eval.pth.tar'), '--episodes', '2', *THREADS])
    assert len(p['play_returns']) == 2 and all(-60 <= x <= 60 for x in p['play_returns'])


@pytest.mark.multiprocess
@pytest.mark.slow
@needs_atari
def test_dqn_atari_save_buffer_writes_a_frame_efficient_buffer_that_loads_back_and_resumes(tmp_path):
    from types import SimpleNamespace

    ex = load('dqn_atari')
    small = ['--env-num', '4', '--eval-episodes', '1', '--max-episode-steps', '60', '--set',
             'policy.learn.learning_starts=10000', '--set', 'policy.other.replay_buffer.replay_buffer_size=1000',
             '--set', 'policy.eval.evaluator.eval_freq=100000', '--exp-name', str(tmp_path / 'atari'),
             '--save-buffer', *THREADS]
    r = ex.main(['--max-env-step', '200', *small])
    assert r['buffer_count'] == 200 - 2 * 4                 # 3-step returns hold back 2 steps per env
    path = os.path.join(r['run_dir'], 'ckpt', 'final.buffer')
    cfg = SimpleNamespace(seed=0, policy=SimpleNamespace(other=SimpleNamespace(
        replay_buffer=SimpleNamespace(replay_buffer_size=1000))))
    buf = ex.make_buffer(cfg)
    buf.load_data(path)
    assert buf.count() == r['buffer_count']
    item = buf.get(0).data
    assert item['obs'].shape == (4, 84, 84) and item['obs'].dtype == np.uint8 and item['obs'].any()
    assert item['next_obs'].shape == (4, 84, 84)
    # each 84x84 frame once (a stacked obs + next_obs per transition would be 56 KB)
    assert os.path.getsize(path) < 15_000 * buf.count(), os.path.getsize(path)
    final = os.path.join(r['run_dir'], 'ckpt', 'final.pth.tar')
    r2 = ex.main(['--max-env-step', '240', '--resume', final, *small])   # the buffer continues
    # the restored 192 and the 40 new steps, less the 2 per env that the restarted 3-step returns hold back
    assert r2['env_step'] == 240 and r2['buffer_count'] == r['buffer_count'] + 40 - 2 * 4


@pytest.mark.multiprocess
@pytest.mark.slow
@needs_mujoco
def test_sac_mujoco_smoke_resume_and_play(tmp_path):
    ex = load('sac_mujoco')
    small = ['--eval-episodes', '1', '--max-episode-steps', '100', '--set', 'policy.learn.learning_starts=256',
             '--set', 'policy.collect.random_collect_size=256', '--set', 'policy.eval.evaluator.eval_freq=1000',
             '--set', 'policy.other.replay_buffer.replay_buffer_size=1000', '--exp-name', str(tmp_path / 'sac'),
             '--save-buffer', *THREADS]
    r = ex.main(['--max-env-step', '300', *small])
    assert r['env_step'] == 300 and r['buffer_count'] == 300 and r['env_episode'] == 3
    assert r['train_iter'] == 300 - 256 + 1             # one update per env step once 256 are stored
    assert check_run_folder(r, tmp_path / 'sac')['policy']['collect']['random_collect_size'] == 256
    final = os.path.join(r['run_dir'], 'ckpt', 'final.pth.tar')
    r2 = ex.main(['--max-env-step', '350', '--resume', final, *small])   # counters, weights and buffer continue
    assert r2['run_dir'] == r['run_dir']  # the resumed run continues its run folder (issue 48)
    assert r2['env_step'] == 350 and r2['train_iter'] == 350 - 256 + 1 and r2['buffer_count'] == 350
    p = ex.main(['--play', final, '--episodes', '2', *THREADS])
    assert len(p['play_returns']) == 2 and all(abs(x) < 1000 for x in p['play_returns'])
    from pipeline.policy import load_policy   # the networks' sizes come from the weights (not in the config)
    act = load_policy(final)(np.zeros((2, 17), dtype=np.float32))   # HalfCheetah-v5: 17 -> 6
    assert act.shape == (2, 6) and np.all(np.abs(act) <= 1)


@pytest.mark.multiprocess
@pytest.mark.slow
@needs_atari
def test_ppo_atari_smoke_then_play(tmp_path):
    ex = load('ppo_atari')
    r = ex.main(['--max-env-step', '256', '--env-num', '4', '--set', 'policy.collect.n_steps=32',
                 '--eval-episodes', '1', '--set', 'policy.eval.evaluator.eval_freq=100', '--max-episode-steps', '50',
                 '--exp-name', str(tmp_path / 'ppo'), *THREADS])
    assert r['env_step'] == 256 and r['train_iter'] == 2    # two rollouts of 4 envs x 32 steps, one update each
    assert r['env_episode'] >= 4
    assert -50 <= r['last_eval'] <= 50
    assert check_run_folder(r, tmp_path / 'ppo')['policy']['collect']['n_steps'] == 32
    p = ex.main(['--play', os.path.join(r['run_dir'], 'ckpt', 'eval.pth.tar'), '--episodes', '1', *THREADS])
    assert len(p['play_returns']) == 1 and -50 <= p['play_returns'][0] <= 50


@needs_mujoco
def test_bad_set_key_and_foreign_checkpoint_are_refused_before_anything_runs(tmp_path):
    ex = load('sac_mujoco')
    with pytest.raises(SystemExit, match='policy.learn.batch_sise'):
        ex.main(['--set', 'policy.learn.batch_sise=3', '--exp-name', str(tmp_path / 'x'), *THREADS])
    junk = tmp_path / 'junk.pth.tar'
    junk.write_bytes(b'garbage' * 20)
    with pytest.raises(SystemExit, match='not a checkpoint'):
        ex.main(['--play', str(junk), *THREADS])
    assert not (tmp_path / 'x').exists()
