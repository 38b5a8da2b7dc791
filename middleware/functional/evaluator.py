"""Evaluation by interaction: run the greedy policy for whole episodes."""
from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Mapping, Tuple

import numpy as np

from contexts import RLContext
from pipeline.roles import Role, for_roles

__all__ = ['interaction_evaluator', 'evaluate_episodes']

log = logging.getLogger(__name__)


def evaluate_episodes(policy: Any, env: Any, n_episode: int, max_env_steps: int = 1_000_000
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """Run exactly ``n_episode`` fresh episodes and return their (returns, lengths).

    Episodes are shared out evenly over ``env``'s envs (env ``i`` runs ``n//m`` or ``n//m + 1``
    of them) so short episodes are not over-represented. ``policy`` is an eval mode with
    ``forward(obs [k, ...]) -> actions [k]``. Raises ``RuntimeError`` if ``max_env_steps`` env
    steps pass without finishing (an env without a time limit).
    """
    if n_episode < 1:
        raise ValueError(f'n_episode must be >= 1, got {n_episode}')
    m = env.env_num
    quota = np.array([n_episode // m + (1 if i < n_episode % m else 0) for i in range(m)])
    env.reset()
    if hasattr(policy, 'reset'):
        policy.reset()
    returns: List[float] = []
    lengths: List[int] = []
    active = np.flatnonzero(quota > 0)
    steps = 0
    forward = policy.forward if hasattr(policy, 'forward') else policy
    while len(active):
        obs = env.obs if len(active) == m else env.obs[active]
        step = env.step(forward(obs), env_ids=active)
        steps += len(active)
        if step.finished:
            for ep in step.finished:
                if quota[ep.env_id] > 0:
                    returns.append(ep.episode_return)
                    lengths.append(ep.length)
                    quota[ep.env_id] -= 1
            active = np.flatnonzero(quota > 0)
        if steps > max_env_steps:
            raise RuntimeError(f'evaluation ran {steps} env steps without finishing {n_episode} episodes; '
                               f'does the env have a time limit (max_episode_steps)?')
    return np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.int64)


@for_roles(Role.EVALUATOR, reads=["train_iter", "last_eval_iter", "env_step?"],
           writes=["eval_value", "last_eval_value", "last_eval_iter", "eval_output"])
def interaction_evaluator(cfg: Mapping, policy: Any, env: Any) -> Callable[[Any], None]:
    """Evaluate ``policy`` (an eval mode) on ``env`` every ``cfg.policy.eval.evaluator.eval_freq``
    train iterations, over ``cfg.env.n_evaluator_episode`` episodes.

    Runs on the first call (train iter 0) and then whenever ``ctx.train_iter - ctx.last_eval_iter
    >= eval_freq`` -- not again on every step before training starts.

    Reads ``ctx.train_iter``, ``ctx.last_eval_iter``. Writes ``ctx.eval_value`` (mean return, only
    on steps that evaluate), ``ctx.last_eval_value``, ``ctx.last_eval_iter``, ``ctx.eval_output``
    (``{'episode_return': array, 'episode_length': array}``) and sets ``task.finish`` when the
    mean return reaches ``cfg.env.stop_value`` after some training (``ctx.train_iter > 0``).
    Role: EVALUATOR.
    """
    from pipeline import task

    eval_freq = int(cfg['policy']['eval']['evaluator']['eval_freq'])
    n_episode = int(cfg['env']['n_evaluator_episode'])
    stop_value = cfg['env'].get('stop_value')

    def _evaluate(ctx: RLContext) -> None:
        if ctx.last_eval_iter >= 0 and ctx.train_iter - ctx.last_eval_iter < eval_freq:
            return
        returns, lengths = evaluate_episodes(policy, env, n_episode)
        mean = float(returns.mean())
        ctx.eval_value = mean
        ctx.last_eval_value = mean
        ctx.last_eval_iter = ctx.train_iter
        ctx.eval_output = {'episode_return': returns, 'episode_length': lengths}
        stop = stop_value is not None and mean >= stop_value and ctx.train_iter > 0
        log.info('eval at train iter %d, env step %d: mean return %.2f (std %.2f, min %.1f, max %.1f)%s',
                 ctx.train_iter, ctx.env_step, mean, float(returns.std()), float(returns.min()),
                 float(returns.max()), f' >= stop value {stop_value}: finishing' if stop else '')
        if stop:
            task.finish = True

    return _evaluate
