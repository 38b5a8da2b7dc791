"""Transitions, filled buffers and a small DQN config shared by the middleware tests."""
import numpy as np

from pipeline.config import compile_config
from pipeline.data import DequeBuffer, PrioritizedSampler


def transition(i, env=0):
    """Transition ``i``: obs all ``i``, action ``i % 2``, reward ``i``."""
    return {'obs': np.full(4, i, np.float32), 'action': i % 2, 'reward': float(i), 'next_obs': np.zeros(4, np.float32),
            'terminated': False, 'truncated': False, 'env_id': env}


def filled(n, size=100, per=False, start=0, seed=0):
    """A buffer of ``size`` holding transitions ``start .. start + n - 1`` (with prioritized replay when ``per``)."""
    b = DequeBuffer(size, seed=seed, sampler=PrioritizedSampler(is_weight=True) if per else None)
    for i in range(start, start + n):
        b.push(transition(i), {'env': 0})
    return b


def small_cfg(**learn):
    """A DQN config with batch 4 and learning from 4 transitions, ``learn`` overriding."""
    learn.setdefault('batch_size', 4)
    learn.setdefault('learning_starts', 4)
    return compile_config({'policy': {'learn': learn}})
