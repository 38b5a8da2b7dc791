"""The data path's three records (issue 25): Transition -> TrainBatch -> TrainOutput, one batch source per
buffer setup, ``ctx.train_output`` always a list."""
import numpy as np
import pytest
import torch

from contexts import OnlineRLContext
from middleware import OffPolicyLearner, nstep_reward_enhancer, offpolicy_data_fetcher, trainer
from middleware.functional import data_processor
from middleware.functional.data_processor import ReplaySource, last_train_output
from middleware.learner import TrainRounds
from pipeline import task
from pipeline.config import compile_config
from pipeline.data import TrainBatch, TrainOutput, Transition

from replay_fixtures import filled, small_cfg


class RowLearner:
    """A single-module learner whose loss gives a per-row priority: the batch's rewards + 100 * call number."""

    def __init__(self):
        self.calls = 0
        self.last_outputs = {}

    def update(self, batch, timesteps=None):
        self.calls += 1
        self.last_outputs = {'default_policy': {'priority': batch['reward'] + 100.0 * self.calls}}
        return {'default_policy': {'total_loss': float(self.calls)}}


class TwoModuleLearner:
    """A learner of modules 'a' and 'b' (a dict of buffers feeds it): each module's own priority."""

    def __init__(self):
        self.calls = 0
        self.last_outputs = {}

    def update(self, batch, timesteps=None):
        self.calls += 1
        self.last_outputs = {k: {'priority': batch[k]['reward'] + 100.0 * self.calls} for k in ('a', 'b')}
        return {k: {'total_loss': float(self.calls)} for k in ('a', 'b')}


def spy_priorities(buf, log, name):
    """Log the priorities written back to ``buf`` (``update_priority``: the route to its sampler)."""
    orig = buf.update_priority

    def update_priority(indices, priorities):
        log.append((name, list(indices), np.asarray(priorities).tolist()))
        return orig(indices, priorities)

    buf.update_priority = update_priority


def test_the_records_are_plain_dicts_with_the_collectors_fields():
    from middleware.collector import _transitions
    from pipeline.envs import EnvStep

    step = EnvStep(env_ids=np.array([0, 1]), obs=np.zeros((2, 3), np.float32), action=np.array([1, 0]),
                   reward=np.array([1.0, 0.5], np.float32), next_obs=np.ones((2, 3), np.float32),
                   terminated=np.array([False, True]), truncated=np.array([False, False]), finished=[], infos=None)
    ts = _transitions(step)
    assert all(type(t) is dict and set(t) == Transition.__required_keys__ for t in ts)
    enh = nstep_reward_enhancer(compile_config({'policy': {'nstep': 3, 'discount_factor': 0.9}}))
    ctx = OnlineRLContext()
    ctx.transitions = ts
    enh(ctx)  # env 1's episode ended: its transition comes out with nstep = 1
    assert [set(t) - Transition.__required_keys__ for t in ctx.transitions] == [{'nstep'}]
    assert {'nstep'} == Transition.__optional_keys__
    declared = TrainBatch.__required_keys__ | TrainBatch.__optional_keys__
    buf = filled(8, per=True)
    batch, _ = ReplaySource(small_cfg(), buf).next(OnlineRLContext())
    assert type(batch) is dict and set(batch) == declared - {'nstep'}
    assert batch['indices'].dtype == torch.int64 and batch['weight'].dtype == torch.float32
    for row, i in enumerate(batch['indices'].tolist()):  # indices name the buffer items the rows are
        assert buf.get_by_index(i).data['reward'] == batch['reward'][row].item()
    assert 'priority' in TrainOutput.__optional_keys__


def test_trainer_and_offpolicy_learner_both_leave_a_list_of_train_outputs_with_priorities():
    ctx = OnlineRLContext()
    ctx.train_data = {'obs': torch.zeros(4, 4), 'reward': torch.arange(4.0)}
    trainer(small_cfg(), RowLearner())(ctx)
    assert type(ctx.train_output) is list and len(ctx.train_output) == 1
    assert ctx.train_output[0]['total_loss'] == 1.0 and ctx.train_output[0]['priority'].shape == (4,)

    buf = filled(16, per=True)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        OffPolicyLearner(small_cfg(update_per_collect=3), RowLearner(), buf)(ctx)
    assert type(ctx.train_output) is list and len(ctx.train_output) == 3
    assert [o['total_loss'] for o in ctx.train_output] == [1.0, 2.0, 3.0]
    assert all(o['priority'].shape == (4,) for o in ctx.train_output)


@pytest.mark.parametrize('setup', ['list', 'dict'])
def test_every_buffer_setup_samples_through_one_function_and_writes_priorities_once_per_round(setup, monkeypatch):
    a, b = filled(10, per=True, seed=0), filled(10, start=100, per=True, seed=1)
    log = []
    spy_priorities(a, log, 'a')
    spy_priorities(b, log, 'b')
    sampled = []
    orig = data_processor._sample_one

    def sample_one(buffer_, size, ctx):
        sampled.append(('a' if buffer_ is a else 'b', size))
        return orig(buffer_, size, ctx)

    monkeypatch.setattr(data_processor, '_sample_one', sample_one)
    if setup == 'list':
        buffers, learner, rows = [(a, 3), (b, 1)], RowLearner(), {'a': 6, 'b': 2}
    else:
        buffers, learner, rows = {'a': a, 'b': b}, TwoModuleLearner(), {'a': 8, 'b': 8}
    cfg = small_cfg(batch_size=8, update_per_collect=3)
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        OffPolicyLearner(cfg, learner, buffers)(ctx)
    assert sampled == [('a', rows['a']), ('b', rows['b'])] * 3
    assert [name for name, _, _ in log] == ['a', 'b'] * 3  # each buffer once per round, after its round
    for k, (name, indices, priorities) in enumerate(log):
        buf = a if name == 'a' else b
        call = k // 2 + 1
        # every row got its own priority (its reward + 100 * the round), whichever part of the batch it was in
        assert priorities == [buf.get_by_index(i).data['reward'] + 100.0 * call for i in indices]
    assert len(ctx.train_output) == 3


def test_the_fetcher_middleware_uses_the_same_source_and_reads_the_trainers_list():
    buf = filled(8, per=True)
    log = []
    spy_priorities(buf, log, 'buf')
    fetch = offpolicy_data_fetcher(small_cfg(), buf)
    assert isinstance(fetch.source, ReplaySource)
    train = trainer(small_cfg(), RowLearner())
    ctx = OnlineRLContext()
    g = fetch(ctx)
    next(g)
    train(ctx)
    with pytest.raises(StopIteration):
        next(g)
    assert log[0][2] == (ctx.train_data['reward'] + 100.0).tolist()
    # a bare dict (what a ported DI-engine trainer writes) is read as the last output
    assert last_train_output({'priority': 1}) == {'priority': 1}
    assert last_train_output([{'priority': 1}, {'priority': 2}]) == {'priority': 2}
    assert last_train_output([]) is None and last_train_output(None) is None


def test_train_rounds_take_any_batch_source():
    class Counting:
        def __init__(self, n):
            self.left, self.seen = n, []

        def next(self, ctx):
            if not self.left:
                return None, None
            self.left -= 1
            return {'obs': torch.zeros(2, 1), 'reward': torch.ones(2)}, self.seen.append

    source = Counting(2)
    rounds = TrainRounds(small_cfg(update_per_collect=5), RowLearner(), source)
    ctx = OnlineRLContext()
    rounds(ctx)
    assert ctx.train_iter == 2 and ctx.train_data is None  # the third round found no batch: the rounds stopped
    assert source.seen == ctx.train_output and len(source.seen) == 2
    with pytest.raises(TypeError, match='batch source'):
        TrainRounds(small_cfg(update_per_collect=1), RowLearner(), object())
