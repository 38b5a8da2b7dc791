"""A copied buffer draws its own random stream (DI-engine's copies sample in lockstep)."""
from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from pipeline.data import DequeBuffer, PrioritizedSampler


def _buffer(per: bool = False) -> DequeBuffer:
    buf = DequeBuffer(500, seed=3, sampler=PrioritizedSampler() if per else None)
    for i in range(400):
        buf.push({"obs": np.full(2, i, np.float32), "reward": float(i)})
    return buf


def _draws(buf: DequeBuffer, n: int = 5) -> list:
    return [sorted(buf.sample_batch(16)["indices"].tolist()) for _ in range(n)]


@pytest.mark.usefixtures("kernel")  # both kernels: the numpy path once copied its drawn-ahead blocks
def test_copies_sample_apart_from_the_original_and_each_other_and_reproducibly():
    for per in (False, True):
        plain = _draws(_buffer(per))                 # the original's stream, never copied
        buf = _buffer(per)
        _draws(buf, 1)                               # offsets drawn ahead must not leak into copies
        a, b = copy.deepcopy(buf), pickle.loads(pickle.dumps(buf))
        da, db, do = _draws(a), _draws(b), _draws(buf)
        assert do == plain[1:] + _draws(_buffer(per), 6)[5:], "copying changed the original's stream"
        assert da != do and db != do and da != db
        buf2 = _buffer(per)
        _draws(buf2, 1)
        assert _draws(copy.deepcopy(buf2)) == da     # the first copy of the same buffer: the same stream


def test_identical_sampling_on_purpose():
    buf = _buffer()
    twin = copy.deepcopy(buf)
    twin.storage.rng = copy.deepcopy(buf.storage.rng)
    assert _draws(twin) == _draws(buf)


def test_the_fetcher_names_the_type_of_the_items_it_cannot_batch():
    import pytest
    import torch
    from easydict import EasyDict

    from contexts import OnlineRLContext
    from middleware.functional.data_processor import offpolicy_data_fetcher

    cfg = EasyDict({"policy": {"learn": {"batch_size": 4}}})
    for items in ([torch.zeros(3) for _ in range(8)], [[1, 2, 3] for _ in range(8)]):
        buf = DequeBuffer(20, seed=0)
        for it in items:
            buf.push(it)
        fetch = offpolicy_data_fetcher(cfg, buf)
        with pytest.raises(TypeError, match=f"holds {type(items[0]).__name__} items"):
            g = fetch(OnlineRLContext())
            if g is not None:
                next(g)
