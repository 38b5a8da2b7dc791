"""Evaluation by interaction: run the greedy policy for whole episodes."""
from __future__ import annotations

import logging
from collections import deque
from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Optional, Tuple, Union

import numpy as np

from contexts import RLContext
from pipeline import task
from pipeline.runtime.roles import Role, for_roles

__all__ = ['interaction_evaluator', 'evaluate_episodes', 'run_eval_episodes', 'EvalResult', 'episode_return_bound',
           'STEP_REWARD_BOUNDS']

log = logging.getLogger(__name__)


class EvalResult(NamedTuple):
    """What :func:`run_eval_episodes` ran: the finished episodes' returns and lengths, the env
    steps it took (every stepped env, including episodes abandoned by an early stop) and whether
    all requested episodes finished (False after an early stop)."""

    returns: np.ndarray
    lengths: np.ndarray
    env_steps: int
    complete: bool


#: The highest reward one step can pay, for gymnasium envs where it is known and >= 0 (an episode's
#: return is then at most this times the time limit). Add entries for your own envs.
STEP_REWARD_BOUNDS: Dict[str, float] = {
    'CartPole-v0': 1.0,     # +1 per step
    'CartPole-v1': 1.0,
    'Acrobot-v1': 0.0,      # -1 per step, 0 at the goal
    'Pendulum-v1': 0.0,     # minus a cost
}


def episode_return_bound(env_id: Any, max_episode_steps: Optional[int] = None) -> Optional[float]:
    """The best return one episode of ``env_id`` can have, or None when it is not known.

    Known when :data:`STEP_REWARD_BOUNDS` has the env's per-step reward bound and the env has a
    time limit (``max_episode_steps``, else its gymnasium registration's): e.g. 500.0 for
    CartPole-v1, 200.0 for CartPole-v0, 0.0 for Pendulum-v1. ``env_id`` that is not a str
    (a callable, an env) gives None.
    """
    if not isinstance(env_id, str) or env_id not in STEP_REWARD_BOUNDS:
        return None
    per_step = STEP_REWARD_BOUNDS[env_id]
    if per_step == 0.0:
        return 0.0
    if max_episode_steps is None:
        import gymnasium as gym  # lazy: `import middleware` loads no gymnasium
        max_episode_steps = gym.spec(env_id).max_episode_steps
    return float(max_episode_steps) * per_step if max_episode_steps else None


def run_eval_episodes(policy: Any, env: Any, n_episode: int, max_env_steps: int = 1_000_000,
                      target_mean: Optional[float] = None, max_episode_return: Optional[float] = None
                      ) -> EvalResult:
    """Run ``n_episode`` fresh episodes (fewer when stopped early) and say what it cost.

    Episodes are shared out evenly over ``env``'s envs (env ``i`` runs ``n//m`` or ``n//m + 1``
    of them) so short episodes are not over-represented. ``policy`` is an eval mode with
    ``forward(obs [k, ...]) -> actions [k]``. With ``target_mean`` and ``max_episode_return``
    (the highest return one episode can have, e.g. the time limit for a +1-per-step reward), the
    run stops as soon as the mean over all ``n_episode`` episodes can no longer reach
    ``target_mean`` even if every unfinished episode got ``max_episode_return``. Raises
    ``RuntimeError`` if ``max_env_steps`` env steps pass without finishing (an env without a
    time limit).
    """
    if n_episode < 1:
        raise ValueError(f'n_episode must be >= 1, got {n_episode}')
    early_stop = target_mean is not None and max_episode_return is not None
    need = float(target_mean) * n_episode if early_stop else 0.0
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
            if early_stop and len(active) and \
                    sum(returns) + (n_episode - len(returns)) * float(max_episode_return) < need:
                return EvalResult(np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.int64),
                                  steps, False)
        if steps > max_env_steps:
            raise RuntimeError(f'evaluation ran {steps} env steps without finishing {n_episode} episodes; '
                               f'does the env have a time limit (max_episode_steps)?')
    return EvalResult(np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.int64), steps, True)


def evaluate_episodes(policy: Any, env: Any, n_episode: int, max_env_steps: int = 1_000_000
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """Run exactly ``n_episode`` fresh episodes and return their (returns, lengths)
    (:func:`run_eval_episodes` without an early stop)."""
    r = run_eval_episodes(policy, env, n_episode, max_env_steps)
    return r.returns, r.lengths


def _snapshot(policy: Any) -> Optional[Dict[str, Any]]:
    """A detached copy of the evaluated model's weights (``policy.model``) on the host, or None."""
    model = getattr(policy, 'model', None)
    state_dict = getattr(model, 'state_dict', None)
    if state_dict is None:
        return None
    return {k: v.detach().clone() if v.device.type == 'cpu' else v.detach().cpu() for k, v in state_dict().items()}


@for_roles(Role.EVALUATOR, reads=["train_iter", "last_eval_iter", "env_step?", "info_for_logging?"],
           writes=["eval_value", "last_eval_value", "last_eval_iter", "eval_output"])
def interaction_evaluator(cfg: Mapping, policy: Any, env: Any, max_episode_return: Union[float, str, None] = None,
                          snapshot: bool = True, min_collect_return: Optional[float] = None,
                          max_eval_gap: Optional[int] = None, collect_window: int = 1) -> Callable[[Any], None]:
    """Evaluate ``policy`` (an eval mode) on ``env`` every ``cfg.policy.eval.evaluator.eval_freq``
    train iterations, over ``cfg.env.n_evaluator_episode`` episodes.

    Runs on the first call (train iter 0) and then whenever ``ctx.train_iter - ctx.last_eval_iter
    >= eval_freq`` -- not again on every step before training starts.
    With ``max_episode_return`` (the best return one episode can have, e.g. 500 on CartPole-v1;
    ``'auto'``: :func:`episode_return_bound` of ``cfg.env.env_id`` and ``cfg.env.max_episode_steps``,
    no early stop when that is unknown) and ``cfg.env.stop_value``, an evaluation stops as soon as
    the stop value is out of reach even if every remaining episode scored that bound (see
    :func:`run_eval_episodes`): the criterion is unchanged, and the env steps it ran are counted in
    ``env_steps`` as usual. Its ``eval_value`` is then the mean of the finished episodes and
    ``eval_output['complete']`` is False. The stop value is only declared reached by a complete
    evaluation.
    With ``min_collect_return``, a due evaluation also waits until the last finished training
    episode (``ctx.info_for_logging['collect_episode_return']``, written by the collectors of this
    node) returned at least that much -- a free screen that skips evaluating policies that cannot be
    good yet -- or until ``max_eval_gap`` train iterations passed since the last evaluation. With
    ``collect_window`` > 1 each of the last that many training episodes must have reached it.

    Reads ``ctx.train_iter``, ``ctx.last_eval_iter``, ``ctx.info_for_logging``. Writes ``ctx.eval_value`` (mean return, only
    on steps that evaluate), ``ctx.last_eval_value``, ``ctx.last_eval_iter``, ``ctx.eval_output``
    (``{'episode_return': array, 'episode_length': array, 'env_steps': int, 'complete': bool,
    'train_iter': int, 'model_state': {name: tensor}}``: ``model_state`` is a copy of the weights
    that were evaluated, when ``snapshot`` and the policy has a ``model``, so that
    ``CkptSaver`` saves exactly those) and sets ``task.finish`` when the mean return reaches
    ``cfg.env.stop_value`` after some training (``ctx.train_iter > 0``). ``fn.env_steps`` counts the
    env steps of all evaluations so far. Role: EVALUATOR.
    """
    eval_freq = int(cfg['policy']['eval']['evaluator']['eval_freq'])
    if isinstance(max_episode_return, str):
        if max_episode_return != 'auto':
            raise ValueError(f"max_episode_return must be a number, 'auto' or None, got {max_episode_return!r}")
        max_episode_return = episode_return_bound(cfg['env'].get('env_id'), cfg['env'].get('max_episode_steps'))
    n_episode = int(cfg['env']['n_evaluator_episode'])
    stop_value = cfg['env'].get('stop_value')

    if max_eval_gap is not None and max_eval_gap < eval_freq:
        raise ValueError(f'max_eval_gap ({max_eval_gap}) must be >= eval_freq ({eval_freq})')
    if collect_window < 1:
        raise ValueError(f'collect_window must be >= 1, got {collect_window}')
    recent: deque = deque(maxlen=collect_window)

    def _evaluate(ctx: RLContext) -> None:
        if min_collect_return is not None:
            rets = ctx.info_for_logging.get('collect_episode_return') if ctx.info_for_logging else None
            if rets:
                recent.extend(float(r) for r in rets)
        if ctx.last_eval_iter >= 0:
            gap = ctx.train_iter - ctx.last_eval_iter
            if gap < eval_freq:
                return
            screened = len(recent) == collect_window and min(recent) >= min_collect_return \
                if min_collect_return is not None else True
            if not screened and \
                    (max_eval_gap is None or gap < max_eval_gap):
                return
        res = run_eval_episodes(policy, env, n_episode, target_mean=stop_value,
                                max_episode_return=max_episode_return)
        _evaluate.env_steps += res.env_steps
        returns = res.returns
        mean = float(returns.mean())
        ctx.eval_value = mean
        ctx.last_eval_value = mean
        ctx.last_eval_iter = ctx.train_iter
        ctx.eval_output = {'episode_return': returns, 'episode_length': res.lengths, 'env_steps': res.env_steps,
                           'complete': res.complete, 'train_iter': int(ctx.train_iter)}
        if snapshot:
            state = _snapshot(policy)
            if state is not None:
                ctx.eval_output['model_state'] = state
        stop = res.complete and stop_value is not None and mean >= stop_value and ctx.train_iter > 0
        partial = '' if res.complete else f' (stopped after {len(returns)} of {n_episode} episodes: ' \
                                          f'{stop_value} out of reach)'
        log.info('eval at train iter %d, env step %d: mean return %.2f (std %.2f, min %.1f, max %.1f)%s%s',
                 ctx.train_iter, getattr(ctx, 'env_step', 0), mean, float(returns.std()), float(returns.min()),
                 float(returns.max()), partial, f' >= stop value {stop_value}: finishing' if stop else '')
        if stop:
            task.finish = True

    _evaluate.env_steps = 0  # type: ignore[attr-defined]
    return _evaluate
