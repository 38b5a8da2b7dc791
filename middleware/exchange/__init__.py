"""Distributed middleware: move context data and model weights between the nodes of a parallel run.

``ContextExchanger`` (``context``; each role's side in ``context_learner``, ``context_collector``,
``context_evaluator``)
    Collectors send what they collected (``ctx.transitions`` or ``ctx.episodes``) with their env-step
    and episode increments to the learner; the learner merges what arrived into its context, so that its
    ``data_pusher`` pushes it, and sends ``train_iter``/``env_step`` back to every node. Evaluators send
    their results to everybody, so every node knows ``last_eval_value`` at the end.
``ModelExchanger`` (``model``)
    The learner sends the model's weights (a dict of tensors, never a pickle) with a version (its
    ``train_iter``) after each train step; the other nodes load the newest version they received before
    acting.
``RolloutExchanger`` (``rollout``)
    On-policy (PPO): the learner sends versioned weights, each collector sends back one rollout made with
    that version, the learner trains once on the set; a rollout of another version is refused and counted.
``PeriodicalModelExchanger`` (``model``)
    The same with an explicit mode (``"send"``/``"receive"``), a send period in train iterations and a
    staleness bound: a receiver uses one model version for at most ``stale_toleration`` steps, then waits
    (bounded) for a newer one.

In a single process (``task.router.is_active`` is False) every exchanger is ``task.void()``: ``task.use``
skips it and it costs nothing. Build them inside ``with task.start(...)`` (the router and the node's roles
are known there), place them first in the chain::

    with task.start(ctx=OnlineRLContext()):
        task.use(ContextExchanger())
        task.use(ModelExchanger(policy.model))
        task.use(interaction_evaluator(...))
        ...

Every wait is bounded (``wait_timeout``), polls ``task.finish`` and is released by the loss of the peers it
waits for, with a log line saying what was waited for and why it ended.
"""
from . import context_collector, context_evaluator, context_learner  # noqa: F401  (each registers its side)
from .context import ContextExchanger
from .model import ModelExchanger, PeriodicalModelExchanger
from .rollout import RolloutExchanger

__all__ = ['ContextExchanger', 'ModelExchanger', 'PeriodicalModelExchanger', 'RolloutExchanger']
