"""The exchangers in one process: voids that cost nothing, argument checks, the columnar batch packing."""
import numpy as np
import pytest
import torch

from contexts import OnlineRLContext
from middleware import ContextExchanger, ModelExchanger, PeriodicalModelExchanger
from middleware.exchange.shared import pack_rows, unpack_rows
from pipeline import task


def test_single_process_exchangers_are_voids_and_the_chain_skips_them():
    model = torch.nn.Linear(2, 2)
    with task.start(ctx=OnlineRLContext()):
        cx, mx = ContextExchanger(), ModelExchanger(model)
        px = PeriodicalModelExchanger(model, mode='send', period=5)
        assert all(getattr(x, '__is_void__', False) for x in (cx, mx, px))
        task.use(cx)
        task.use(mx)
        task.use(px)
        assert task._middleware == []  # not registered at all: zero cost per step
        seen = []
        task.use(lambda ctx: seen.append(ctx.env_step))
        task.run(3)
    assert seen == [0, 0, 0]


def test_pack_rows_round_trip_same_values():
    rows = [{'obs': np.arange(4, dtype=np.float32) + j, 'action': j % 2, 'reward': 1.5 * j,
             'next_obs': np.ones(4, np.float32) * j, 'terminated': j == 2, 'env_id': j} for j in range(5)]
    packed = pack_rows(rows)
    assert packed['cols']['obs'].shape == (5, 4)  # stacked into one array
    back = unpack_rows(packed)
    assert len(back) == 5
    for a, b in zip(rows, back):
        assert a.keys() == b.keys()
        for k in a:
            if isinstance(a[k], np.ndarray):
                np.testing.assert_array_equal(a[k], b[k])
            else:
                assert a[k] == b[k]


def test_pack_rows_leaves_mixed_items_alone():
    rows = [{'a': 1}, {'b': 2}]
    assert unpack_rows(pack_rows(rows)) == rows
    shapes = [{'x': np.zeros(2)}, {'x': np.zeros(3)}]  # ragged: kept as a list column
    back = unpack_rows(pack_rows(shapes))
    assert [r['x'].shape for r in back] == [(2,), (3,)]
    assert unpack_rows(pack_rows([])) == []


@pytest.mark.parametrize('kwargs, match', [
    ({'skip_n_iter': -1}, 'skip_n_iter'),
    ({'max_merge': 0}, 'max_merge'),
    ({'on_collector_lost': 'ignore'}, 'on_collector_lost'),
    ({'wait_timeout': -1}, 'wait_timeout'),
])
def test_context_exchanger_rejects_bad_arguments(kwargs, match, monkeypatch):
    from pipeline.runtime.router import LocalRouter

    monkeypatch.setattr(LocalRouter, 'is_active', True)  # pretend to have peers so the checks run
    with task.start(ctx=OnlineRLContext(), roles=['collector']):
        with pytest.raises(ValueError, match=match):
            ContextExchanger(**kwargs)


def test_model_exchanger_rejects_bad_arguments(monkeypatch):
    from pipeline.runtime.router import LocalRouter

    monkeypatch.setattr(LocalRouter, 'is_active', True)
    with task.start(ctx=OnlineRLContext(), roles=['collector']):
        with pytest.raises(TypeError, match='torch.nn.Module'):
            ModelExchanger(object())
        with pytest.raises(ValueError, match='mode'):
            PeriodicalModelExchanger(torch.nn.Linear(1, 1), mode='both')
        with pytest.raises(ValueError, match='stale_toleration'):
            PeriodicalModelExchanger(torch.nn.Linear(1, 1), stale_toleration=0)


def test_learner_and_collector_on_one_node_is_a_clear_error(monkeypatch):
    from pipeline.runtime.router import LocalRouter

    monkeypatch.setattr(LocalRouter, 'is_active', True)
    with task.start(ctx=OnlineRLContext(), roles=['learner', 'collector']):
        with pytest.raises(ValueError, match='both learner and collector'):
            ContextExchanger()
