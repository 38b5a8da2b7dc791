"""``OffPolicyLearner``: fetch -> (reward estimate) -> train rounds, priorities written per round."""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, List, Mapping, Optional

from contexts import RLContext
from pipeline.runtime.contracts import buffered
from pipeline.runtime.roles import Role, for_roles

from pipeline.runtime.protocols import TrainablePolicy

from .functional.data_processor import BatchSource, Buffers, ReplaySource
from .functional.trainer import trainer
from .reward import reward_step

if TYPE_CHECKING:
    from pipeline.data.records import TrainBatch, TrainOutput

__all__ = ['OffPolicyLearner', 'TrainRounds']

log = logging.getLogger(__name__)


class TrainRounds:
    """``cfg.policy.learn.update_per_collect`` rounds of: next batch -> (reward step) -> train.

    The loop shared by :class:`OffPolicyLearner` and ``middleware.her.HERLearner``. Each round asks
    ``source`` (a :class:`~middleware.functional.data_processor.BatchSource`) for ``(batch,
    on_trained)``: a :class:`~pipeline.data.records.TrainBatch`, written to ``ctx.train_data`` (None:
    too little data, the rounds stop), and a callable (or None) run with the round's
    :class:`~pipeline.data.records.TrainOutput` once the batch is trained (e.g. writing priorities
    back, so that the next round samples with them). ``batch_transform``, when given, replaces each
    batch by ``batch_transform(batch)`` before the reward step and training (e.g.
    :class:`pipeline.data.augment.RandomShift`). Writes ``ctx.train_output``: the list of every
    round's output (empty when nothing was trained).
    """

    def __init__(self, cfg: Mapping, learner: TrainablePolicy, source: BatchSource, reward_model: Optional[object] = None,
                 log_freq: int = 100, train_reward_model: bool = True,
                 batch_transform: Optional[Callable[[TrainBatch], TrainBatch]] = None) -> None:
        if not callable(getattr(source, 'next', None)):
            raise TypeError(f'TrainRounds needs a batch source with next(ctx) -> (batch, on_trained); '
                            f'got {type(source).__name__}')
        self.cfg = cfg
        self.source = source
        self.batch_transform = batch_transform
        self.update_per_collect = int(cfg['policy']['learn']['update_per_collect'])
        if self.update_per_collect < 1:
            raise ValueError(f'policy.learn.update_per_collect must be >= 1, got {self.update_per_collect}')
        self._trainer = trainer(cfg, learner, log_freq=log_freq)
        self.reward_model = reward_model
        self._reward_step = (reward_step(reward_model, train=train_reward_model)
                             if reward_model is not None else None)

    def __call__(self, ctx: RLContext) -> None:
        outputs: List[TrainOutput] = []
        ctx.train_output = outputs
        next_batch, train, reward = self.source.next, self._trainer.step, self._reward_step
        transform = self.batch_transform
        for _ in range(self.update_per_collect):
            batch, on_trained = next_batch(ctx)
            if batch is None:
                ctx.train_data = None
                break
            ctx.train_data = transform(batch) if transform is not None else batch
            if reward is not None:
                reward(ctx)
            out = train(ctx)
            if out is None:  # the transform or the reward step left no batch
                continue
            outputs.append(out)
            if on_trained is not None:
                on_trained(out)  # e.g. write PER priorities from this round's output


@for_roles(Role.LEARNER, reads=["@buffer", "train_iter", "env_step?"], writes=["train_data", "train_output", "train_iter"])
class OffPolicyLearner(TrainRounds):
    """Run ``cfg.policy.learn.update_per_collect`` training rounds per pipeline step.

    Each round: sample a batch from ``buffer_`` (a :class:`~middleware.functional.data_processor.ReplaySource`,
    as :func:`~middleware.functional.offpolicy_data_fetcher` does), let
    ``reward_model`` relabel it (``reward_model.estimate(batch)``; its return value, when not
    None, replaces the batch; then ``reward_model.train(batch)`` on the fetched batch when the
    model has ``train`` and ``train_reward_model`` is True, so a batch's reward is estimated
    before the model has seen it), train once (:func:`trainer`), then at once write the round's
    ``priority`` back to a prioritized buffer (the next round samples with it). Rounds stop early
    when the buffer has too little data.

    Reads ``ctx.env_step``, ``ctx.train_iter`` and what the fetcher and trainer read. Writes
    ``ctx.train_data`` (the last :class:`~pipeline.data.records.TrainBatch`), ``ctx.train_output``
    (the list of every round's :class:`~pipeline.data.records.TrainOutput`, empty when nothing was
    trained) and advances ``ctx.train_iter`` by the rounds run.

    Args:
        cfg: the full config.
        learner: what trains (``policy.learn_mode``, a :class:`~pipeline.learner.Learner`): anything with
            ``update(batch=..., timesteps=...)``.
        buffer_: a buffer, a list of ``(buffer, weight)`` pairs or a dict of buffers.
        reward_model: optional, with ``estimate(batch)`` and (optionally) ``train(batch)``, e.g.
            :class:`pipeline.reward_model.RndRewardModel`; like ``middleware.reward.reward_estimator``.
        train_reward_model: call ``reward_model.train`` each round after ``estimate`` (default True;
            a model without ``train`` is only used for estimates).
        log_freq: log the loss every this many train iterations (INFO).
        batch_transform: optional ``batch -> batch`` applied to each fetched batch before the reward
            model and the update, e.g. ``pipeline.data.augment.RandomShift(pad=4)`` (DrQ's shifts).

    Role: LEARNER.
    """

    def __init__(self, cfg: Mapping, learner: TrainablePolicy, buffer_: Buffers, reward_model: object = None,
                 log_freq: int = 100, train_reward_model: bool = True,
                 batch_transform: Optional[Callable[[TrainBatch], TrainBatch]] = None) -> None:
        super().__init__(cfg, learner, ReplaySource(cfg, buffer_), reward_model, log_freq, train_reward_model,
                         batch_transform)
        self.__provided__ = buffered(buffer_)  # a buffer filled before the run needs no pusher (fields check)
