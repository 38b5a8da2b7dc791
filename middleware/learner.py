"""``OffPolicyLearner``: fetch -> (reward estimate) -> train rounds, priorities written per round."""
from __future__ import annotations

import logging
from typing import Any, Callable, List, Mapping, Optional

from contexts import RLContext
from pipeline.runtime.contracts import buffered
from pipeline.runtime.roles import Role, for_roles

from .functional.data_processor import offpolicy_data_fetcher
from .functional.trainer import trainer
from .reward import reward_step

__all__ = ['OffPolicyLearner', 'TrainRounds']

log = logging.getLogger(__name__)


class TrainRounds:
    """``cfg.policy.learn.update_per_collect`` rounds of: next batch -> (reward step) -> train.

    The loop shared by :class:`OffPolicyLearner` and ``middleware.her.HERLearner``; a subclass
    says where a round's batch comes from in :meth:`_next_batch`, which sets ``ctx.train_data``
    (None: too little data, the rounds stop) and may return a callable to run once the round is
    over (e.g. a fetcher's backward part writing priorities). ``batch_transform``, when given,
    replaces each fetched batch by ``batch_transform(batch)`` before the reward step and training
    (e.g. :class:`pipeline.data.augment.RandomShift`). Writes ``ctx.train_output`` (the list
    of every round's output dict, empty when nothing was trained).
    """

    def __init__(self, cfg: Mapping, policy: Any, reward_model: Optional[Any] = None, log_freq: int = 100,
                 train_reward_model: bool = True, batch_transform: Optional[Callable[[Any], Any]] = None) -> None:
        self.cfg = cfg
        self.batch_transform = batch_transform
        self.update_per_collect = int(cfg['policy']['learn']['update_per_collect'])
        if self.update_per_collect < 1:
            raise ValueError(f'policy.learn.update_per_collect must be >= 1, got {self.update_per_collect}')
        self._trainer = trainer(cfg, policy, log_freq=log_freq)
        self.reward_model = reward_model
        self._reward_step = (reward_step(reward_model, train=train_reward_model)
                             if reward_model is not None else None)

    def _next_batch(self, ctx: RLContext) -> Optional[Callable[[], Any]]:
        raise NotImplementedError

    def __call__(self, ctx: RLContext) -> None:
        outputs: List[Any] = []
        next_batch, train, reward = self._next_batch, self._trainer, self._reward_step
        transform = self.batch_transform
        for _ in range(self.update_per_collect):
            after = next_batch(ctx)
            if ctx.train_data is None:
                if after is not None:
                    after()
                break
            if transform is not None:
                ctx.train_data = transform(ctx.train_data)
            if reward is not None:
                reward(ctx)
            train(ctx)
            outputs.append(ctx.train_output)
            if after is not None:
                after()  # e.g. write PER priorities from this round's ctx.train_output
        ctx.train_output = outputs


@for_roles(Role.LEARNER, reads=["@buffer", "train_iter", "env_step?"], writes=["train_data", "train_output", "train_iter"])
class OffPolicyLearner(TrainRounds):
    """Run ``cfg.policy.learn.update_per_collect`` training rounds per pipeline step.

    Each round: fetch a batch from ``buffer_`` (:func:`offpolicy_data_fetcher`), let
    ``reward_model`` relabel it (``reward_model.estimate(batch)``; its return value, when not
    None, replaces the batch; then ``reward_model.train(batch)`` on the fetched batch when the
    model has ``train`` and ``train_reward_model`` is True, so a batch's reward is estimated
    before the model has seen it), train once (:func:`trainer`), then at once run the fetcher's
    backward part, so prioritized-replay priorities are written back after every round (the next
    round samples with them). Rounds stop early when the buffer has too little data.

    Reads ``ctx.env_step``, ``ctx.train_iter`` and what the fetcher and trainer read. Writes
    ``ctx.train_data`` (the last batch), ``ctx.train_output`` (the list of every round's output
    dict, empty when nothing was trained) and advances ``ctx.train_iter`` by the rounds run.

    Args:
        cfg: the full config.
        policy: the learner (``policy.learn_mode``), anything with ``update(batch=..., timesteps=...)``.
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

    def __init__(self, cfg: Mapping, policy: Any, buffer_: Any, reward_model: Optional[Any] = None,
                 log_freq: int = 100, train_reward_model: bool = True,
                 batch_transform: Optional[Callable[[Any], Any]] = None) -> None:
        from pipeline import task

        super().__init__(cfg, policy, reward_model, log_freq, train_reward_model, batch_transform)
        self._fetcher = task.wrap(offpolicy_data_fetcher(cfg, buffer_))
        self.__provided__ = buffered(buffer_)  # a buffer filled before the run needs no pusher (fields check)

    def _next_batch(self, ctx: RLContext) -> Callable[[], Any]:
        return self._fetcher(ctx)
