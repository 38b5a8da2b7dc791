"""Minari datasets (the `offline` extra), made locally with Minari's DataCollector: nothing is downloaded."""
from __future__ import annotations

import numpy as np
import pytest

minari = pytest.importorskip('minari', reason='minari is not installed: pip install "rlpipe[offline]" (the offline extra)')
pytest.importorskip('jax', reason='making Minari datasets needs minari[create] (jax): pip install "minari[create]"')


@pytest.fixture
def cartpole_minari(tmp_path, monkeypatch):
    """6 CartPole episodes of random actions, some cut by a 15-step time limit."""
    import gymnasium as gym
    from minari import DataCollector

    monkeypatch.setenv('MINARI_DATASETS_PATH', str(tmp_path))
    env = DataCollector(gym.make('CartPole-v1', max_episode_steps=15))
    for ep in range(6):
        env.reset(seed=ep)
        while True:
            _, _, term, trunc, _ = env.step(env.action_space.sample())
            if term or trunc:
                break
    ds = env.create_dataset(dataset_id='cartpole/test-v0', algorithm_name='random')
    env.close()
    return ds


def test_minari_rows_match_episodes_exactly(cartpole_minari):
    from pipeline.offline import OfflineDataset, from_minari

    ds = from_minari('cartpole/test-v0')
    assert isinstance(ds, OfflineDataset) and len(ds) == cartpole_minari.total_steps
    starts, ends = ds.episode_bounds()
    eps = list(cartpole_minari.iterate_episodes())
    assert len(starts) == len(eps)
    for s, e, ep in zip(starts, ends, eps):
        np.testing.assert_allclose(ds['obs'][s:e + 1], ep.observations[:-1])
        np.testing.assert_allclose(ds['next_obs'][s:e + 1], ep.observations[1:])  # the final obs kept
        assert ds['terminated'][s:e + 1].tolist() == list(ep.terminations)
        assert ds['truncated'][s:e + 1].tolist() == list(ep.truncations)
        assert ds['action'][s:e + 1].tolist() == list(ep.actions)


def test_minari_streams_above_the_cap(cartpole_minari):
    from pipeline.offline import ChunkedDataset, from_minari

    whole = from_minari(cartpole_minari)
    streamed = from_minari(cartpole_minari, memory_cap_bytes=1000, episodes_per_chunk=2)
    assert isinstance(streamed, ChunkedDataset) and len(streamed.loaders) == 3
    assert len(streamed) == len(whole)
    rows = np.concatenate([mb['obs'] for mb in streamed.iter_minibatches(7, np.random.default_rng(0))])
    key = lambda a: np.lexsort(a.T)  # noqa: E731 - same rows, any order
    np.testing.assert_allclose(rows[key(rows)], whole['obs'][key(whole['obs'])])
