import copy
import os
import pickle

import numpy as np
import pytest
import torch

from contexts import OnlineRLContext
from middleware import (CkptSaver, OffPolicyLearner, StepCollector, evaluate_episodes, interaction_evaluator,
                        online_logger, termination_checker)
from pipeline import Role, task
from pipeline.checkpoint import load_checkpoint
from pipeline.config import compile_config
from pipeline.policy import DQNPolicy


def eval_cfg(stop=None, freq=10, n=4):
    return compile_config({'env': {'n_evaluator_episode': n, 'stop_value': stop},
                           'policy': {'eval': {'evaluator': {'eval_freq': freq}}}})


def test_evaluate_episodes_shares_episodes_evenly(fixed_env, zero_policy):
    env = fixed_env(lengths=[2, 5, 9])
    rets, lens = evaluate_episodes(zero_policy, env, 5)
    assert sorted(lens.tolist()) == [2, 2, 5, 5, 9]  # 2/2/1 episodes, not five short ones
    assert rets.tolist() == lens.astype(float).tolist()


def test_evaluator_runs_once_before_training_then_every_eval_freq(fixed_env, zero_policy):
    env = fixed_env(n=2, length=7)
    ev = interaction_evaluator(eval_cfg(freq=10), zero_policy, env)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        ev(ctx)
        assert ctx.eval_value == 7.0 and ctx.last_eval_iter == 0
        n_calls = len(zero_policy.calls)
        for _ in range(3):  # later steps, still before the first train step: no re-evaluation
            ctx = ctx.renew()
            ev(ctx)
        assert len(zero_policy.calls) == n_calls and ctx.eval_value == float('-inf')
        assert ctx.last_eval_value == 7.0
        ctx.train_iter = 9
        ev(ctx)
        assert len(zero_policy.calls) == n_calls
        ctx.train_iter = 10
        ev(ctx)
        assert len(zero_policy.calls) > n_calls and ctx.last_eval_iter == 10
        assert ctx.eval_output['episode_length'].tolist() == [7, 7, 7, 7]
        assert not task.finish  # no stop value
    assert ev.__roles__ == frozenset({Role.EVALUATOR})


def test_evaluator_finishes_at_stop_value_only_after_training(fixed_env, zero_policy):
    env = fixed_env(n=2, length=7)
    ev = interaction_evaluator(eval_cfg(stop=7, freq=1), zero_policy, env)
    with task.start(ctx=OnlineRLContext()):
        ev(task.ctx)
        assert not task.finish  # train_iter 0
        task.ctx.train_iter = 1
        ev(task.ctx)
        assert task.finish


def test_termination_checker():
    with task.start(ctx=OnlineRLContext()):
        chk = termination_checker(max_env_step=100, max_train_iter=10)
        ctx = task.ctx
        ctx.env_step = 99
        chk(ctx)
        assert not task.finish
        ctx.train_iter = 10
        chk(ctx)
        assert task.finish
    with task.start(ctx=OnlineRLContext()):
        termination_checker(max_env_step=5)(OnlineRLContext(env_step=5))
        assert task.finish
    with pytest.raises(ValueError):
        termination_checker(max_env_step=-1)


def make_policy():
    cfg = compile_config({'policy': {'model': {'obs_shape': 4, 'action_shape': 2, 'encoder_hidden_size_list': [8]}}})
    return DQNPolicy(cfg, seed=0)


def run_ckpt_steps(saver, steps):
    """Run the saver inside a task: steps is a list of (train_iter, eval_value, finish)."""
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        for it, ev, fin in steps:
            ctx.train_iter = it
            if ev is not None:
                ctx.eval_value = ev
            g = saver(ctx)
            next(g)
            if fin:
                task.finish = True
            with pytest.raises(StopIteration):
                next(g)
            ctx = ctx.renew()
        return ctx


def test_ckpt_saver_iteration_best_and_final(tmp_path):
    pol = make_policy()
    pol.learn_mode  # build the learner so optimizer/target are saved too
    saver = CkptSaver(pol, str(tmp_path / 'exp'), train_freq=10)
    run_ckpt_steps(saver, [(0, 1.0, False), (5, 0.5, False), (10, None, False), (12, 3.0, False),
                           (25, None, True)])
    d = tmp_path / 'exp' / 'ckpt'
    assert sorted(os.listdir(d)) == ['eval.pth.tar', 'final.pth.tar', 'iteration_10.pth.tar', 'iteration_25.pth.tar']
    st = torch.load(d / 'eval.pth.tar', weights_only=True)
    assert st['counters']['train_iter'] == 12 and st['extra']['best_eval'] == 3.0
    assert 'learn' in st['policy'] and 'optimizers' in st['policy']['learn']
    assert torch.load(d / 'final.pth.tar', weights_only=True)['counters']['train_iter'] == 25
    assert CkptSaver.__roles__ == frozenset({Role.LEARNER, Role.EVALUATOR})


def test_resume_continues_counters_and_weights(tmp_path):
    pol = make_policy()
    saver = CkptSaver(pol, str(tmp_path / 'a'))
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        ctx.train_iter, ctx.env_step, ctx.env_episode, ctx.last_eval_iter = 40, 800, 30, 40
        g = saver(ctx)
        next(g)
        task.finish = True
        list(g)
    path = saver.paths['final.pth.tar']
    other = make_policy()
    with torch.no_grad():
        for p in other.model.parameters():
            p.add_(1.0)
    resumed = CkptSaver(other, str(tmp_path / 'b'), train_freq=10, resume_from=path)
    ctx = run_ckpt_steps(resumed, [(0, None, False)])
    assert (ctx.train_iter, ctx.env_step, ctx.env_episode, ctx.last_eval_iter) == (40, 800, 30, 40)
    x = torch.randn(3, 4)
    assert torch.allclose(other.model(x), pol.model(x))
    assert resumed.last_save_iter == 40  # the next periodic save is at 50, not at once


def test_unsafe_checkpoint_is_refused(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ('echo pwned',))

    p = tmp_path / 'evil.pth.tar'
    torch.save({'policy': {'model': {}}, 'x': Evil()}, p)
    with pytest.raises(ValueError, match='not a safe checkpoint'):
        load_checkpoint(str(p))
    with pytest.raises(FileNotFoundError):
        load_checkpoint(str(tmp_path / 'missing'))


def test_online_logger_never_mutates_train_output_and_writes_scalars(tmp_path):
    import io
    lg = online_logger(log_dir=str(tmp_path / 'log'), train_show_freq=1, progress_interval=0.0,
                       stream=io.StringIO())
    ctx = OnlineRLContext()
    out = [{'total_loss': 1.0, 'q_value': torch.tensor(2.0), 'priority': torch.ones(4)},
           {'total_loss': 3.0, 'q_value': torch.tensor(4.0), 'priority': torch.ones(4)}]
    snapshot = copy.deepcopy(out)
    ctx.train_output = out
    ctx.train_iter, ctx.env_step = 2, 16
    ctx.eval_value = 5.0
    ctx.eval_output = {'episode_return': np.array([4.0, 6.0]), 'episode_length': np.array([4, 6])}
    ctx.info_for_logging['collect_episode_return'] = [1.0, 2.0]
    lg(ctx)
    assert ctx.train_output is out and len(out) == 2
    for a, b in zip(out, snapshot):
        assert a.keys() == b.keys() and torch.equal(a['priority'], b['priority'])
    lg.close()
    files = os.listdir(tmp_path / 'log')
    assert any(f.startswith('events.out.tfevents') for f in files)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / 'log'))
    acc.Reload()
    tags = acc.Tags()['scalars']
    assert {'train/total_loss', 'train/q_value', 'eval/episode_return_mean', 'collect/episode_return_mean'} <= set(tags)
    assert acc.Scalars('train/total_loss')[0].value == 2.0 and acc.Scalars('train/total_loss')[0].step == 16
    assert 'train/priority' not in tags


def test_roles_gate_middleware_set_before_or_after_construction(cfg, fixed_env, zero_policy):
    from pipeline.data import DequeBuffer

    class NoLearner:
        def update(self, **kw):
            raise AssertionError('the learner must not run on a collector node')

    for roles_first in (True, False):
        env = fixed_env(n=2, length=5)
        if roles_first:
            task.start(ctx=OnlineRLContext(), roles=[Role.COLLECTOR])
        else:
            task.start(ctx=OnlineRLContext())
        col = StepCollector(cfg, zero_policy, env)
        opl = OffPolicyLearner(cfg, NoLearner(), DequeBuffer(10))
        task.use(col)
        task.use(opl)
        if not roles_first:
            task.add_role(Role.COLLECTOR)
        task.run(3)
        assert task.ctx.env_step == 3 * 8
        task.stop()


@pytest.fixture
def default_sigint():
    """Python's default SIGINT handler for the test (a run started in the background has SIGINT ignored)."""
    import signal
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def test_a_ctrl_c_inside_a_held_block_is_raised_when_it_ends(default_sigint):
    import signal

    from middleware.functional.logger import _ctrl_c_held
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _ctrl_c_held():
            signal.raise_signal(signal.SIGINT)
            done.append('the rest of the block ran')
    assert done == ['the rest of the block ran']
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with _ctrl_c_held():                                  # no Ctrl-C: nothing raised
        done.append('again')
    assert done[-1] == 'again' and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_second_ctrl_c_inside_a_held_block_raises_at_once(default_sigint):
    import signal

    from middleware.functional.logger import _ctrl_c_held
    done = []
    with pytest.raises(KeyboardInterrupt):
        with _ctrl_c_held():
            signal.raise_signal(signal.SIGINT)
            done.append('held')
            signal.raise_signal(signal.SIGINT)            # e.g. a write that hangs: the user presses Ctrl-C again
            done.append('not reached')
    assert done == ['held'] and signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_held_block_leaves_an_ignored_or_custom_sigint_alone():
    import signal

    from middleware.functional.logger import _ctrl_c_held
    seen = []
    before = signal.signal(signal.SIGINT, lambda signum, frame: seen.append(signum))
    try:
        with _ctrl_c_held():                              # a program's own handler runs at once, as installed
            signal.raise_signal(signal.SIGINT)
            assert seen == [signal.SIGINT]
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        with _ctrl_c_held():
            signal.raise_signal(signal.SIGINT)            # ignored: nothing raised, nothing changed
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_online_logger_finishes_a_tensorboard_write_a_ctrl_c_lands_in(tmp_path, monkeypatch, default_sigint):
    """A Ctrl-C inside SummaryWriter.add_scalar (in TensorBoard's queue code, in real runs) is raised only once the
    write has finished: the scalar is on disk and close() returns instead of waiting on a broken queue."""
    import io
    import signal
    import threading

    from torch.utils.tensorboard import SummaryWriter
    original = SummaryWriter.add_scalar
    hits = []

    def add_scalar_hit_by_ctrl_c(self, tag, value, step=None, *args, **kwargs):
        if not hits:
            hits.append(tag)
            signal.raise_signal(signal.SIGINT)            # lands before the real write runs
        return original(self, tag, value, step, *args, **kwargs)

    monkeypatch.setattr(SummaryWriter, 'add_scalar', add_scalar_hit_by_ctrl_c)
    lg = online_logger(log_dir=str(tmp_path / 'log'), train_show_freq=1, progress=False)
    ctx = OnlineRLContext()
    ctx.train_output = [{'total_loss': 2.5}]
    ctx.train_iter, ctx.env_step = 1, 8
    with pytest.raises(KeyboardInterrupt):
        lg(ctx)
    assert hits == ['train/total_loss']
    closer = threading.Thread(target=lg.close, daemon=True)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive(), 'close() hung after a Ctrl-C in a write'
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(tmp_path / 'log'))
    acc.Reload()
    assert [s.value for s in acc.Scalars('train/total_loss')] == [2.5]
