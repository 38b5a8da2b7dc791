"""save_data / load_data write one column per field (format version 2) and read version-1 files too."""
import os

import numpy as np
import pytest
import torch

from pipeline.data import DequeBuffer, PrioritizedSampler
from pipeline.data.frame_storage import FrameStorage
from pipeline.data.serialization import encode


def sac_transition(i, rng):
    """As StepCollector + data_pusher store a continuous-control step, plus fields of other types."""
    return {'obs': rng.standard_normal(17).astype(np.float32), 'action': rng.standard_normal(6).astype(np.float32),
            'reward': float(rng.standard_normal()), 'next_obs': rng.standard_normal(17).astype(np.float32),
            'terminated': i % 7 == 0, 'truncated': False, 'env_id': i % 4,
            'value': torch.tensor([i, -i], dtype=torch.float16), 'step': np.int64(i), 'tag': f'ep{i // 10}',
            'none': None, 'pair': (i, float(i)), 'nested': {'h': np.full((2, 3), i % 256, dtype=np.uint8)}}


def assert_same(a, b, where='data'):
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            assert_same(a[k], b[k], f'{where}[{k!r}]')
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for j, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f'{where}[{j}]')
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, (np.ndarray, np.generic)):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), where
    else:
        assert a == b, where


def per_buffer(size):
    buf = DequeBuffer(size, seed=0, sampler=PrioritizedSampler(is_weight=True))
    return buf, buf.sampler


def test_round_trip_keeps_every_field_dtype_index_meta_and_per_priority(tmp_path):
    rng = np.random.default_rng(0)
    buf, per = per_buffer(300)
    for i in range(400):  # 100 evicted
        buf.push(sac_transition(i, rng), {'env': i % 4, 'train_iter_data_collected': i // 8})
    buf.delete([150, 151])
    batch = buf.sample_batch(32)
    buf.update_many(batch["indices"].tolist(), meta={'priority': np.linspace(0.5, 9.0, 32)})  # written lazily
    buf.sample(5)  # these items get meta['priority_IS'], the others do not
    path = str(tmp_path / 'buf.pt')
    buf.save_data(path)

    other, per2 = per_buffer(300)
    other.push(sac_transition(0, rng))
    other.load_data(path)
    assert other.indices() == buf.indices() and len(other.indices()) == 298
    for i in buf.indices():
        a, b = buf.get_by_index(i), other.get_by_index(i)
        assert_same(a.data, b.data)
        assert a.meta == b.meta
        assert per2.priority(i) == per.priority(i)
    assert per2.max_priority == per.max_priority and per2.sample_count == per.sample_count == 2
    assert per2.beta == per.beta  # the IS-weight annealing continues where it was
    assert other.push(sac_transition(1, rng)).index == 400
    got = other.sample_batch(64)  # the loaded rows feed the columnar batch path
    assert got['obs'].shape == (64, 17) and got['obs'].dtype == torch.float32 and got['value'].dtype == torch.float16


def test_the_file_is_columnar_one_tensor_per_field_and_small(tmp_path):
    rng = np.random.default_rng(1)
    buf = DequeBuffer(2000)
    for i in range(2000):
        buf.push({k: v for k, v in sac_transition(i, rng).items() if k in ('obs', 'action', 'reward', 'next_obs')},
                 {'env': i % 4})
    path = str(tmp_path / 'buf.pt')
    buf.save_data(path)
    payload = torch.load(path, weights_only=True)
    assert payload['version'] == 2 and payload['ids'].tolist() == list(range(2000))
    cols = payload['data']['cols']
    assert cols['obs']['v'].shape == (2000, 17) and cols['reward']['v'].dtype == torch.float64
    raw = 2000 * (17 + 6 + 17) * 4 + 2000 * (8 + 8 + 8)  # field bytes, meta, ids
    assert os.path.getsize(path) < raw * 1.2 + 20_000


def test_mixed_columns_and_whole_episodes_round_trip(tmp_path):
    buf = DequeBuffer(10)
    rows = [{'a': 1, 'b': torch.zeros(2)}, {'a': torch.ones(3), 'b': torch.zeros(2), 'c': 'x'},
            {'a': 2**70, 'b': torch.zeros(2)}]
    episodes = [[{'obs': np.full(3, t, np.float32), 'r': float(t)} for t in range(n)] for n in (3, 0, 5)]
    for r in rows + episodes + ['text', 7]:
        buf.push(r)
    path = str(tmp_path / 'buf.pt')
    buf.save_data(path)
    other = DequeBuffer(10)
    other.load_data(path)
    for i in buf.indices():
        assert_same(buf.get_by_index(i).data, other.get_by_index(i).data)


def test_frame_storage_file_holds_every_frame_once_and_loads_into_any_storage(tmp_path):
    rng = np.random.default_rng(2)
    frames = rng.integers(0, 255, (40, 8, 8), dtype=np.uint8)
    buf = DequeBuffer(30, storage=FrameStorage(30), sampler=PrioritizedSampler())
    for t in range(36):
        buf.push({'obs': frames[t:t + 4], 'action': t % 3, 'next_obs': frames[t + 1:t + 5], 'reward': 1.0},
                 {'priority': float(t + 1)})
    path = str(tmp_path / 'buf.pt')
    buf.save_data(path)
    node = torch.load(path, weights_only=True)['data']
    assert node['kind'] == 'frames' and node['frames'].shape == (34, 8, 8)  # frames 6..39, not 30 x 8 stacks
    for target in (DequeBuffer(30, storage=FrameStorage(30), sampler=PrioritizedSampler()),
                   DequeBuffer(30, sampler=PrioritizedSampler())):
        target.load_data(path)
        assert target.indices() == buf.indices()
        for i in buf.indices():
            assert_same(buf.get_by_index(i).data, target.get_by_index(i).data)
            assert buf.get_by_index(i).meta == target.get_by_index(i).meta
        got, want = target.sample_batch(8), buf.sample_batch(8)
        assert got['obs'].shape == want['obs'].shape == (8, 4, 8, 8)
    loaded = DequeBuffer(30, storage=FrameStorage(30))
    loaded.load_data(path)
    assert loaded.storage.pool.live == buf.storage.pool.live == 34
    loaded.push({'obs': frames[35:39], 'action': 0, 'next_obs': frames[36:40], 'reward': 0.0})  # frames shared
    assert loaded.storage.pool.live == 34 - 1  # item 6 evicted (frame 6 freed); no new frame
    small = DequeBuffer(10, storage=FrameStorage(10))
    small.load_data(path)  # the newest 10 items: frames only the dropped items used are freed
    assert small.indices() == buf.indices()[-10:] and small.storage.pool.live == 14
    assert_same(small.get_by_index(35).data, buf.get_by_index(35).data)


def test_a_version_1_file_still_loads(tmp_path):
    rng = np.random.default_rng(3)
    items = [sac_transition(i, rng) for i in range(5)]
    path = str(tmp_path / 'old.pt')
    torch.save({'format': 'rlpipe.DequeBuffer', 'version': 1, 'size': 5, 'next_id': 9, 'ids': [2, 3, 5, 7, 8],
                'data': [encode(d) for d in items], 'meta': [encode({'priority': float(i + 1)}) for i in range(5)]},
               path)
    buf, per = per_buffer(4)
    buf.load_data(path)
    assert buf.indices() == [3, 5, 7, 8]  # the newest 4
    for i, d in zip([3, 5, 7, 8], items[1:]):
        assert_same(d, buf.get_by_index(i).data)
    assert per.priority(8) == 5.0 and buf.push({'x': 0}).index == 9
