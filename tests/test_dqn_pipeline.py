"""The whole DQN pipeline on CartPole for a few hundred env steps (fast CI check)."""
import math
import os

import pytest
import torch

from contexts import OnlineRLContext
from middleware import (CkptSaver, OffPolicyLearner, StepCollector, data_pusher, eps_greedy_handler,
                        interaction_evaluator, nstep_reward_enhancer, online_logger, termination_checker)
from pipeline import task
from pipeline.config import compile_config
from pipeline.data import DequeBuffer, PrioritizedSampler
from pipeline.envs import EnvManager
from pipeline.policy import DQNPolicy


def build(tmp_path, per=False, nstep=1):
    cfg = compile_config({
        'exp_name': str(tmp_path / 'exp'),
        'env': {'env_id': 'CartPole-v1', 'collector_env_num': 4, 'evaluator_env_num': 2, 'n_evaluator_episode': 2,
                'stop_value': 10_000},
        'policy': {'nstep': nstep, 'model': {'obs_shape': 4, 'action_shape': 2, 'encoder_hidden_size_list': [32, 32]},
                   'learn': {'update_per_collect': 3, 'batch_size': 16, 'learning_starts': 32},
                   'eval': {'evaluator': {'eval_freq': 30}},
                   'other': {'replay_buffer': {'replay_buffer_size': 500}}},
    })
    policy = DQNPolicy(cfg, seed=0)
    buf = DequeBuffer(cfg.policy.other.replay_buffer.replay_buffer_size, seed=0,
                      sampler=PrioritizedSampler() if per else None)
    return cfg, policy, buf


def run(cfg, policy, buf, max_env_step=240):
    cenv = EnvManager(cfg.env.env_id, cfg.env.collector_env_num, seed=0)
    eenv = EnvManager(cfg.env.env_id, cfg.env.evaluator_env_num, seed=100)
    saver = CkptSaver(policy, cfg.exp_name, train_freq=50)
    import io
    logger = online_logger(cfg.exp_name, stream=io.StringIO())
    with task.start(ctx=OnlineRLContext()):
        task.use(interaction_evaluator(cfg, policy.eval_mode, eenv))
        task.use(eps_greedy_handler(cfg))
        task.use(StepCollector(cfg, policy.collect_mode, cenv))
        if cfg.policy.nstep > 1:
            task.use(nstep_reward_enhancer(cfg))
        task.use(data_pusher(cfg, buf))
        task.use(OffPolicyLearner(cfg, policy.learn_mode, buf))
        task.use(saver)
        task.use(logger)
        task.use(termination_checker(max_env_step=max_env_step))
        last = []
        task.use(last.append)  # the last step's context (task.ctx is renewed after each step)
        task.run(max_step=1000)
        ctx = last[-1]
    logger.close()
    return ctx, saver


def test_pipeline_counters_buffer_and_train_output(tmp_path):
    cfg, policy, buf = build(tmp_path)
    ctx, saver = run(cfg, policy, buf)
    # 4 envs x 2 rounds = 8 transitions per step; 30 steps reach 240 env steps.
    assert ctx.env_step == 240 and ctx.total_step == 29  # the 30th step (0-based)
    assert buf.count() == 240
    # training starts once 32 transitions are stored (after step 4): 27 steps x 3 updates
    assert ctx.train_iter == 27 * 3 == policy.learn_mode.train_iter
    out = ctx.train_output
    assert isinstance(out, list) and len(out) == 3
    assert all(math.isfinite(o['total_loss']) and o['priority'].shape == (16,) for o in out)
    assert ctx.last_eval_iter == 60 and ctx.env_episode > 0
    assert {'final.pth.tar', 'eval.pth.tar', 'iteration_51.pth.tar'} <= set(os.listdir(saver.dir))
    final = torch.load(saver.paths['final.pth.tar'], weights_only=True)
    assert final['counters']['train_iter'] == 81 and final['counters']['env_step'] == 240
    assert any(f.startswith('events') for f in os.listdir(os.path.join(cfg.exp_name, 'log')))


def test_pipeline_with_per_and_nstep(tmp_path):
    cfg, policy, buf = build(tmp_path, per=True, nstep=3)
    ctx, _ = run(cfg, policy, buf, max_env_step=160)
    assert ctx.env_step == 160
    # n-step holds back the last (up to 2) transitions of every env's running episode
    assert 160 - 2 * 4 <= buf.count() < 160
    assert ctx.train_iter > 0 and len(ctx.train_output) == 3
    pri = [buf.get(k).meta['priority'] for k in range(buf.count())]
    assert len(set(pri)) > 10  # priorities were written back from TD errors


def test_example_script_runs_prints_paths_and_resumes(tmp_path, capsys, caplog, monkeypatch):
    import importlib.util
    import json
    import logging
    import re

    monkeypatch.chdir(tmp_path)  # runs go under the current directory: ./cartpole_dqn/<n>/
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location('dqn_cartpole_example', os.path.join(root, 'examples', 'dqn_cartpole.py'))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    small = ['--set', 'policy.learn.learning_starts=64', '--set', 'policy.learn.batch_size=16', '--no-progress',
             '--threads', str(threads)]
    rc = mod.main(['--max-env-step', '160'] + small)
    out = capsys.readouterr().out
    run1 = tmp_path / 'cartpole_dqn' / '1'
    assert rc == 1 and 'NOT solved' in out and 'after 160 training + ' in out  # far too short to solve
    assert out.index(f'run folder: {run1}') < out.index('NOT solved')  # the path is printed at the start
    saved = json.loads((run1 / 'config.json').read_text())
    assert saved['config']['policy']['learn']['batch_size'] == 16 and saved['config']['seed'] == 0
    it1 = int(re.search(r'after 160 training \+ \d+ evaluation env steps, (\d+) train iters', out).group(1))
    assert 0 < it1 < 100 and it1 % 4 == 0  # update_per_collect=4
    final = run1 / 'ckpt' / 'final.pth.tar'
    assert str(final) in out and f'tensorboard --logdir {run1 / "log"}' in out
    assert (run1 / 'ckpt' / 'final.buffer').is_file()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        rc = mod.main(['--max-env-step', '240', '--resume', str(final)] + small)
    out = capsys.readouterr().out
    # the resumed run continues run 1's folder (issue 48): no second run folder
    assert f'run folder: {run1} (continued from ckpt/final.pth.tar)' in out
    assert not (tmp_path / 'cartpole_dqn' / '2').exists()
    # counters continue from 160 env steps / it1 iters, and the replay buffer was restored, so every one of
    # the 20 steps (80 env steps, 4 per step) trains its 4 rounds at once
    it2 = int(re.search(r'after 240 training \+ \d+ evaluation env steps, (\d+) train iters', out).group(1))
    assert it2 == it1 + 80
    assert not [r for r in caplog.records if r.getMessage().startswith('eval at')]  # no evaluation at resume
    assert torch.load(run1 / 'ckpt' / 'final.pth.tar', weights_only=True)['counters']['env_step'] == 240
    with pytest.raises(SystemExit, match='batchsize') as e:  # one line on stderr, exit status 2
        mod.main(['--set', 'policy.learn.batchsize=16'])
    assert e.value.code == 2
    assert not (tmp_path / 'cartpole_dqn' / '2').exists()  # a config error leaves no empty run folder
