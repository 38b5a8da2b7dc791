"""The offline pipeline shared by the examples, the guide and the benchmark: evaluator, fetcher, trainer.

The datasets and learners it trains with are :mod:`pipeline.offline`; a recipe builds a pipeline out of middleware,
so it lives here, above them. Importing this module loads neither torch nor gymnasium.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Optional, TypedDict, Union, cast

import numpy as np
from easydict import EasyDict

from contexts import OfflineRLContext
from middleware import evaluate_episodes, interaction_evaluator, termination_checker, trainer
from middleware.offline import MinibatchDataset, offline_data_fetcher
from pipeline.runtime.phases import Middleware

from ..runtime import task

if TYPE_CHECKING:  # they load torch and gymnasium, which importing this module does not
    from ..envs import EnvManager
    from ..policy.base import Policy

__all__ = ['use_offline', 'train_offline', 'OfflineRunResult']


class OfflineRunResult(TypedDict):
    """What :func:`train_offline` returns: the last context's counters and evaluation."""

    train_iter: int
    train_epoch: int
    last_eval_value: float  # the mean of eval_returns when there was an evaluation
    eval_returns: Optional[np.ndarray]  # the final weights' episode returns; None without an evaluator env


def use_offline(cfg: EasyDict, policy: Policy, dataset: MinibatchDataset, evaluator_env: Optional[EnvManager] = None,
                drop_last: bool = False, max_episode_return: Union[float, str, None] = 'auto') -> Optional[Middleware]:
    """Add an offline pipeline's middleware to the running task (inside ``with task.start(ctx=OfflineRLContext())``):
    :func:`middleware.offline.offline_data_fetcher` and :func:`middleware.trainer` (LEARNER), then the
    :func:`middleware.interaction_evaluator` on ``evaluator_env`` every ``cfg.policy.eval.evaluator.eval_freq``
    train iterations (EVALUATOR; none when ``evaluator_env`` is None). Returns the evaluator (or None)."""
    task.use(offline_data_fetcher(cfg, dataset, drop_last=drop_last))
    task.use(trainer(cfg, policy.learn_mode, log_freq=0))
    evaluator = None
    if evaluator_env is not None:
        evaluator = interaction_evaluator(cfg, policy.eval_mode, evaluator_env, max_episode_return=max_episode_return)
        task.use(evaluator)
    return evaluator


def train_offline(cfg: EasyDict, policy: Policy, dataset: MinibatchDataset, max_train_iter: int,
                  evaluator_env: Optional[EnvManager] = None,
                  extra_middleware: Optional[List[Middleware]] = None) -> OfflineRunResult:
    """Run :func:`use_offline` for ``max_train_iter`` train iterations (plus ``extra_middleware``, e.g. a
    logger or a ``CkptSaver``, after it) and return the last context's ``train_iter``, ``train_epoch``,
    ``last_eval_value`` and ``eval_returns``: the returns of an evaluation of the final weights (run
    after the last iteration when the evaluator had not just evaluated them; None without
    ``evaluator_env``)."""
    returns: Dict[str, Optional[np.ndarray]] = {'value': None}

    def _keep_eval(ctx: OfflineRLContext) -> None:
        eo = ctx.eval_output
        if eo is not None:
            returns['value'] = np.asarray(eo['episode_return'])

    with task.start(ctx=OfflineRLContext()):
        use_offline(cfg, policy, dataset, evaluator_env)
        task.use(_keep_eval)
        for mw in extra_middleware or []:
            task.use(mw)
        task.use(termination_checker(max_train_iter=max_train_iter))
        task.run()
        ctx = cast(OfflineRLContext, task.ctx)  # the context started above, renewed step by step
    if evaluator_env is not None and ctx.last_eval_iter != ctx.train_iter:
        rets, _ = evaluate_episodes(policy.eval_mode, evaluator_env, int(cfg.env.n_evaluator_episode))
        returns['value'] = rets
        ctx.last_eval_value = float(rets.mean())
    return OfflineRunResult(train_iter=int(ctx.train_iter), train_epoch=int(ctx.train_epoch),
                            last_eval_value=float(ctx.last_eval_value), eval_returns=returns['value'])
