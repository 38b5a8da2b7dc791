"""FrameStorage: exactly the data of the default storage, in a fraction of the memory."""
import numpy as np
import pytest
import torch

from pipeline.data import DequeBuffer, PrioritizedSampler
from pipeline.data.frame_storage import FrameStorage

H = W = 12  # small frames keep the test fast; the layout does not depend on the size


def atari_like_stream(n_steps, n_envs=3, stack=4, nstep=3, ep_len=23, seed=0):
    """Interleaved per-env transitions like StepCollector + nstep_reward_enhancer make: stacks of
    the last `stack` frames (the reset frame repeated at an episode start), next_obs `nstep` ahead
    (or the final observation)."""
    rng = np.random.default_rng(seed)
    per_env = []
    for e in range(n_envs):
        frames, obs, t = [], [], 0
        for _ in range(n_steps // n_envs + nstep + 1):
            if t % ep_len == 0:
                frames = [rng.integers(0, 256, (H, W), dtype=np.uint8)] * stack
            else:
                frames = frames[1:] + [rng.integers(0, 256, (H, W), dtype=np.uint8)]
            obs.append((np.stack(frames), t % ep_len == ep_len - 1))
            t += 1
        per_env.append(obs)
    out = []
    for i in range(n_steps // n_envs):
        for e in range(n_envs):
            o, last = per_env[e][i]
            nxt = per_env[e][i + 1 if last else i + nstep][0]
            out.append({'obs': o, 'action': int(rng.integers(0, 6)), 'reward': float(rng.normal()),
                        'next_obs': nxt, 'terminated': bool(last), 'env_id': e})
    return out


def pair(size, seed=0, sampler=lambda: None):
    """The default storage and a FrameStorage, each with a new ``sampler()`` (None: uniform)."""
    return (DequeBuffer(size, seed=seed, sampler=sampler()),
            DequeBuffer(size, seed=seed, storage=FrameStorage(size, seed=seed), sampler=sampler()))


def assert_batches_equal(a, b):
    assert a["indices"].tolist() == b["indices"].tolist()
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=0)


def test_same_samples_as_the_default_storage_with_eviction():
    ref, fr = pair(200)
    stream = atari_like_stream(600)
    for k, t in enumerate(stream):
        ref.push(t)
        fr.push(t)
        if k % 50 == 49:
            assert_batches_equal(ref.sample_batch(32), fr.sample_batch(32))
    for x, y in zip(ref.sample(20), fr.sample(20)):
        assert x.index == y.index
        for key in x.data:
            np.testing.assert_array_equal(x.data[key], y.data[key])
    assert fr.count() == 200
    live = fr.storage.pool.live
    assert live <= 200 * 1.25 + 3 * 4 * 3   # about one new frame per transition (+ reset stacks, n-step lookahead)
    assert live < 2 * 4 * 200 / 5           # far from 8 frames per transition


def test_per_and_update_work_unchanged():
    ref, fr = pair(100, seed=3, sampler=lambda: PrioritizedSampler(is_weight=True))
    for t in atari_like_stream(150, seed=1):
        ref.push(t)
        fr.push(t)
    for _ in range(5):
        a, b = ref.sample_batch(16), fr.sample_batch(16)
        assert_batches_equal(a, b)
        torch.testing.assert_close(a["weight"], b["weight"])
        pri = np.random.default_rng(len(a["indices"])).random(16) + 0.1
        for i, p in zip(a["indices"].tolist(), pri):
            assert ref.update(i, meta={'priority': float(p)}) and fr.update(i, meta={'priority': float(p)})
    # replacing an item's data re-packs it: new frames read back, old ones released
    idx = fr.sample(1)[0].index
    live = fr.storage.pool.live
    new = dict(fr.sample(indices=[idx])[0].data)
    new['obs'] = np.full((4, H, W), 7, np.uint8)
    assert fr.update(idx, data=new)
    got = fr.sample(indices=[idx])[0].data
    np.testing.assert_array_equal(got['obs'], new['obs'])
    assert fr.storage.pool.live <= live + 1
    b = fr.sample_batch(100)
    assert (b['obs'][b["indices"].tolist().index(idx)] == 7).all()


def test_evicted_item_still_held_keeps_its_data_and_save_load_roundtrip(tmp_path):
    ref, fr = pair(10)
    stream = atari_like_stream(60)
    for t in stream[:10]:
        fr.push(t)
    held = fr.get(0)
    for t in stream[10:40]:
        fr.push(t)
    np.testing.assert_array_equal(held.data['obs'], stream[0]['obs'])   # evicted, but not garbage
    path = str(tmp_path / 'buf.pt')
    fr.save_data(path)
    other = DequeBuffer(10, storage=FrameStorage(10))
    other.load_data(path)
    a, b = fr.sample(indices=[35])[0].data, other.sample(indices=[35])[0].data
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
    assert other.storage.pool.live == fr.storage.pool.live            # loaded frames are shared again
    for t in stream[40:55]:                                             # and evict normally
        other.push(t)
    assert other.count() == 10 and other.storage.pool.live < 8 * 10
    np.testing.assert_array_equal(other.sample(indices=[54])[0].data['obs'], stream[54]['obs'])
    fr.clear()
    assert fr.count() == 0 and fr.storage.pool.live == 0


def test_bad_input():
    fr = DequeBuffer(4, storage=FrameStorage(4))
    with pytest.raises(KeyError, match='next_obs'):
        fr.push({'obs': np.zeros((4, H, W), np.uint8)})
    fr.push({'obs': np.zeros((4, H, W), np.uint8), 'next_obs': np.zeros((4, H, W), np.uint8)})
    with pytest.raises(ValueError, match='frames are'):
        fr.push({'obs': np.zeros((4, H + 1, W), np.uint8), 'next_obs': np.zeros((4, H + 1, W), np.uint8)})
    with pytest.raises(TypeError, match='dict'):
        fr.push([1, 2])
    assert fr.count() == 1 and fr.storage.pool.live == 1
