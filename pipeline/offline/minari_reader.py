"""Offline datasets from Minari (Farama's dataset format): ``pip install rlpipe[offline]``.

A Minari episode of ``T`` steps stores ``T + 1`` observations and ``T`` actions, rewards,
terminations and truncations; row ``t`` becomes ``obs = observations[t]``, ``next_obs =
observations[t + 1]``, so an episode's last ``next_obs`` is its final observation. Only flat
``Box`` observations and ``Box``/``Discrete`` actions are read.

A dataset whose arrays would take more than ``memory_cap_bytes`` is not loaded: a
:class:`~pipeline.offline.chunked.ChunkedDataset` reads groups of whole episodes from Minari's files
when an epoch reaches them.
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Union

import numpy as np

from .chunked import ChunkedDataset
from .dataset import DatasetError, OfflineDataset

__all__ = ['from_minari', 'episode_columns', 'MINARI_EXTRA_HINT']

MINARI_EXTRA_HINT = 'Minari datasets need the "offline" extra: pip install "rlpipe[offline]" (or pip install minari)'


def _import_minari() -> Any:
    try:
        import minari  # optional extra: offline
    except ImportError:
        raise ImportError(MINARI_EXTRA_HINT) from None
    return minari


def _as32(a: object) -> np.ndarray:
    a = np.asarray(a)
    return a.astype(np.float32) if np.issubdtype(a.dtype, np.floating) and a.dtype != np.float32 else a


def episode_columns(episodes: Iterable[Any], where: str = 'minari dataset') -> Dict[str, np.ndarray]:
    """The rows of Minari ``EpisodeData`` objects, one after another (see the module docstring).

    Float observations, actions and rewards become float32 (the training dtype) episode by episode, so
    that an iterator of episodes is never held whole in Minari's float64."""
    parts: Dict[str, List[np.ndarray]] = {k: [] for k in ('obs', 'action', 'reward', 'next_obs', 'terminated',
                                                           'truncated')}
    for ep in episodes:
        obs = ep.observations
        if isinstance(obs, dict):
            raise DatasetError(f'{where}: episode {ep.id} has dict observations; only flat Box observations are read')
        obs = _as32(obs)
        t = len(ep.rewards)
        if len(obs) != t + 1:
            raise DatasetError(f'{where}: shape mismatch in episode {ep.id}: {len(obs)} observations for {t} steps '
                               f'(expected {t + 1})')
        parts['obs'].append(obs[:-1])
        parts['next_obs'].append(obs[1:])
        parts['action'].append(_as32(ep.actions))
        parts['reward'].append(_as32(ep.rewards))
        parts['terminated'].append(np.asarray(ep.terminations))
        parts['truncated'].append(np.asarray(ep.truncations))
    if not parts['obs']:
        raise DatasetError(f'{where}: no episodes')
    try:
        return {k: np.concatenate(v) for k, v in parts.items()}
    except ValueError as e:
        raise DatasetError(f'{where}: shape mismatch between episodes ({e})') from None


def _row_bytes(episode: Any) -> int:
    """Bytes one row takes once read: obs and next_obs as float32, the action (int64 or float32), a
    float32 reward and two bools."""
    obs = np.asarray(episode.observations)
    act = np.asarray(episode.actions)
    act_bytes = 8 if np.issubdtype(act.dtype, np.integer) else 4 * int(np.prod(act.shape[1:]) or 1)
    return int(2 * 4 * np.prod(obs.shape[1:]) + act_bytes + 4 + 2)


def from_minari(dataset: Union[str, Any], memory_cap_bytes: Optional[int] = None,
                episodes_per_chunk: Optional[int] = None) -> Union[OfflineDataset, ChunkedDataset]:
    """Read a Minari dataset (a dataset id known to ``minari.load_dataset``, or a ``MinariDataset``).

    Returns an :class:`OfflineDataset`, or a :class:`ChunkedDataset` streaming groups of episodes
    from disk when the rows would take more than ``memory_cap_bytes`` (chunks of about a quarter of
    the cap, or ``episodes_per_chunk`` episodes). Either way every episode is checked before this
    returns (:func:`~pipeline.offline.dataset.validate_columns`). Raises ``ImportError`` naming the
    ``offline`` extra when minari is not installed.
    """
    minari = _import_minari()
    ds = minari.load_dataset(dataset) if isinstance(dataset, str) else dataset
    name = f'minari dataset {getattr(getattr(ds, "spec", None), "dataset_id", dataset)!r}'
    indices = [int(i) for i in ds.episode_indices]
    if not indices:
        raise DatasetError(f'{name}: no episodes')
    if memory_cap_bytes is None:
        return OfflineDataset(episode_columns(ds.iterate_episodes(indices), name), name)
    first = next(iter(ds.iterate_episodes(indices[:1])))
    per_row = _row_bytes(first)
    total_rows = int(ds.total_steps)
    if per_row * total_rows <= memory_cap_bytes:
        return OfflineDataset(episode_columns(ds.iterate_episodes(indices), name), name)
    if episodes_per_chunk is None:
        avg_len = max(total_rows / len(indices), 1.0)
        episodes_per_chunk = max(1, int(memory_cap_bytes / 4 / per_row / avg_len))
    groups = [indices[i:i + episodes_per_chunk] for i in range(0, len(indices), episodes_per_chunk)]
    storage = getattr(ds, 'storage', None)
    rows = []
    for g in groups:  # the step count of each group: from the episodes' metadata, without reading them
        if storage is not None and hasattr(storage, 'get_episode_metadata'):
            rows.append(int(sum(int(m['total_steps']) for m in storage.get_episode_metadata(g))))
        else:
            rows.append(int(sum(len(e.rewards) for e in ds.iterate_episodes(g))))

    def loader(group: List[int]) -> Any:
        return lambda: episode_columns(ds.iterate_episodes(group), name)

    return ChunkedDataset([loader(g) for g in groups], rows, name=name)
