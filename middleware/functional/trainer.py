"""The training step: run a learner's ``update`` on ``ctx.train_data``."""
from __future__ import annotations

import logging
from collections.abc import Mapping as MappingABC
from typing import TYPE_CHECKING, Dict, Mapping, Optional, Protocol, cast

from contexts import RLContext
from pipeline.runtime.protocols import TrainablePolicy
from pipeline.runtime.roles import Role, for_roles

if TYPE_CHECKING:
    from pipeline.data.records import TrainOutput

__all__ = ['trainer', 'flatten_update_result', 'TrainMiddleware']

log = logging.getLogger(__name__)

_ALL = '__all_modules__'


class TrainMiddleware(Protocol):
    """What :func:`trainer` returns: the middleware, and ``step(ctx)``, which trains like it but returns the
    output (None without data) instead of writing ``ctx.train_output``."""

    def __call__(self, ctx: RLContext) -> None: ...

    def step(self, ctx: RLContext) -> Optional[TrainOutput]: ...


def flatten_update_result(result: object, learner: object = None) -> TrainOutput:
    """The :class:`~pipeline.data.records.TrainOutput` of ``Learner.update``'s result: a plain dict
    whose Stats leaves become floats.

    Single-module learners give ``{metric: value}`` (plus per-row outputs such as ``priority``
    from ``learner.last_outputs``); several modules give ``{module_id: {metric: value}}``.
    ``__all_modules__`` metrics are added under their own names when they do not clash.
    """
    if not isinstance(result, MappingABC):
        # TrainOutput names only the keys every learner gives; the others ride along (a TypedDict cannot
        # say "and any other metric"), hence the casts here.
        return cast('TrainOutput', {'result': result})
    modules = [k for k in result if k != _ALL]
    last = getattr(learner, 'last_outputs', None) or {}

    def peek_all(d: Mapping[str, object]) -> Dict[str, object]:
        out = {}
        for k, v in d.items():
            out[k] = v.peek() if hasattr(v, 'peek') else v
        return out

    out: Dict[str, object]
    if len(modules) == 1:
        mid = modules[0]
        out = peek_all(result[mid])
        extra = last.get(mid)
        if extra:
            out.update(extra)
    else:
        out = {}
        for mid in modules:
            o = peek_all(result[mid])
            if last.get(mid):
                o.update(last[mid])
            out[mid] = o
    if _ALL in result:
        for k, v in peek_all(result[_ALL]).items():
            out.setdefault(k, v)
    return cast('TrainOutput', out)


@for_roles(Role.LEARNER, reads=["train_data", "env_step?"], writes=["train_output", "train_iter"])
def trainer(cfg: Mapping[str, object], learner: TrainablePolicy, log_freq: int = 100) -> TrainMiddleware:
    """One training iteration on ``ctx.train_data``.

    Reads ``ctx.train_data`` (a :class:`~pipeline.data.records.TrainBatch`; does nothing when it is
    None), ``ctx.env_step`` (when the context has one: an ``OfflineRLContext`` has none, and the
    learner then gets no timesteps). Writes ``ctx.train_output``: a list of one
    :class:`~pipeline.data.records.TrainOutput` (a fresh plain dict: metric -> float, e.g.
    ``total_loss``, ``q_value``, plus per-row tensors such as ``priority``; see
    :func:`flatten_update_result`), and advances ``ctx.train_iter`` by one. ``fn.step(ctx)`` does
    the same but returns the output instead of writing it (None when there was no data): what
    ``OffPolicyLearner`` runs each round.

    ``learner`` is a ``pipeline.learner.Learner`` (e.g. ``policy.learn_mode``); it is called as
    ``learner.update(batch=ctx.train_data, timesteps={'num_env_steps_sampled_lifetime':
    ctx.env_step})``. Every ``log_freq`` iterations the loss is logged at INFO level.
    Role: LEARNER.
    """
    if not hasattr(learner, 'update'):
        raise TypeError(f'trainer needs a learner with update(batch=..., timesteps=...) (e.g. '
                        f'policy.learn_mode); got {type(learner).__name__}')

    def _step(ctx: RLContext) -> Optional[TrainOutput]:
        data = ctx.train_data
        if data is None:
            return None
        env_step = getattr(ctx, 'env_step', None)
        result = learner.update(batch=data, timesteps=None if env_step is None else
                                {'num_env_steps_sampled_lifetime': env_step})
        out = flatten_update_result(result, learner)
        ctx.train_iter += 1
        if log_freq and ctx.train_iter % log_freq == 0 and 'total_loss' in out:
            log.info('train iter %d: total_loss %.5f', ctx.train_iter, out['total_loss'])
        return out

    def _train(ctx: RLContext) -> None:
        out = _step(ctx)
        if out is not None:
            ctx.train_output = [out]

    setattr(_train, 'step', _step)
    return cast(TrainMiddleware, _train)  # a function with a ``step`` attribute
