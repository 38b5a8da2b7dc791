"""offline_data_fetcher over OfflineRLContext: epochs, shuffled minibatches, exact counts, role gating."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from contexts import OfflineRLContext
from middleware.offline import offline_data_fetcher
from pipeline.offline import OfflineDataset

from offline_helpers import make_columns


def _cfg(batch_size, seed=0):
    return {'seed': seed, 'policy': {'learn': {'batch_size': batch_size}}}


def _run(fetch, steps):
    ctx = OfflineRLContext()
    seen = []
    for _ in range(steps):
        fetch(ctx)
        seen.append((ctx.train_data, ctx.train_epoch))
        ctx = ctx.renew()
    return seen, ctx


@pytest.mark.parametrize('drop_last, per_epoch, last', [(False, 7, 4), (True, 6, 16)])
def test_every_row_once_per_epoch_and_exact_minibatch_count(drop_last, per_epoch, last):
    ds = OfflineDataset(make_columns((10, 40, 50)))  # 100 rows, batch 16
    fetch = offline_data_fetcher(_cfg(16), ds, drop_last=drop_last)
    assert fetch.minibatches_per_epoch == per_epoch
    seen, ctx = _run(fetch, 3 * per_epoch)
    assert ctx.train_epoch == 3
    epochs = []
    for e in range(3):
        part = seen[e * per_epoch:(e + 1) * per_epoch]
        sizes = [len(d['reward']) for d, _ in part]
        assert sizes == [16] * (per_epoch - 1) + [last]
        # train_epoch advances right after the epoch's last minibatch, not before
        assert [ep for _, ep in part] == [e] * (per_epoch - 1) + [e + 1]
        rows = torch.cat([d['obs'][:, 0] for d, _ in part]).long().tolist()
        assert len(set(rows)) == len(rows)
        if not drop_last:
            assert sorted(rows) == list(range(100))
        epochs.append(rows)
    assert epochs[0] != epochs[1] and epochs[1] != epochs[2]  # a new order every epoch


def test_batches_are_tensors_with_training_dtypes():
    ds = OfflineDataset(make_columns())
    fetch = offline_data_fetcher(_cfg(8), ds)
    ctx = OfflineRLContext()
    fetch(ctx)
    d = ctx.train_data
    assert set(d) == {'obs', 'action', 'reward', 'next_obs', 'terminated', 'truncated'}
    assert d['obs'].dtype == torch.float32 and d['action'].dtype == torch.int64
    assert d['terminated'].dtype == torch.bool and d['obs'].shape == (8, 4)
    idx = d['obs'][:, 0].long().numpy()
    np.testing.assert_array_equal(d['next_obs'].numpy(), ds['next_obs'][idx])


def test_same_seed_same_order_other_seed_other_order():
    ds = OfflineDataset(make_columns())
    orders = []
    for seed in (0, 0, 1):
        seen, _ = _run(offline_data_fetcher(_cfg(10, seed), ds), 3)
        orders.append(torch.cat([d['obs'][:, 0] for d, _ in seen]).tolist())
    assert orders[0] == orders[1] and orders[0] != orders[2]


def test_max_epoch_finishes_the_task_and_bad_inputs():
    from pipeline import task

    ds = OfflineDataset(make_columns())
    with task.start(ctx=OfflineRLContext()):
        task.use(offline_data_fetcher(_cfg(30), ds, max_epoch=2))
        task.run(max_step=100)
        assert task.ctx.train_epoch == 2 and task.ctx.total_step == 7  # 2 epochs of 4 minibatches
    with pytest.raises(TypeError, match='OfflineDataset'):
        offline_data_fetcher(_cfg(4), make_columns())
    with pytest.raises(ValueError, match='fewer than one minibatch'):
        offline_data_fetcher(_cfg(1000), ds, drop_last=True)


def test_fetcher_and_trainer_run_only_on_learner_nodes():
    from middleware import trainer
    from pipeline import task
    from pipeline.runtime.roles import Role

    ds = OfflineDataset(make_columns())

    class CountingLearner:
        calls = 0

        def update(self, batch=None, timesteps=None):
            CountingLearner.calls += 1
            assert timesteps is None  # an offline context has no env steps
            return {'default_policy': {'total_loss': 0.0}}

    for roles, expected in (([Role.EVALUATOR], 0), ([Role.LEARNER], 3)):
        CountingLearner.calls = 0
        with task.start(ctx=OfflineRLContext(), roles=roles):
            task.use(offline_data_fetcher(_cfg(10), ds))
            task.use(trainer(_cfg(10), CountingLearner()))
            task.use(lambda ctx: None)  # ungated: the evaluator node has something to run
            task.run(max_step=3)
            assert (task.ctx.train_iter, CountingLearner.calls) == (expected, expected)
