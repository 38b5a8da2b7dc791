"""Checkpoint files: counters are validated (only kept fields, typed, in range), bad files get clear
messages, the best checkpoint holds the weights that were evaluated, and roles decide who writes what."""
import os

import pytest
import torch
from torch import nn

from contexts import OfflineRLContext, OnlineRLContext
from middleware import CkptSaver
from pipeline import task
from pipeline.checkpoint import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint


class TinyPolicy:
    def __init__(self):
        self.model = nn.Linear(2, 2)

    def state_dict(self):
        return {'model': self.model.state_dict()}

    def load_state_dict(self, sd):
        self.model.load_state_dict(sd['model'])


def write(tmp_path, counters, name='c.pth.tar'):
    p = tmp_path / name
    torch.save({'policy': TinyPolicy().state_dict(), 'counters': counters, 'extra': {}}, p)
    return str(p)


def test_good_counters_load(tmp_path):
    ctx = OnlineRLContext()
    load_checkpoint(write(tmp_path, {'train_iter': 3, 'env_step': 40, 'env_episode': 2, 'last_eval_iter': -1,
                                     'last_eval_value': float('-inf')}), TinyPolicy(), ctx)
    assert (ctx.train_iter, ctx.env_step, ctx.env_episode, ctx.last_eval_iter) == (3, 40, 2, -1)


@pytest.mark.parametrize('counters, words', [
    ({'renew': 1}, ["unknown counter 'renew'"]),
    ({'train_iter': 'not an int'}, ['train_iter must be an int']),
    ({'env_step': -5}, ['env_step must be an int >= 0']),
    ({'train_iter': True}, ['train_iter must be an int']),
    ({'last_eval_iter': -2}, ['last_eval_iter must be an int >= -1']),
    ({'last_eval_value': float('nan')}, ['last_eval_value must be a number']),
    ({'last_eval_value': 'high'}, ['last_eval_value must be a number']),
    ({'total_step': 5, 'env_step': -1}, ["unknown counter 'total_step'", 'env_step must be']),  # all at once
])
def test_bad_counters_are_refused_naming_the_key_and_nothing_changes(tmp_path, counters, words):
    ctx = OnlineRLContext()
    pol = TinyPolicy()
    before = {k: v.clone() for k, v in pol.model.state_dict().items()}
    with pytest.raises(CheckpointError) as ei:
        load_checkpoint(write(tmp_path, counters), pol, ctx)
    for w in words:
        assert w in str(ei.value)
    assert ctx.train_iter == 0 and ctx.env_step == 0 and callable(ctx.renew)
    assert all(torch.equal(before[k], v) for k, v in pol.model.state_dict().items())  # weights untouched


def test_counters_are_checked_against_the_context_type(tmp_path):
    path = write(tmp_path, {'env_step': 10})
    with pytest.raises(CheckpointError, match="unknown counter 'env_step'"):
        load_checkpoint(path, None, OfflineRLContext())  # an offline context has no env_step
    ctx = OnlineRLContext()
    ctx.keep('my_counter')
    ctx.my_counter = 0
    load_checkpoint(write(tmp_path, {'my_counter': 7}, 'k.pth.tar'), None, ctx)  # a kept key loads
    assert ctx.my_counter == 7


def test_corrupt_and_foreign_files_say_so_and_never_suggest_unsafe_loading(tmp_path):
    junk = tmp_path / 'junk.pth.tar'
    junk.write_bytes(b'this is not a checkpoint at all' * 10)
    with pytest.raises(CheckpointError, match='not a checkpoint file') as e1:
        read_checkpoint(str(junk))
    good = tmp_path / 'good.pth.tar'
    save_checkpoint(str(good), TinyPolicy(), OnlineRLContext())
    truncated = tmp_path / 'trunc.pth.tar'
    truncated.write_bytes(good.read_bytes()[:100])
    with pytest.raises(CheckpointError, match='not a checkpoint file') as e2:
        read_checkpoint(str(truncated))
    other = tmp_path / 'other.pth.tar'
    torch.save({'weights': torch.zeros(2)}, other)
    with pytest.raises(CheckpointError, match='not a CkptSaver checkpoint') as e3:
        read_checkpoint(str(other))

    class Evil:
        def __reduce__(self):
            return (os.system, ('echo pwned',))

    evil = tmp_path / 'evil.pth.tar'
    torch.save({'policy': {}, 'x': Evil()}, evil)
    with pytest.raises(CheckpointError, match='not a safe checkpoint') as e4:
        read_checkpoint(str(evil))
    for e in (e1, e2, e3, e4):
        assert 'weights_only=False' not in str(e.value)


def test_policy_that_does_not_fit_gets_a_clear_error(tmp_path):
    path = str(tmp_path / 'p.pth.tar')
    save_checkpoint(path, TinyPolicy(), OnlineRLContext())

    class Bigger(TinyPolicy):
        def __init__(self):
            self.model = nn.Linear(3, 2)

    with pytest.raises(CheckpointError, match='does not fit this policy'):
        load_checkpoint(path, Bigger())


def _step(saver, ctx, finish=False):
    g = saver(ctx)
    next(g)
    if finish:
        task.finish = True
    with pytest.raises(StopIteration):
        next(g)


@pytest.mark.parametrize('roles, expect', [
    (None, {'eval.pth.tar', 'final.pth.tar'}),
    (['learner'], {'final.pth.tar'}),
    (['evaluator'], {'eval.pth.tar'}),
])
def test_best_checkpoint_holds_the_evaluated_weights_and_is_written_where_evaluation_runs(tmp_path, roles, expect):
    pol = TinyPolicy()
    evaluated = {k: v.detach().clone() for k, v in pol.model.state_dict().items()}
    with torch.no_grad():  # the learner moved on after the evaluation
        pol.model.weight.add_(1.0)
    saver = CkptSaver(pol, str(tmp_path / 'run'))
    with task.start(ctx=OnlineRLContext(), roles=roles):
        ctx = task.ctx
        ctx.train_iter, ctx.env_step = 30, 300
        ctx.eval_value = 480.0
        ctx.eval_output = {'model_state': evaluated, 'train_iter': 25}
        _step(saver, ctx, finish=True)
    d = tmp_path / 'run' / 'ckpt'
    assert set(os.listdir(d)) == expect
    if 'eval.pth.tar' in expect:
        st = torch.load(d / 'eval.pth.tar', weights_only=True)
        assert all(torch.equal(st['policy']['model'][k], evaluated[k]) for k in evaluated)
        assert st['extra']['eval_value'] == 480.0 and st['extra']['eval_train_iter'] == 25


def test_resume_restores_the_buffer_and_counters_before_the_first_step(tmp_path):
    from pipeline.data import DequeBuffer

    pol = TinyPolicy()
    buf = DequeBuffer(100)
    for i in range(7):
        buf.push({'x': i})
    saver = CkptSaver(pol, str(tmp_path / 'a'), buffer=buf)
    ctx = OnlineRLContext()
    ctx.train_iter, ctx.env_step, ctx.last_eval_iter = 12, 99, 10
    path = saver.save_final(ctx)
    assert os.path.isfile(path[:-len('.pth.tar')] + '.buffer')
    buf2 = DequeBuffer(100)
    resumed = CkptSaver(TinyPolicy(), str(tmp_path / 'b'), resume_from=path, buffer=buf2)
    assert buf2.count() == 7 and [buf2.get(i).data['x'] for i in range(7)] == list(range(7))
    ctx2 = resumed.restore(OnlineRLContext())
    # an evaluator running first sees last_eval_iter=10, train_iter=12: no evaluation of the loaded net at once
    assert (ctx2.train_iter, ctx2.env_step, ctx2.last_eval_iter) == (12, 99, 10)
    with pytest.raises(CheckpointError, match='not a checkpoint file'):
        bad = tmp_path / 'bad.pth.tar'
        bad.write_bytes(b'x' * 50)
        CkptSaver(TinyPolicy(), str(tmp_path / 'c'), resume_from=str(bad))


def test_a_restarted_evaluator_never_replaces_a_better_saved_evaluation(tmp_path, caplog):
    def evaluate(saver, value, it):
        with task.start(ctx=OnlineRLContext(), roles=['evaluator']):
            ctx = task.ctx
            ctx.train_iter, ctx.eval_value = it, value
            ctx.eval_output = {'model_state': TinyPolicy().model.state_dict(), 'train_iter': it}
            _step(saver, ctx)

    def saved():
        extra = torch.load(tmp_path / 'run' / 'ckpt' / 'eval.pth.tar', weights_only=True)['extra']
        return extra['eval_value'], extra['eval_train_iter']

    evaluate(CkptSaver(TinyPolicy(), str(tmp_path / 'run')), 480.0, 25)
    restarted = CkptSaver(TinyPolicy(), str(tmp_path / 'run'))  # same run folder, best_eval starts at -inf
    evaluate(restarted, 300.0, 40)
    assert saved() == (480.0, 25)
    evaluate(restarted, 450.0, 50)
    assert saved() == (480.0, 25)
    evaluate(restarted, 500.0, 60)
    assert saved() == (500.0, 60)
    (tmp_path / 'run' / 'ckpt' / 'eval.pth.tar').write_bytes(b'junk' * 10)  # unreadable: replaced, with a warning
    evaluate(CkptSaver(TinyPolicy(), str(tmp_path / 'run')), 10.0, 70)
    assert saved() == (10.0, 70) and 'unreadable' in caplog.text


def test_periodic_checkpoints_carry_the_buffer_and_resume_from_one_restores_it(tmp_path, caplog):
    from pipeline.data import DequeBuffer, PrioritizedSampler
    from pipeline.checkpoint import latest_checkpoint

    buf = DequeBuffer(100, seed=0, sampler=PrioritizedSampler())
    per = buf.sampler
    saver = CkptSaver(TinyPolicy(), str(tmp_path / 'run'), train_freq=10, buffer=buf)
    d = tmp_path / 'run' / 'ckpt'
    with task.start(ctx=OnlineRLContext(), roles=['learner']):
        ctx = task.ctx
        for it in (0, 10, 20):
            for i in range(5):
                buf.push({'x': it + i}, {'priority': float(it + i + 1)})
            ctx.train_iter = it
            _step(saver, ctx)
    assert sorted(f for f in os.listdir(d) if f.startswith('iteration_')) == [
        'iteration_10.pth.tar', 'iteration_20.buffer', 'iteration_20.pth.tar']  # only the newest buffer is kept
    path = latest_checkpoint(str(d))
    assert path == str(d / 'iteration_20.pth.tar')
    buf2 = DequeBuffer(100, sampler=PrioritizedSampler())
    per2 = buf2.sampler
    CkptSaver(TinyPolicy(), str(tmp_path / 'resumed'), resume_from=path, buffer=buf2)
    assert [buf2.get(i).data['x'] for i in range(buf2.count())] == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 20, 21, 22,
                                                                    23, 24]
    assert all(per2.priority(i) == per.priority(i) for i in buf.indices())
    CkptSaver(TinyPolicy(), str(tmp_path / 'resumed2'), resume_from=str(d / 'iteration_10.pth.tar'),
              buffer=DequeBuffer(100))
    assert 'no replay buffer saved with' in caplog.text  # an older periodic checkpoint: said, not silent
