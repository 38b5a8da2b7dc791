"""Random-shift augmentation (DrQ): the function, the batch transform, the middleware, OffPolicyLearner's hook;
intensity augmentation (SPR, Dopamine's DrQ(eps)) and a chain of transforms."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pipeline.data.augment import Chain, RandomIntensity, RandomShift, random_intensity, random_shift


def _reference_shift(img: torch.Tensor, dy: int, dx: int, pad: int) -> torch.Tensor:
    """Pad with edge replication, crop the window at offset (dy, dx): DrQ's definition."""
    padded = F.pad(img.float().unsqueeze(0), (pad, pad, pad, pad), mode='replicate')[0]
    h, w = img.shape[-2:]
    return padded[..., dy:dy + h, dx:dx + w].to(img.dtype)


def _offset_of(out: torch.Tensor, img: torch.Tensor, pad: int):
    found = [(dy, dx) for dy in range(2 * pad + 1) for dx in range(2 * pad + 1)
             if torch.equal(out, _reference_shift(img, dy, dx, pad))]
    return found


def test_each_image_is_an_edge_replicated_shift_of_the_original():
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (16, 4, 20, 24), dtype=torch.uint8, generator=g)
    out = random_shift(x, pad=4, generator=torch.Generator().manual_seed(1))
    assert out.shape == x.shape and out.dtype == torch.uint8
    offsets = set()
    for b in range(len(x)):
        found = _offset_of(out[b], x[b], 4)          # all 4 stacked frames share one shift
        assert len(found) == 1, f'image {b}: not a single shift of the original ({found})'
        offsets.add(found[0])
    assert len(offsets) > 4                          # images get their own offsets


def test_three_dim_input_zero_pad_and_bad_arguments():
    x = torch.arange(2 * 6 * 6, dtype=torch.float32).reshape(2, 6, 6)
    out = random_shift(x, pad=2, generator=torch.Generator().manual_seed(3))
    for b in range(2):
        assert len(_offset_of(out[b], x[b], 2)) == 1
    assert random_shift(x, pad=0) is x
    with pytest.raises(ValueError, match='pad'):
        random_shift(x, pad=-1)
    with pytest.raises(ValueError, match='expects'):
        random_shift(x[0], pad=1)


def test_shifts_are_reproducible_and_cover_the_whole_range():
    x = torch.randint(0, 256, (256, 1, 12, 12), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    a = random_shift(x, 4, torch.Generator().manual_seed(5))
    b = random_shift(x, 4, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    # a marker pixel in the middle moves by at most 4 rows/cols, and both extremes occur
    m = torch.zeros(400, 1, 21, 21, dtype=torch.uint8)
    m[:, :, 10, 10] = 255
    moved = random_shift(m, 4, torch.Generator().manual_seed(6))
    pos = [divmod(int(moved[i, 0].flatten().argmax()), 21) for i in range(400)]
    rows = {p[0] for p in pos}
    cols = {p[1] for p in pos}
    assert rows == set(range(6, 15)) and cols == set(range(6, 15))


def test_random_shift_transform_on_a_batch_dict():
    obs = torch.randint(0, 256, (8, 4, 16, 16), dtype=torch.uint8)
    batch = {'obs': obs, 'next_obs': obs.clone(), 'action': torch.arange(8), 'reward': torch.ones(8)}
    t = RandomShift(pad=3, seed=0)
    out = t(batch)
    assert out is not batch and batch['obs'] is obs                  # the input dict is not modified
    assert out['action'] is batch['action'] and out['reward'] is batch['reward']
    assert not torch.equal(out['obs'], out['next_obs'])              # each key gets its own draw
    state = t.state_dict()
    again = t(batch)
    t.load_state_dict(state)
    assert torch.equal(t(batch)['obs'], again['obs'])               # the generator state restores
    assert RandomShift(keys=('obs',), seed=0)(batch)['next_obs'] is batch['next_obs']


def test_middleware_and_off_policy_learner_hook():
    from contexts import OnlineRLContext
    from middleware import OffPolicyLearner, random_shift_augmenter
    from pipeline import task
    from pipeline.config import compile_config
    from pipeline.data import DequeBuffer

    mw = random_shift_augmenter(pad=4, seed=0)
    ctx = OnlineRLContext()
    ctx.train_data = None
    mw(ctx)
    assert ctx.train_data is None
    obs = torch.randint(0, 256, (4, 2, 10, 10), dtype=torch.uint8)
    ctx.train_data = {'obs': obs, 'next_obs': obs}
    mw(ctx)
    assert ctx.train_data['obs'].shape == obs.shape and not torch.equal(ctx.train_data['obs'], obs)

    seen = []

    class Learner:
        last_outputs = {}

        def update(self, batch, timesteps=None):
            seen.append(batch)
            return {}

    buf = DequeBuffer(50, seed=0)
    rng = np.random.default_rng(0)
    for i in range(20):
        o = rng.integers(0, 256, (2, 10, 10), dtype=np.uint8)
        buf.push({'obs': o, 'next_obs': o, 'action': 0, 'reward': 0.0, 'terminated': False})
    calls = []

    def transform(b):
        calls.append(b)
        return {**b, 'marker': torch.ones(1)}

    cfg = compile_config({'policy': {'learn': {'batch_size': 4, 'learning_starts': 4, 'update_per_collect': 3}}})
    with task.start(ctx=OnlineRLContext()):
        OffPolicyLearner(cfg, Learner(), buf, batch_transform=transform)(task.ctx)
    assert len(calls) == 3 and len(seen) == 3 and all('marker' in b for b in seen)


def test_intensity_scales_each_image_by_one_factor_within_its_bounds():
    x = torch.randint(1, 256, (2000, 4, 6, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    out = random_intensity(x, 0.05, torch.Generator().manual_seed(1))
    assert out.dtype == torch.float32 and out.shape == x.shape
    ratio = out / x.float()
    factor = ratio[:, 0, 0, 0]
    assert torch.allclose(ratio, factor.view(-1, 1, 1, 1).expand_as(ratio))   # one factor per image, all frames
    assert factor.min() >= 0.9 - 1e-6 and factor.max() <= 1.1 + 1e-6          # 1 + 0.05 clip(N, -2, 2)
    assert (factor == 0.9).sum() > 20 and (factor == 1.1).sum() > 20           # ~2.3 % of draws clip at each end
    assert abs(float(factor.mean()) - 1.0) < 0.005 and 0.045 < float(factor.std()) < 0.05
    assert len(set(factor.tolist())) > 1000                                    # images get their own factors


def test_intensity_reproducible_zero_scale_and_bad_arguments():
    x = torch.rand(8, 3, 5, 5)
    assert torch.equal(random_intensity(x, 0.1, torch.Generator().manual_seed(2)),
                       random_intensity(x, 0.1, torch.Generator().manual_seed(2)))
    assert random_intensity(x, 0.0) is x
    with pytest.raises(ValueError, match='scale'):
        random_intensity(x, -0.1)
    with pytest.raises(ValueError, match='scale'):
        RandomIntensity(float('nan'))
    with pytest.raises(ValueError, match='batch of images'):
        random_intensity(torch.ones(5), 0.1)


def test_shift_then_intensity_on_a_batch_dict():
    obs = torch.randint(1, 256, (8, 4, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    batch = {'obs': obs, 'next_obs': obs.clone(), 'action': torch.arange(8)}
    shift, intensity = RandomShift(pad=3, seed=0), RandomIntensity(0.05, seed=1)
    out = Chain(shift, intensity)(batch)
    assert batch['obs'] is obs and out['action'] is batch['action']
    shifted = RandomShift(pad=3, seed=0)(batch)                      # the same shift draws, without the intensity
    for k in ('obs', 'next_obs'):
        ratio = out[k] / shifted[k].float()
        assert torch.allclose(ratio, ratio[:, :1, :1, :1].expand_as(ratio))
    assert not torch.equal(out['obs'] / shifted['obs'].float(), out['next_obs'] / shifted['next_obs'].float())
    state = intensity.state_dict()
    again = intensity(batch)
    intensity.load_state_dict(state)
    assert torch.equal(intensity(batch)['obs'], again['obs'])
    with pytest.raises(ValueError, match='callables'):
        Chain()
