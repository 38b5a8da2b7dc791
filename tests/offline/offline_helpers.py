"""Small datasets for the offline tests."""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


def make_columns(lengths: Sequence[int] = (10, 40, 50), obs_dim: int = 4, discrete: bool = True, act_dim: int = 2,
                 seed: int = 0) -> Dict[str, np.ndarray]:
    """Episodes of the given lengths; episode i ends terminated when i is even, truncated when odd.
    ``obs[:, 0]`` holds the row number (so tests can tell which rows a minibatch has)."""
    rng = np.random.default_rng(seed)
    n = int(sum(lengths))
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    obs[:, 0] = np.arange(n)
    next_obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    terminated = np.zeros(n, bool)
    truncated = np.zeros(n, bool)
    ends = np.cumsum(lengths) - 1
    for i, e in enumerate(ends):
        (terminated if i % 2 == 0 else truncated)[e] = True
    action = rng.integers(0, act_dim, n) if discrete else rng.uniform(-1, 1, (n, act_dim)).astype(np.float32)
    return {'obs': obs, 'action': action, 'reward': rng.normal(size=n).astype(np.float32), 'next_obs': next_obs,
            'terminated': terminated, 'truncated': truncated}
