"""Image augmentation for training batches: random shifts (DrQ, Kostrikov et al. 2020) and intensity changes.

:func:`random_shift` moves each image of a batch by an integer offset drawn uniformly in
``[-pad, pad]`` per axis, filling the uncovered border by repeating the edge pixels. That equals
DrQ's "pad ``pad`` pixels with edge replication, then crop a random window of the original size",
computed without building the padded copy: the crop at offset ``o`` reads row ``clamp(i + o - pad)``
of the original; each image is one sliced copy plus its replicated border rows and columns. It
works on any dtype (uint8 frames stay uint8) and on ``[B, C, H, W]`` or ``[B, H, W]`` tensors; all
channels of one image (stacked frames) get the same shift.

:class:`RandomShift` applies it to some fields of a batch dict (``obs`` and ``next_obs`` by
default, each with its own draw, as DrQ does); it is the ``batch_transform`` of
``middleware.OffPolicyLearner`` and the body of the ``middleware.random_shift_augmenter``
middleware, which transforms ``ctx.train_data`` for pipelines that fetch and train in separate
middleware.

:class:`ImageBatchTransform` is what the two batch transforms share (fields, a private generator, its state).
:func:`random_intensity` scales each image by one random factor ``1 + scale * clip(N(0, 1), -2, 2)``
(the intensity augmentation of SPR, Schwarzer et al. 2021, which Dopamine's DrQ(eps) applies after the
shift); :class:`RandomIntensity` applies it to fields of a batch dict, and :class:`Chain` runs such
transforms one after the other (a shift, then an intensity change).
"""
from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, TypeVar, cast

import torch

__all__ = ['ImageBatchTransform', 'random_shift', 'RandomShift', 'random_intensity', 'RandomIntensity', 'Chain']

#: a batch dict: a ``TrainBatch`` in, a ``TrainBatch`` out
BatchT = TypeVar('BatchT', bound=Mapping[str, Any])


def random_shift(x: torch.Tensor, pad: int = 4, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """A copy of ``x`` (``[B, C, H, W]`` or ``[B, H, W]``) with each image shifted by a random
    integer offset in ``[-pad, pad]`` along height and width, edges replicated.

    ``pad=0`` returns ``x`` unchanged (no copy). Offsets come from ``generator`` (torch's global
    generator when None).
    """
    if pad < 0:
        raise ValueError(f'pad must be >= 0, got {pad}')
    if x.dim() not in (3, 4):
        raise ValueError(f'random_shift expects [B, C, H, W] or [B, H, W] images, got shape {tuple(x.shape)}')
    if pad == 0:
        return x
    b, h, w = x.shape[0], x.shape[-2], x.shape[-1]
    shifts = (torch.randint(0, 2 * pad + 1, (b, 2), generator=generator) - pad).tolist()
    out = torch.empty_like(x)
    for i, (dy, dx) in enumerate(shifts):  # out[..., r, c] = x[..., clamp(r + dy), clamp(c + dx)]
        src, dst = x[i], out[i]
        r0, r1 = max(0, -dy), min(h, h - dy)  # rows of out whose source row lies inside the image
        c0, c1 = max(0, -dx), min(w, w - dx)
        dst[..., r0:r1, c0:c1] = src[..., r0 + dy:r1 + dy, c0 + dx:c1 + dx]
        if c0 > 0:
            dst[..., r0:r1, :c0] = dst[..., r0:r1, c0:c0 + 1]
        if c1 < w:
            dst[..., r0:r1, c1:] = dst[..., r0:r1, c1 - 1:c1]
        if r0 > 0:
            dst[..., :r0, :] = dst[..., r0:r0 + 1, :]
        if r1 < h:
            dst[..., r1:, :] = dst[..., r1 - 1:r1, :]
    return out

class ImageBatchTransform:
    """``transform(batch) -> batch``: :meth:`apply` to ``keys`` of a batch dict, drawing from a private generator.

    Returns a new dict (the input is not modified) in which each of ``keys`` present is transformed with its own
    random draws; other fields are passed through. ``seed`` seeds the generator, so runs are reproducible without
    touching torch's global one; ``state_dict``/``load_state_dict`` save and restore it. Subclasses define
    :meth:`apply`.
    """

    def __init__(self, keys: Iterable[str] = ('obs', 'next_obs'), seed: Optional[int] = None) -> None:
        self.keys: Tuple[str, ...] = tuple(keys)
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(int(seed))
        else:
            self.generator.seed()

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        """The transformed copy of one field's images ``x``."""
        raise NotImplementedError

    def __call__(self, batch: BatchT) -> BatchT:
        out = dict(batch)
        for k in self.keys:
            if k in out:
                out[k] = self.apply(torch.as_tensor(out[k]))
        return cast(BatchT, out)  # the same fields, of the same types

    def state_dict(self) -> Dict[str, torch.Tensor]:
        """The generator's state (for checkpoints)."""
        return {'generator': self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.generator.set_state(state['generator'])


class RandomShift(ImageBatchTransform):
    """:func:`random_shift` by up to ``pad`` pixels applied to ``keys`` of a batch dict (see
    :class:`ImageBatchTransform`)."""

    def __init__(self, pad: int = 4, keys: Iterable[str] = ('obs', 'next_obs'), seed: Optional[int] = None) -> None:
        if pad < 0:
            raise ValueError(f'pad must be >= 0, got {pad}')
        super().__init__(keys, seed)
        self.pad = int(pad)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return random_shift(x, self.pad, self.generator)

    def __repr__(self) -> str:
        return f'RandomShift(pad={self.pad}, keys={self.keys})'


def random_intensity(x: torch.Tensor, scale: float = 0.05, generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """``x`` (``[B, ...]``, any dtype) as float32, each image multiplied by its own factor
    ``1 + scale * clip(n, -2, 2)`` with ``n ~ N(0, 1)``: all channels and pixels of one image by the same factor,
    so factors lie in ``[1 - 2 scale, 1 + 2 scale]``. Pixel values keep their range (0..255 frames stay on that
    scale, not clipped). ``scale=0`` returns ``x`` unchanged (no copy, same dtype)."""
    if not scale >= 0:
        raise ValueError(f'scale must be >= 0, got {scale}')
    if x.dim() < 2:
        raise ValueError(f'random_intensity expects a batch of images [B, ...], got shape {tuple(x.shape)}')
    if scale == 0:
        return x
    n = torch.randn(x.shape[0], generator=generator).clamp_(-2.0, 2.0)
    factor = (1.0 + scale * n).to(x.device).view(-1, *([1] * (x.dim() - 1)))
    return x.float() * factor


class RandomIntensity(ImageBatchTransform):
    """:func:`random_intensity` with ``scale`` applied to ``keys`` of a batch dict (see
    :class:`ImageBatchTransform`)."""

    def __init__(self, scale: float = 0.05, keys: Iterable[str] = ('obs', 'next_obs'), seed: Optional[int] = None) -> None:
        if not scale >= 0:
            raise ValueError(f'scale must be >= 0, got {scale}')
        super().__init__(keys, seed)
        self.scale = float(scale)

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        return random_intensity(x, self.scale, self.generator)

    def __repr__(self) -> str:
        return f'RandomIntensity(scale={self.scale}, keys={self.keys})'


class Chain:
    """``transform(batch) -> batch``: ``transforms`` applied in order, each to the previous one's output
    (their generators' states stay theirs: checkpoint each transform).
    """

    def __init__(self, *transforms: Any) -> None:
        if not transforms or not all(callable(t) for t in transforms):
            raise ValueError(f'Chain needs one or more callables batch -> batch, got {transforms!r}')
        self.transforms = transforms

    def __call__(self, batch: BatchT) -> BatchT:
        for t in self.transforms:
            batch = t(batch)
        return batch

    def __repr__(self) -> str:
        return 'Chain(' + ', '.join(map(repr, self.transforms)) + ')'
