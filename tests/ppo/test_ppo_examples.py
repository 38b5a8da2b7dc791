"""The PPO examples share the training examples' flags: run folders, --resume continues a run, --play
runs a saved policy (discrete and continuous), the example's config is saved with the checkpoint."""
import importlib.util
import json
import logging
import os
import re

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QUIET = ['--no-progress']


def load(name):
    spec = importlib.util.spec_from_file_location(f'{name}_ppo_test', os.path.join(ROOT, 'examples', f'{name}.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ppo_cartpole_resume_continues_and_play_runs_the_saved_policy(tmp_path, monkeypatch, capsys, caplog):
    monkeypatch.chdir(tmp_path)
    mod = load('ppo_cartpole')
    assert mod.main(['--max-env-step', '512', '--no-stop', *QUIET]) == 0  # 2 rollouts of 8 x 32
    out = capsys.readouterr().out
    run = tmp_path / 'cartpole_ppo' / '1'
    final, best = run / 'ckpt' / 'final.pth.tar', run / 'ckpt' / 'eval.pth.tar'
    assert 'after 512 env steps, 2 train iters' in out and final.is_file() and best.is_file()
    saved = json.loads((run / 'config.json').read_text())['config']
    assert saved['policy']['learn']['n_epochs'] == 20 and saved['env']['env_id'] == 'CartPole-v1'
    state = torch.load(final, weights_only=True)
    assert state['counters']['env_step'] == 512 and state['extra']['policy_type'] == 'ppo'
    assert state['policy']['learn']['counters']['num_minibatch_updates_lifetime'] == 2 * 20  # learner + optimizer

    with caplog.at_level(logging.INFO):
        assert mod.main(['--max-env-step', '1024', '--no-stop', '--resume', str(final), *QUIET]) == 0
    out = capsys.readouterr().out
    assert 'after 1024 env steps, 4 train iters' in out  # continued from 512 / 2, not from 0
    assert any(f'resumed from {final}' in r.getMessage() for r in caplog.records)
    assert not (tmp_path / 'cartpole_ppo' / '2').exists()  # it continues run 1 in its folder (issue 48)
    resumed = torch.load(final, weights_only=True)
    assert resumed['policy']['learn']['counters']['num_minibatch_updates_lifetime'] == 4 * 20

    assert mod.main(['--play', str(best), '--episodes', '2']) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r'episode \d: return [\d.]+ \(\d+ steps\)', out)) == 2
    assert 'mean return over 2 episodes' in out
    assert sorted(os.listdir(tmp_path / 'cartpole_ppo')) == ['1']  # --play makes no run folder


def test_ppo_pendulum_play_loads_a_continuous_policy(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    mod = load('ppo_pendulum')
    assert mod.main(['--max-env-step', '256', '--set', 'policy.collect.n_steps=64', '--set',
                     'env.n_evaluator_episode=1', '--set', 'env.evaluator_env_num=1', *QUIET]) == 0
    final = tmp_path / 'pendulum_ppo' / '1' / 'ckpt' / 'final.pth.tar'
    assert final.is_file()
    capsys.readouterr()
    assert mod.main(['--play', str(final), '--episodes', '1']) == 0
    out = capsys.readouterr().out
    assert re.search(r'episode 1: return -[\d.]+ \(200 steps\)', out), out

    from pipeline.policy import load_policy
    policy = load_policy(str(final))  # three lines: load, then act on a batch of observations
    actions = policy(torch.zeros((3, 3)).numpy())
    assert actions.shape == (3, 1) and (abs(actions) <= 2.0).all()  # clipped to Pendulum's bounds


def test_ppo_example_help_lists_the_shared_flags(capsys):
    for name in ('ppo_cartpole', 'ppo_pendulum', 'ppo_mujoco'):
        with pytest.raises(SystemExit) as e:
            load(name).main(['--help'])
        assert e.value.code == 0
        out = capsys.readouterr().out
        for flag in ('--exp-name', '--seed', '--set', '--resume', '--play', '--middleware', '--no-stop'):
            assert flag in out, f'{name} --help lacks {flag}'
        assert ('--env' in out) == (name == 'ppo_mujoco')
