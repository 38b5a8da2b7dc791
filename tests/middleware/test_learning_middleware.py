import numpy as np
import pytest
import torch

from contexts import OnlineRLContext
from middleware import OffPolicyLearner, data_pusher, offpolicy_data_fetcher, trainer
from middleware.functional import flatten_update_result
from pipeline import Role, task
from pipeline.data import DequeBuffer

from replay_fixtures import filled, small_cfg, transition


class FakeStats:
    def __init__(self, v):
        self.v = v

    def peek(self):
        return self.v


class FakeLearner:
    """update() returns Stats-like results; priority = 10 + call number for every row."""

    def __init__(self, log=None):
        self.calls = []
        self.log = log if log is not None else []
        self.last_outputs = {}

    def update(self, batch, timesteps=None):
        self.calls.append((batch, timesteps))
        self.log.append(('train', len(self.calls)))
        n = batch['obs'].shape[0]
        self.last_outputs = {'default_policy': {'priority': torch.full((n,), 10.0 + len(self.calls))}}
        return {'default_policy': {'total_loss': FakeStats(1.0 / len(self.calls))},
                '__all_modules__': {'num_env_steps_trained': FakeStats(n)}}


def test_data_pusher_pushes_transitions_with_meta_and_leaves_ctx():
    b = DequeBuffer(10)
    push = data_pusher(small_cfg(), b)
    ctx = OnlineRLContext()
    ctx.train_iter = 7
    ctx.transitions = [transition(0, env=3), transition(1, env=5)]
    push(ctx)
    assert b.count() == 2 and len(ctx.transitions) == 2
    assert b.get(0).meta['env'] == 3 and b.get(1).meta == {'env': 5, 'train_iter_data_collected': 7}
    ctx = OnlineRLContext()
    ctx.episodes = [[transition(0), transition(1)]]
    push(ctx)
    assert b.count() == 3 and len(b.get(2).data) == 2
    assert push.__roles__ == frozenset({Role.LEARNER})


def test_fetcher_none_until_enough_data_then_plain_dict_batch():
    b = filled(3)
    fetch = offpolicy_data_fetcher(small_cfg(batch_size=4, learning_starts=5), b)
    ctx = OnlineRLContext()
    g = fetch(ctx)
    next(g)
    assert ctx.train_data is None
    for i in range(3, 5):
        b.push(transition(i))
    g = fetch(ctx)
    next(g)
    assert type(ctx.train_data) is dict  # the buffer's batch as it is: no treetensor conversion
    assert ctx.train_data['obs'].shape == (4, 4) and ctx.train_data['action'].dtype == torch.int64
    assert len(set(ctx.train_data['reward'].tolist())) == 4  # no replacement
    assert 'weight' not in ctx.train_data.keys()


def test_fetcher_list_of_weighted_buffers_and_dict():
    b1, b2 = filled(10), DequeBuffer(10)
    for i in range(100, 110):
        b2.push(transition(i))
    fetch = offpolicy_data_fetcher(small_cfg(batch_size=8), [(b1, 3), (b2, 1)])
    ctx = OnlineRLContext()
    next(fetch(ctx))
    r = ctx.train_data['reward'].tolist()
    assert len(r) == 8 and sum(x >= 100 for x in r) == 2
    fetch = offpolicy_data_fetcher(small_cfg(batch_size=4), {'a': b1, 'b': b2})
    next(fetch(ctx))
    assert set(ctx.train_data) == {'a', 'b'} and ctx.train_data['b']['reward'].min() >= 100
    with pytest.raises(ValueError, match='pair'):
        offpolicy_data_fetcher(small_cfg(), [b1])
    with pytest.raises(TypeError):
        offpolicy_data_fetcher(small_cfg(), 3)


def test_fetcher_writes_per_priorities_in_backward_part():
    b = filled(8, per=True)
    fetch = offpolicy_data_fetcher(small_cfg(batch_size=4), b)
    ctx = OnlineRLContext()
    g = fetch(ctx)
    next(g)
    assert ctx.train_data['weight'].shape == (4,)
    sampled = ctx.train_data['reward'].long().tolist()  # reward i == item i
    ctx.train_output = [{'total_loss': 1.0, 'priority': torch.tensor([5.0, 6.0, 7.0, 8.0])}]
    with pytest.raises(StopIteration):
        next(g)
    by_item = {int(b.get(k).data['reward']): b.get(k).meta['priority'] for k in range(b.count())}
    assert [by_item[i] for i in sampled] == [5.0, 6.0, 7.0, 8.0]
    g = fetch(ctx)
    next(g)
    ctx.train_output = [{'total_loss': 1.0}]
    with pytest.raises(ValueError, match='priority'):
        next(g)


def test_trainer_fills_train_output_and_advances_iter():
    L = FakeLearner()
    tr = trainer(small_cfg(), L)
    ctx = OnlineRLContext()
    tr(ctx)
    assert ctx.train_iter == 0 and L.calls == []  # no data: no training
    ctx.train_data = {'obs': torch.zeros(4, 4)}
    ctx.env_step = 123
    tr(ctx)
    assert ctx.train_iter == 1 and L.calls[0][1] == {'num_env_steps_sampled_lifetime': 123}
    assert ctx.train_output[0]['total_loss'] == 1.0 and ctx.train_output[0]['num_env_steps_trained'] == 4
    assert ctx.train_output[0]['priority'].shape == (4,)
    assert tr.__roles__ == frozenset({Role.LEARNER})
    with pytest.raises(TypeError, match='update'):
        trainer(small_cfg(), object())


def test_flatten_update_result_multi_module():
    out = flatten_update_result({'a': {'loss': FakeStats(1)}, 'b': {'loss': FakeStats(2)},
                                 '__all_modules__': {'n': FakeStats(3)}})
    assert out == {'a': {'loss': 1}, 'b': {'loss': 2}, 'n': 3}


def test_offpolicy_learner_writes_priorities_after_each_round():
    log = []
    b = filled(16, per=True)
    orig = b.update_priority

    def spy(indices, priorities):
        log.append(('priority', float(np.asarray(priorities)[0])))
        return orig(indices, priorities)

    b.update_priority = spy
    L = FakeLearner(log)
    cfg = small_cfg(update_per_collect=3)
    with task.start(ctx=OnlineRLContext()):
        opl = OffPolicyLearner(cfg, L, b)
        ctx = task.ctx
        opl(ctx)
    assert log == [('train', 1), ('priority', 11.0), ('train', 2), ('priority', 12.0), ('train', 3),
                   ('priority', 13.0)]
    assert ctx.train_iter == 3
    assert isinstance(ctx.train_output, list) and len(ctx.train_output) == 3
    assert [o['total_loss'] for o in ctx.train_output] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert OffPolicyLearner.__roles__ == frozenset({Role.LEARNER})


def test_offpolicy_learner_stops_when_data_is_short_and_uses_reward_model():
    class RM:
        def __init__(self):
            self.n = 0

        def estimate(self, data):
            self.n += 1
            return {'obs': data['obs'] * 0 + 42}

    cfg = small_cfg(update_per_collect=5)
    L = FakeLearner()
    with task.start(ctx=OnlineRLContext()):
        ctx = task.ctx
        OffPolicyLearner(cfg, L, filled(2))(ctx)
        assert ctx.train_output == [] and ctx.train_iter == 0 and L.calls == []
        rm = RM()
        OffPolicyLearner(cfg, L, filled(10), reward_model=rm)(ctx)
    assert rm.n == 5 and len(L.calls) == 5 and float(L.calls[0][0]['obs'][0, 0]) == 42.0
    with pytest.raises(TypeError, match='estimate'):
        OffPolicyLearner(cfg, L, filled(1), reward_model=object())
