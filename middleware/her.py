"""Hindsight experience replay in a pipeline: ``her_data_enhancer`` and ``HERLearner``.

The buffer holds whole episodes (``EpisodeCollector`` -> ``data_pusher`` pushes each episode of
``ctx.episodes`` as one item). Each training round samples ``her_reward_model.episode_size``
episodes, relabels them with the reward model (see :class:`pipeline.reward_model.HerRewardModel`)
and trains on the flattened, collated transitions.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple, cast

import numpy as np

from contexts import OnlineRLContext
from pipeline import task
from pipeline.runtime.contracts import buffered
from pipeline.runtime.protocols import EpisodeRelabeler, TrainablePolicy
from pipeline.runtime.roles import Role, for_roles

from .env_stepper import Actor
from .functional import evaluator
from .functional.data_processor import BatchSource
from .learner import TrainRounds

if TYPE_CHECKING:
    from pipeline.data.protocols import ReplayBuffer
    from pipeline.envs import EnvManager
    from pipeline.data.records import TrainBatch

__all__ = ["her_data_enhancer", "HERLearner", "goal_success_evaluator", "goal_success_rate"]

log = logging.getLogger(__name__)


_Relabel = Callable[[Sequence[Sequence[Mapping[str, object]]]], List[Dict[str, object]]]
"""``relabel(episodes) -> transitions`` (``pipeline.runtime.protocols.EpisodeRelabeler``)."""


def _relabel_fn(her_reward_model: object) -> _Relabel:
    """Its ``relabel(episodes)`` (``pipeline.runtime.protocols.EpisodeRelabeler``); ``estimate`` for older models."""
    if isinstance(her_reward_model, EpisodeRelabeler):
        return her_reward_model.relabel
    if hasattr(her_reward_model, "estimate"):
        return her_reward_model.estimate
    raise TypeError(
        f"her_reward_model needs a relabel(episodes) method (or the older name estimate(episodes); e.g. "
        f"pipeline.reward_model.HerRewardModel); "
        f"got {type(her_reward_model).__name__}"
    )


class HerEnhancer(Protocol):
    """What :func:`her_data_enhancer` returns: the middleware and its batches as a batch source (``source``)."""

    source: BatchSource

    def __call__(self, ctx: OnlineRLContext) -> None: ...


@for_roles(Role.LEARNER, reads=["@buffer"], writes=["train_data"])
def her_data_enhancer(
    cfg: Mapping,
    buffer_: ReplayBuffer,
    her_reward_model: object,
    episode_size: Optional[int] = None,
    seed: Optional[int] = None,
) -> HerEnhancer:
    """Sample whole episodes from ``buffer_``, relabel them and collate a training batch.

    Reads the buffer only. Writes ``ctx.train_data``: a :class:`~pipeline.data.records.TrainBatch` of the
    relabelled transitions (a dict ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``, ... ->
    ``[B, ...]`` tensors; goal observations are nested dicts of them; one row per transition
    ``her_reward_model.relabel`` returned), or ``None`` when the buffer holds
    fewer than ``episode_size`` episodes (default ``her_reward_model.episode_size``).

    When ``her_reward_model`` has no ``sample_per_episode`` limit and the relabelled data has more
    than ``cfg.policy.learn.batch_size`` rows, a uniform subset of ``batch_size`` rows is kept.
    Role: LEARNER.
    """
    relabel = _relabel_fn(her_reward_model)
    n_ep = int(episode_size if episode_size is not None else getattr(her_reward_model, "episode_size", 16))
    if n_ep < 1:
        raise ValueError(f"episode_size must be >= 1, got {n_ep}")
    batch_size = None
    if getattr(her_reward_model, "sample_per_episode", None) is None:
        batch_size = cfg["policy"]["learn"].get("batch_size")
    rng = np.random.default_rng(seed)

    def _sample(ctx: OnlineRLContext) -> Optional[TrainBatch]:
        from pipeline.data.collate import collate_transitions  # lazy: `import middleware` loads no torch

        if buffer_.count() < n_ep:
            return None
        episodes = [item.data for item in buffer_.sample(n_ep)]
        for i, ep in enumerate(episodes):
            if not isinstance(ep, (list, tuple)):
                raise TypeError(
                    f"her_data_enhancer expects buffer items to be whole episodes (lists of transitions), got "
                    f"{type(ep).__name__}; collect with EpisodeCollector so data_pusher pushes ctx.episodes"
                )
        data = relabel(episodes)
        if not data:
            return None
        if batch_size and len(data) > batch_size:
            pick = rng.choice(len(data), int(batch_size), replace=False)
            data = [data[i] for i in pick]
        return cast('TrainBatch', collate_transitions(data))

    def _enhance(ctx: OnlineRLContext) -> None:
        ctx.train_data = _sample(ctx)

    setattr(_enhance, '__provided__', buffered(buffer_))  # a buffer filled before the run needs no pusher (fields check)
    setattr(_enhance, 'source', _HerSource(_sample))
    return cast(HerEnhancer, _enhance)  # a function with a ``source`` attribute


class _HerSource:
    """``her_data_enhancer``'s batches as a batch source for ``TrainRounds`` (nothing to do once trained)."""

    def __init__(self, sample: Callable[[OnlineRLContext], Optional[TrainBatch]]) -> None:
        self._sample = sample

    def next(self, ctx: OnlineRLContext) -> Tuple[Optional[TrainBatch], None]:
        return self._sample(ctx), None


@for_roles(Role.LEARNER, reads=["@buffer", "train_iter", "env_step?"], writes=["train_data", "train_output", "train_iter"])
class HERLearner(TrainRounds):
    """``cfg.policy.learn.update_per_collect`` rounds of HER enhance -> train.

    Each round runs :func:`her_data_enhancer` (a fresh relabelled batch) then the trainer
    (``learner.update(batch=ctx.train_data, ...)``); rounds stop early when the buffer holds too few
    episodes. Reads ``ctx.env_step``, ``ctx.train_iter``. Writes ``ctx.train_data`` (the last
    batch), ``ctx.train_output`` (the list of every round's :class:`~pipeline.data.records.TrainOutput`,
    empty when nothing was trained) and advances ``ctx.train_iter`` by the rounds run. Role: LEARNER (on
    a node without that role the runtime skips it, so a collector never trains).

    Args:
        cfg: the full config.
        learner: what trains (``policy.learn_mode``, a :class:`~pipeline.learner.Learner`): anything with
            ``update(batch=..., timesteps=...)``.
        buffer_: a buffer of whole episodes.
        her_reward_model: e.g. :class:`pipeline.reward_model.HerRewardModel`.
        reward_model: optional extra reward model applied after relabelling (``estimate(batch)``,
            then ``train(batch)`` when it has one and ``train_reward_model`` is True).
        train_reward_model: train ``reward_model`` on each relabelled batch (default True).
        log_freq: log the loss every this many train iterations (INFO).
    """

    def __init__(
        self,
        cfg: Mapping,
        learner: TrainablePolicy,
        buffer_: ReplayBuffer,
        her_reward_model: object,
        reward_model: object = None,
        log_freq: int = 100,
        train_reward_model: bool = True,
    ) -> None:
        super().__init__(cfg, learner, her_data_enhancer(cfg, buffer_, her_reward_model).source, reward_model,
                         log_freq, train_reward_model)
        self.__provided__ = buffered(buffer_)  # a buffer filled before the run needs no pusher (fields check)


def goal_success_rate(policy: Actor, env: EnvManager, n_episode: int) -> float:
    """The fraction of ``n_episode`` episodes of ``policy`` on the goal env ``env`` (rewards ``0`` at the goal,
    ``-1`` elsewhere) that reached the goal at some step (see :func:`goal_success_evaluator`)."""
    return _success_rate(*evaluator.evaluate_episodes(policy, env, n_episode))


def _success_rate(returns: np.ndarray, lengths: np.ndarray) -> float:
    return float(np.mean(returns > -lengths + 0.5))  # some step paid 0 instead of -1


@for_roles(Role.EVALUATOR, reads=["train_iter", "last_eval_iter"],
           writes=["eval_value", "last_eval_value", "last_eval_iter", "eval_output"])
def goal_success_evaluator(
    policy: Actor,
    env: EnvManager,
    n_episode: int = 50,
    eval_freq: int = 100,
    stop_success: Optional[float] = None,
) -> Callable[[OnlineRLContext], None]:
    """Evaluate a goal-reaching policy's success rate every ``eval_freq`` train iterations.

    For goal envs with rewards ``0`` (goal reached) / ``-1`` (not yet), like those in
    :mod:`pipeline.envs.goal_envs`: an episode counts as a success when some step reached the goal,
    i.e. its return is above ``-length``. Runs on the first call and then whenever
    ``ctx.train_iter - ctx.last_eval_iter >= eval_freq``.

    Reads ``ctx.train_iter``, ``ctx.last_eval_iter``. Writes ``ctx.eval_value`` and
    ``ctx.last_eval_value`` (the success rate in ``[0, 1]``), ``ctx.last_eval_iter``,
    ``ctx.eval_output`` (``episode_return``, ``episode_length`` arrays and ``success_rate``) and
    sets ``task.finish`` once the rate reaches ``stop_success`` after some training. Role: EVALUATOR.
    """


    if n_episode < 1 or eval_freq < 1:
        raise ValueError(f"n_episode and eval_freq must be >= 1, got {n_episode}, {eval_freq}")

    def _evaluate(ctx: OnlineRLContext) -> None:
        if ctx.last_eval_iter >= 0 and ctx.train_iter - ctx.last_eval_iter < eval_freq:
            return
        returns, lengths = evaluator.evaluate_episodes(policy, env, n_episode)
        rate = _success_rate(returns, lengths)
        ctx.eval_value = rate
        ctx.last_eval_value = rate
        ctx.last_eval_iter = ctx.train_iter
        ctx.eval_output = {"episode_return": returns, "episode_length": lengths, "success_rate": rate}
        log.info("train iter %d: eval success rate %.3f", ctx.train_iter, rate)
        if stop_success is not None and ctx.train_iter > 0 and rate >= stop_success:
            task.finish = True

    return _evaluate
