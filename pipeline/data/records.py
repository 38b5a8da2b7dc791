"""The three named forms a transition takes between an env step and the loss.

::

    EnvStep ([n, ...] arrays, pipeline.envs)
      -> Transition      one env's step: collectors, nstep_reward_enhancer, data_pusher, the buffer's items
      -> TrainBatch      [B, ...] tensors of sampled transitions: offpolicy_data_fetcher -> ctx.train_data -> learner
      -> TrainOutput     one update's metrics (+ per-row priority): trainer -> ctx.train_output -> logger, PER

They are :class:`typing.TypedDict` s: the names and types are for readers and type checkers; at run
time each is a plain ``dict`` (``batch["obs"]`` as always, no conversion and no copy on the way).
In between: a stored Transition lives in the buffer's columnar rows (``sample()`` items rebuild it from
there); ``sample_batch`` gathers a TrainBatch from those rows in one route (its fields, the items'
buffer ``indices`` and, prioritized, the ``weight`` s); the learner's
one door (``LearnerInputs.minibatches``) turns any input into minibatches of the same fields; the
learner's metrics (:class:`~pipeline.learner.Stats`) become the TrainOutput's floats.

A pipeline that carries more per transition (e.g. a behaviour policy's ``logp``) declares it the same
way and the extra keys travel through n-step, the buffer and the fetcher into the batch::

    class MyTransition(Transition, total=False):
        logp: float

This module imports neither numpy nor torch.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, TypedDict, Union

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor

__all__ = ["Transition", "TrainBatch", "TrainOutput", "OnTrained"]


class _TransitionExtras(TypedDict, total=False):
    nstep: int  # steps summed into reward (set by nstep_reward_enhancer; absent on 1-step transitions)


class Transition(_TransitionExtras):
    """One env's step, as collectors write it to ``ctx.transitions`` (one row of an ``EnvStep``).

    ``ctx.episodes`` holds lists of them; ``data_pusher`` pushes each as one buffer item (meta
    ``{'env': env_id, 'train_iter_data_collected': ...}``). After ``nstep_reward_enhancer``,
    ``reward`` is the discounted sum of ``nstep`` rewards and ``next_obs``/``terminated``/
    ``truncated`` are those of the last summed step.
    """

    obs: Union[np.ndarray, Dict[str, np.ndarray]]  # [*obs_shape] (a row of EnvStep.obs); goal envs: a dict of rows
    action: Union[int, np.ndarray]  # int (discrete) or [*act_shape]
    reward: float
    next_obs: Union[np.ndarray, Dict[str, np.ndarray]]  # the observation reached (the final one when the episode ended)
    terminated: bool  # the MDP ended: no bootstrapping
    truncated: bool   # a time limit cut the episode: bootstrap from next_obs
    env_id: int


class _TrainBatchExtras(TypedDict, total=False):
    env_id: Tensor   # [B] int64 (transitions from collectors)
    nstep: Tensor    # [B] int64 (n-step transitions)
    weight: Tensor   # [B] float32 importance-sampling weights: sampled with priorities only
    indices: Tensor  # [B] int64 the rows' buffer item indices: every batch sampled from a buffer


class TrainBatch(_TrainBatchExtras):
    """Sampled transitions as ``[B, ...]`` tensors: ``ctx.train_data``, what ``Learner.update`` gets.

    The fields of :class:`Transition` stacked along a batch axis (numbers and arrays become tensors:
    ``action`` int64 for discrete actions, ``terminated``/``truncated`` bool; fields that are not
    numbers or arrays, e.g. strings, stay plain lists). Sampled from a buffer (``sample_batch``,
    ``offpolicy_data_fetcher``) it also has ``indices`` (which buffer items the rows are: for writing
    priorities or meta back; a loss may ignore them) and, with a sampler that gives importance-sampling
    weights (``PrioritizedSampler``), ``weight`` (for the loss). A dict of buffers gives a dict of
    ``TrainBatch`` keyed like the buffers. ``offline_data_fetcher`` writes the same form from a dataset,
    without ``indices``.
    """

    obs: Tensor
    action: Tensor
    reward: Tensor
    next_obs: Tensor
    terminated: Tensor
    truncated: Tensor


class TrainOutput(TypedDict, total=False):
    """One update's output (``middleware.functional.flatten_update_result``): ``metric -> float``.

    Every scalar the loss and the learner report (``total_loss``, ``q_value``, ``learning_rate``,
    ``num_env_steps_trained``, ...) as a Python float, plus the loss's per-row outputs from the last
    minibatch as tensors, among them ``priority`` (``[B]``, e.g. ``|TD error|``), which the fetcher
    writes back to a prioritized buffer. A learner with several modules gives ``module_id ->
    {metric: float, ...}`` (each module's own ``priority``) plus the ``__all_modules__`` metrics.

    ``ctx.train_output`` is always a list of them, one per update of the step: ``trainer`` writes a
    list of one, ``OffPolicyLearner`` / ``HERLearner`` one per round (empty when nothing was trained),
    ``OnPolicyTrainer`` a list of one (its update runs all epochs).
    """

    total_loss: float
    priority: Tensor  # [B]


OnTrained = Callable[[TrainOutput], None]
"""What a batch source returns with a batch: run once the batch is trained, with that update's output
(e.g. write its ``priority`` back to the buffer)."""
