"""An env's observation and action spaces as plain data, so a checkpoint can size its policy's networks
without making the env: ``spaces_to_plain(obs_space, action_space)`` for the file, ``spaces_from_plain(d)``
to read it back (checked: a malformed or oversized entry raises :class:`SavedSpacesError`, one line).

Only ``Box`` and ``Discrete`` spaces are stored; ``spaces_to_plain`` returns ``None`` for any other, and a
loader then needs the env. ``Box`` bounds are stored as tensors (they load with ``weights_only=True``).
"""
from __future__ import annotations

import math
from typing import Dict, Mapping, Optional, Tuple

import gymnasium as gym
import numpy as np
import torch

__all__ = ['SavedSpacesError', 'spaces_to_plain', 'spaces_from_plain', 'MAX_SPACE_ELEMENTS']

#: the most elements one stored ``Box`` may have (an 84x84x4 Atari observation has 28,224)
MAX_SPACE_ELEMENTS = 1 << 22
_DTYPES = ('float16', 'float32', 'float64', 'uint8', 'int8', 'int16', 'int32', 'int64', 'bool')


class SavedSpacesError(ValueError):
    """The spaces stored in a file are malformed; the message is one line."""


def _space_to_plain(space: object) -> Optional[Dict[str, object]]:
    if isinstance(space, gym.spaces.Discrete):
        return {'type': 'Discrete', 'n': int(space.n), 'start': int(space.start)}
    if isinstance(space, gym.spaces.Box) and space.dtype.name in _DTYPES:
        return {'type': 'Box', 'shape': [int(s) for s in space.shape], 'dtype': space.dtype.name,
                'low': torch.from_numpy(np.array(space.low)), 'high': torch.from_numpy(np.array(space.high))}
    return None


def spaces_to_plain(observation_space: object, action_space: object) -> Optional[Dict[str, object]]:
    """``{'observation': ..., 'action': ...}`` (plain values and tensors), or ``None`` when either space is
    not a ``Box`` or ``Discrete``."""
    obs, act = _space_to_plain(observation_space), _space_to_plain(action_space)
    if obs is None or act is None:
        return None
    return {'observation': obs, 'action': act}


def _int(d: Mapping, key: str, where: str, low: int, high: int) -> int:
    v = d.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high:
        raise SavedSpacesError(f'{where}.{key}: expected an int in [{low}, {high}], got {v!r}')
    return v


def _space_from_plain(d: object, where: str) -> gym.Space:
    if not isinstance(d, Mapping):
        raise SavedSpacesError(f'{where}: expected a mapping, got {type(d).__name__}')
    kind = d.get('type')
    if kind == 'Discrete':
        return gym.spaces.Discrete(_int(d, 'n', where, 1, 1 << 31), start=_int(d, 'start', where, -(1 << 31), 1 << 31))
    if kind != 'Box':
        raise SavedSpacesError(f'{where}.type: expected Box or Discrete, got {kind!r}')
    shape, dtype = d.get('shape'), d.get('dtype')
    if not isinstance(shape, (list, tuple)) or not 1 <= len(shape) <= 8 or \
            not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in shape):
        raise SavedSpacesError(f'{where}.shape: expected 1 to 8 positive ints, got {shape!r}')
    if math.prod(shape) > MAX_SPACE_ELEMENTS:
        raise SavedSpacesError(f'{where}.shape: {shape} has more than {MAX_SPACE_ELEMENTS} elements')
    if dtype not in _DTYPES:
        raise SavedSpacesError(f'{where}.dtype: expected one of {", ".join(_DTYPES)}, got {dtype!r}')
    bounds = []
    for key in ('low', 'high'):
        t = d.get(key)
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape):
            got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise SavedSpacesError(f'{where}.{key}: expected a tensor of shape {tuple(shape)}, got {got}')
        bounds.append(t.detach().cpu().numpy().astype(dtype))
    if np.isnan(bounds[0]).any() or np.isnan(bounds[1]).any() or (bounds[0] > bounds[1]).any():
        raise SavedSpacesError(f'{where}: low must be <= high everywhere (and not NaN)')
    return gym.spaces.Box(bounds[0], bounds[1], shape=tuple(shape), dtype=dtype)


def spaces_from_plain(d: object) -> Tuple[gym.Space, gym.Space]:
    """``(observation_space, action_space)`` from what :func:`spaces_to_plain` wrote, checked."""
    if not isinstance(d, Mapping):
        raise SavedSpacesError(f'spaces: expected a mapping, got {type(d).__name__}')
    return _space_from_plain(d.get('observation'), 'spaces.observation'), \
        _space_from_plain(d.get('action'), 'spaces.action')
