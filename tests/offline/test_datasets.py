"""Offline datasets: validation messages, episode bounds, chunked streaming under a memory cap, replay-buffer readers."""
from __future__ import annotations

import os

import numpy as np
import pytest

from pipeline.offline import (ChunkedDataset, DatasetError, OfflineDataset, load_dataset, open_directory,
                              save_chunks)

from offline_helpers import make_columns


def test_episode_bounds_and_columns_kept_exactly():
    cols = make_columns((10, 40, 50))
    ds = OfflineDataset(cols)
    starts, ends = ds.episode_bounds()
    assert starts.tolist() == [0, 10, 50] and ends.tolist() == [9, 49, 99]
    np.testing.assert_array_equal(ds['next_obs'], cols['next_obs'])
    assert ds['terminated'].tolist() == cols['terminated'].tolist()
    assert ds['truncated'][49] and not ds['terminated'][49]
    assert ds.discrete and ds['action'].dtype == np.int64
    np.testing.assert_allclose(ds.episode_returns(), [cols['reward'][a:b + 1].sum() for a, b in zip(starts, ends)],
                               rtol=1e-5)


@pytest.mark.parametrize('change, words', [
    (lambda c: c.pop('next_obs'), ["missing column(s) 'next_obs'"]),
    (lambda c: c.update(action=c['action'][:-3]), ['shape mismatch', 'action=97']),
    (lambda c: c.update(next_obs=c['next_obs'][:, :3]), ['shape mismatch', 'next_obs is (100, 3)']),
    (lambda c: c['reward'].__setitem__(17, np.nan), ['NaN rewards', 'row 17']),
    (lambda c: c['obs'].__setitem__((5, 2), np.inf), ["infinite values in 'obs'", 'row 5']),
    (lambda c: c['terminated'].__setitem__(99, False), ['episode without an end', 'rows 50..99']),
    (lambda c: c.update(reward=np.ones((100, 2))), ["'reward' must hold one value per row"]),
])
def test_bad_datasets_refused_with_one_message(change, words):
    cols = make_columns((10, 40, 50))
    change(cols)
    with pytest.raises(DatasetError) as e:
        OfflineDataset(cols)
    for w in words:
        assert w in str(e.value)


def test_empty_and_non_mapping_refused():
    with pytest.raises(DatasetError, match='empty'):
        OfflineDataset({k: v[:0] for k, v in make_columns().items()})
    with pytest.raises(DatasetError, match='dict of arrays'):
        OfflineDataset([1, 2, 3])


def test_chunked_dataset_streams_under_a_small_cap(tmp_path):
    cols = make_columns((10, 40, 50, 7, 13))
    ds = OfflineDataset(cols)
    save_chunks(ds, str(tmp_path), rows_per_chunk=30)
    whole = open_directory(str(tmp_path))
    assert isinstance(whole, OfflineDataset) and len(whole) == 120
    streamed = open_directory(str(tmp_path), memory_cap_bytes=1000)
    assert isinstance(streamed, ChunkedDataset) and len(streamed.loaders) >= 3
    assert all(r <= 50 for r in streamed.rows)  # a 50-row episode gets a chunk of its own
    loads = []
    orig = list(streamed.loaders)
    streamed.loaders = [lambda f=f, i=i: (loads.append(i), f())[1] for i, f in enumerate(orig)]
    rng = np.random.default_rng(0)
    epochs = []
    for _ in range(2):
        mbs = list(streamed.iter_minibatches(16, rng))
        assert [len(m['reward']) for m in mbs] == [16] * 7 + [8]
        rows = np.concatenate([m['obs'][:, 0] for m in mbs]).astype(int)
        assert sorted(rows.tolist()) == list(range(120))  # every row exactly once per epoch
        for m in mbs:  # rows keep their own next_obs / terminated
            idx = m['obs'][:, 0].astype(int)
            np.testing.assert_array_equal(m['next_obs'], cols['next_obs'][idx])
            np.testing.assert_array_equal(m['terminated'], cols['terminated'][idx])
        epochs.append(rows)
    assert not np.array_equal(epochs[0], epochs[1])  # shuffled per epoch
    assert len(loads) == 2 * len(orig)  # each chunk read once per epoch, never all at once


def test_chunk_that_goes_bad_on_disk_is_named(tmp_path):
    save_chunks(OfflineDataset(make_columns((10, 40, 50))), str(tmp_path), rows_per_chunk=30)
    bad = make_columns((10,))
    bad['reward'][3] = np.nan
    np.savez(os.path.join(str(tmp_path), 'chunk_00000.npz'), **bad)
    with pytest.raises(DatasetError, match=r'chunk 0\): NaN rewards'):
        open_directory(str(tmp_path), memory_cap_bytes=10)


def test_npz_round_trip(tmp_path):
    ds = OfflineDataset(make_columns(discrete=False))
    ds.save(str(tmp_path / 'd.npz'))
    back = load_dataset(str(tmp_path / 'd.npz'))
    assert not back.discrete and back['action'].shape == (100, 2)
    np.testing.assert_array_equal(back['obs'], ds['obs'])


def _push_interleaved(buf, n_envs=2, steps=23, ep_len=5):
    """Two envs stepping in lockstep (as StepCollector pushes them); every env's episode lasts ep_len steps."""
    for t in range(steps):
        for e in range(n_envs):
            done = (t + 1) % ep_len == 0
            buf.push({'obs': np.array([t, e], np.float32), 'action': t % 2, 'reward': 1.0,
                      'next_obs': np.array([t + 1, e], np.float32), 'terminated': done and e == 0,
                      'truncated': done and e == 1, 'env_id': e}, {'env': e})


def test_replay_buffer_file_regrouped_per_env(tmp_path):
    from pipeline.data import DequeBuffer
    from pipeline.offline import from_buffer_file

    buf = DequeBuffer(100)
    _push_interleaved(buf)
    path = str(tmp_path / 'buf.pt')
    buf.save_data(path)
    with pytest.raises(DatasetError, match='episode without an end.*env 0.*unfinished="drop"'):
        from_buffer_file(path)
    ds = from_buffer_file(path, unfinished='drop')
    assert len(ds) == 2 * 20  # the 3 unfinished steps of each env are left out
    env = ds['obs'][:, 1]
    assert env[:20].tolist() == [0] * 20 and env[20:].tolist() == [1] * 20
    np.testing.assert_array_equal(ds['next_obs'][:, 0], ds['obs'][:, 0] + 1)  # each row's own next obs
    starts, ends = ds.episode_bounds()
    assert len(starts) == 8 and (ends - starts + 1).tolist() == [5] * 8
    assert ds['terminated'][:20].sum() == 4 and ds['truncated'][20:].sum() == 4


def test_buffer_file_checks(tmp_path):
    from pipeline.data import DequeBuffer
    from pipeline.offline import from_buffer, from_buffer_file

    p = tmp_path / 'junk.pt'
    p.write_bytes(b'not a torch file')
    with pytest.raises(DatasetError, match='not a replay buffer file'):
        from_buffer_file(str(p))
    buf = DequeBuffer(10)
    buf.push({'obs': np.zeros(2), 'action': 0, 'reward': 1.0, 'next_obs': np.zeros(2), 'terminated': True,
              'truncated': False, 'nstep': 3})
    with pytest.raises(DatasetError, match='n-step transitions'):
        from_buffer(buf)
    buf2 = DequeBuffer(10)
    buf2.push({'obs': np.zeros(2), 'action': 0})
    with pytest.raises(DatasetError, match="missing column"):
        from_buffer(buf2)


def test_missing_minari_names_the_extra(monkeypatch):
    import sys

    from pipeline.offline.minari_reader import from_minari

    monkeypatch.setitem(sys.modules, 'minari', None)  # as if not installed
    with pytest.raises(ImportError, match=r'"offline" extra: pip install "rlpipe\[offline\]"'):
        from_minari('cartpole/any-v0')
