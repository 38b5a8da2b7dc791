"""``random_shift_augmenter``: DrQ's random-shift augmentation of ``ctx.train_data`` as middleware."""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Optional, Protocol, cast

from contexts import RLContext
from pipeline.runtime.roles import Role, for_roles

if TYPE_CHECKING:
    from pipeline.data.augment import RandomShift

__all__ = ['random_shift_augmenter', 'AugmentMiddleware']


class AugmentMiddleware(Protocol):
    """What :func:`random_shift_augmenter` returns: the middleware and its ``transform``."""

    transform: RandomShift

    def __call__(self, ctx: RLContext) -> None: ...


@for_roles(Role.LEARNER, reads=["train_data"], writes=["train_data"])
def random_shift_augmenter(pad: int = 4, keys: Iterable[str] = ('obs', 'next_obs'),
                           seed: Optional[int] = None) -> AugmentMiddleware:
    """Shift the images of the training batch by random offsets in ``[-pad, pad]`` pixels.

    Reads ``ctx.train_data`` (a batch dict; nothing happens when it is None). Writes
    ``ctx.train_data``: a new dict whose ``keys`` fields are shifted, each image and each key with
    its own draw, edges replicated (:class:`pipeline.data.augment.RandomShift`, seeded by ``seed``).
    Place it between a fetcher and a trainer (``offpolicy_data_fetcher`` -> this -> ``trainer``);
    ``OffPolicyLearner`` fetches and trains inside one middleware, so give it the same transform as
    ``batch_transform=RandomShift(...)`` instead. Role: LEARNER.
    """
    from pipeline.data.augment import RandomShift  # lazy: torch

    shift = RandomShift(pad, keys, seed)

    def _augment(ctx: RLContext) -> None:
        if ctx.train_data is not None:
            ctx.train_data = shift(ctx.train_data)  # the same fields, images shifted

    setattr(_augment, 'transform', shift)
    return cast(AugmentMiddleware, _augment)  # a function with a ``transform`` attribute
