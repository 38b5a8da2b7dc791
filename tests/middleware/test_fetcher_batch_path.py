"""The fetcher's batch path (issue 12.2, issue 13 "one batch path" and "declared contracts")."""
import numpy as np
import pytest
import torch
from torch import nn

from contexts import OnlineRLContext
from middleware import offpolicy_data_fetcher
from middleware.functional import uses_per
from pipeline.config import compile_config
from pipeline.data import DequeBuffer, PrioritizedSampler, staleness_check
from pipeline.learner import Learner


def cfg(batch_size=4):
    return compile_config({'policy': {'learn': {'batch_size': batch_size, 'learning_starts': batch_size}}})


def transition(i):
    return {'obs': np.full(3, i, np.float32), 'y': float(i), 'note': f'step {i}', 'tag': None}


class Regression(Learner):
    def __init__(self):
        super().__init__(nn.Linear(3, 1))
        self.notes = []

    def forward_train(self, module_id, batch):
        self.notes.append(batch['note'])
        return self.modules[module_id](batch['obs']).squeeze(-1)

    def compute_loss_for_module(self, module_id, batch, fwd_out):
        return ((fwd_out - batch['y']) ** 2).mean()


def test_non_numeric_fields_travel_as_lists_through_fetcher_and_learner():
    buf = DequeBuffer(50, seed=0)
    for i in range(10):
        buf.push(transition(i))
    ctx = OnlineRLContext()
    next(offpolicy_data_fetcher(cfg(), buf)(ctx))
    batch = ctx.train_data
    assert batch['obs'].shape == (4, 3) and batch['y'].dtype == torch.float32
    assert batch['note'] == [f'step {int(y)}' for y in batch['y'].tolist()]  # rows stay aligned
    assert batch['tag'] == [None] * 4
    learner = Regression()
    learner.update(batch=batch)
    learner.update(batch=batch, minibatch_size=3, num_epochs=2, shuffle_batch_per_epoch=True)
    assert learner.notes[0] == batch['note'] and all(len(n) == 3 for n in learner.notes[1:])
    assert all(set(n) <= set(batch['note']) for n in learner.notes)


def test_weighted_list_of_buffers_concatenates_list_fields():
    b1, b2 = DequeBuffer(20, seed=0), DequeBuffer(20, seed=1)
    for i in range(8):
        b1.push(transition(i))
        b2.push(transition(100 + i))
    ctx = OnlineRLContext()
    next(offpolicy_data_fetcher(cfg(8), [(b1, 1), (b2, 1)])(ctx))
    assert len(ctx.train_data['note']) == 8 and ctx.train_data['obs'].shape == (8, 3)
    assert ctx.train_data['note'] == [f'step {int(y)}' for y in ctx.train_data['y'].tolist()]


def test_fetcher_hands_the_buffers_batch_to_the_learner_unconverted(monkeypatch):
    buf = DequeBuffer(50, seed=0)
    for i in range(10):
        buf.push({'obs': np.full(3, i, np.float32), 'y': float(i)})
    handed = []
    orig = DequeBuffer.sample_batch

    def spy(self, *a, **kw):
        sb = orig(self, *a, **kw)
        handed.append(sb)
        return sb

    monkeypatch.setattr(DequeBuffer, 'sample_batch', spy)
    ctx = OnlineRLContext()
    next(offpolicy_data_fetcher(cfg(), buf)(ctx))
    assert ctx.train_data is handed[0] and type(ctx.train_data) is dict  # no copy, no tree


class RenamedPriorities:
    """Not called PrioritizedSampler, and a middleware: found by its capability."""

    wants_priorities = True

    def __init__(self):
        self.got = []

    def priority(self, index):
        return None

    def __call__(self, action, chain, *args, **kwargs):
        if action == 'update_many':
            self.got.append(np.asarray(kwargs.get('meta', args[2] if len(args) > 2 else None)['priority']))
        return chain(*args, **kwargs)


def test_fetcher_finds_priority_feedback_by_capability_not_class_name():
    from pipeline.data.protocols import PriorityFeedback

    buf = DequeBuffer(50, seed=0)
    mw = RenamedPriorities()
    buf.use(mw)
    for i in range(10):
        buf.push({'obs': np.full(3, i, np.float32), 'y': float(i)})
    assert uses_per(buf) and isinstance(mw, PriorityFeedback)
    ctx = OnlineRLContext()
    g = offpolicy_data_fetcher(cfg(), buf)(ctx)
    next(g)
    ctx.train_output = [{'priority': torch.arange(4.0)}]
    with pytest.raises(StopIteration):
        next(g)
    assert len(mw.got) == 1 and mw.got[0].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_buffers_and_middleware_satisfy_the_declared_protocols():
    from pipeline.data.protocols import BatchSampling, PriorityFeedback, ReplayBuffer, SampleArguments

    buf = DequeBuffer(10)
    assert isinstance(buf, ReplayBuffer) and isinstance(buf, BatchSampling)
    assert isinstance(buf.view(), ReplayBuffer)
    per = DequeBuffer(10, sampler=PrioritizedSampler()).sampler
    assert isinstance(per, PriorityFeedback) and per.wants_priorities is True
    st = staleness_check(buf, 5)
    assert isinstance(st, SampleArguments) and st.sample_kwargs(7) == {'train_iter_sample_data': 7}
    assert not isinstance(object(), ReplayBuffer)


class SampleOnlyBuffer:
    """A DI-engine-style buffer without ``sample_batch``: the fetcher collates the items ``sample`` returns."""

    def __init__(self, inner):
        self.inner = inner

    def count(self):
        return self.inner.count()

    def sample(self, size, **kw):
        return self.inner.sample(size, **kw)


def test_a_buffer_without_sample_batch_is_fetched_through_its_items():
    inner = DequeBuffer(50, seed=0, sampler=PrioritizedSampler(alpha=0.6, beta=0.4))
    for i in range(10):
        inner.push({'obs': np.full(3, i, np.float32), 'y': float(i)})
    ctx = OnlineRLContext()
    next(offpolicy_data_fetcher(cfg(), SampleOnlyBuffer(inner))(ctx))
    batch = ctx.train_data
    assert batch['obs'].shape == (4, 3) and batch['y'].dtype == torch.float32
    assert torch.equal(batch['obs'][:, 0], batch['y'])  # rows stay whole
    assert 'weight' in batch and batch['weight'].shape == (4,)  # the items' IS weights
    assert batch['indices'].tolist() == [int(y) for y in batch['y'].tolist()]  # the rows' buffer indices


def test_fetched_batches_carry_the_rows_indices_and_refuse_reserved_field_names():
    buf = DequeBuffer(50, seed=0)  # uniform: indices, no weight
    for i in range(10):
        buf.push({'obs': np.full(3, i, np.float32), 'y': float(i)})
    for b in (buf, SampleOnlyBuffer(buf)):
        ctx = OnlineRLContext()
        next(offpolicy_data_fetcher(cfg(), b)(ctx))
        assert 'weight' not in ctx.train_data
        assert ctx.train_data['indices'].tolist() == [int(y) for y in ctx.train_data['y'].tolist()]
    clash = DequeBuffer(50, seed=0)
    for i in range(10):
        clash.push({'obs': np.full(3, i, np.float32), 'indices': i})
    for b in (clash, SampleOnlyBuffer(clash)):
        with pytest.raises(ValueError, match="field named 'indices'"):
            next(offpolicy_data_fetcher(cfg(), b)(OnlineRLContext()))
