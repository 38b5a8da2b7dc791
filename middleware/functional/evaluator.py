"""Evaluation by interaction: run the greedy policy for whole episodes."""
from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING, Dict, List, Mapping, NamedTuple, Optional, Protocol, Tuple, Union, cast

import numpy as np

from contexts import RLContext
from pipeline import task
from pipeline.runtime.roles import Role, for_roles

from ..env_stepper import Actor

if TYPE_CHECKING:  # loads gymnasium and torch, which `import middleware` does not
    import torch

    from pipeline.envs import EnvManager

__all__ = ['interaction_evaluator', 'evaluate_episodes', 'run_eval_episodes', 'EvalResult', 'episode_return_bound',
           'episode_step_limit', 'STEP_REWARD_BOUNDS']

log = logging.getLogger(__name__)


class EvaluatorMiddleware(Protocol):
    """What :func:`interaction_evaluator` returns: the middleware, with ``env_steps`` (the env steps of all its
    evaluations so far) and ``evaluations`` (how many it ran)."""

    env_steps: int
    evaluations: int

    def __call__(self, ctx: RLContext) -> None: ...


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


def episode_return_bound(env_id: object, max_episode_steps: Optional[int] = None) -> Optional[float]:
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


def episode_step_limit(env_id: object, max_episode_steps: Optional[int] = None) -> Optional[int]:
    """The most steps one episode of ``env_id`` can take: ``max_episode_steps`` when given, else the time
    limit of the env's gymnasium registration (500 for CartPole-v1); None when neither is known (an env
    id that is not a registered str, or a registration without a time limit)."""
    if max_episode_steps:
        return int(max_episode_steps)
    if not isinstance(env_id, str):
        return None
    import gymnasium as gym  # lazy: `import middleware` loads no gymnasium
    try:
        limit = gym.spec(env_id).max_episode_steps
    except Exception:  # not registered (or its module is not importable): unknown
        return None
    return int(limit) if limit else None


def run_eval_episodes(policy: Actor, env: EnvManager, n_episode: int, max_env_steps: int = 1_000_000,
                      target_mean: Optional[float] = None, max_episode_return: Optional[float] = None,
                      min_running_mean: Optional[float] = None) -> EvalResult:
    """Run ``n_episode`` fresh episodes (fewer when stopped early) and say what it cost.

    Episodes are shared out evenly over ``env``'s envs (env ``i`` runs ``n//m`` or ``n//m + 1``
    of them) so short episodes are not over-represented. ``policy`` is an eval mode with
    ``forward(obs [k, ...]) -> actions [k]``. With ``target_mean`` and ``max_episode_return``
    (the highest return one episode can have, e.g. the time limit for a +1-per-step reward), the
    run stops as soon as the mean over all ``n_episode`` episodes can no longer reach
    ``target_mean`` even if every unfinished episode got ``max_episode_return``. With
    ``min_running_mean`` it stops as soon as the mean of the episodes finished so far is below that (a
    stricter stop: the mean of the finished episodes of a stopped run is then below it too). Raises
    ``RuntimeError`` if ``max_env_steps`` env steps pass without finishing (an env without a
    time limit).
    """
    if n_episode < 1:
        raise ValueError(f'n_episode must be >= 1, got {n_episode}')
    early_stop = target_mean is not None and max_episode_return is not None
    need = float(target_mean) * n_episode if target_mean is not None else 0.0
    best = float(max_episode_return) if max_episode_return is not None else 0.0
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
            below = min_running_mean is not None and sum(returns) < min_running_mean * len(returns)
            if len(active) and (below or early_stop and
                                sum(returns) + (n_episode - len(returns)) * best < need):
                return EvalResult(np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.int64),
                                  steps, False)
        if steps > max_env_steps:
            raise RuntimeError(f'evaluation ran {steps} env steps without finishing {n_episode} episodes; '
                               f'does the env have a time limit (max_episode_steps)?')
    return EvalResult(np.asarray(returns, dtype=np.float64), np.asarray(lengths, dtype=np.int64), steps, True)


def evaluate_episodes(policy: Actor, env: EnvManager, n_episode: int, max_env_steps: int = 1_000_000
                      ) -> Tuple[np.ndarray, np.ndarray]:
    """Run exactly ``n_episode`` fresh episodes and return their (returns, lengths)
    (:func:`run_eval_episodes` without an early stop)."""
    r = run_eval_episodes(policy, env, n_episode, max_env_steps)
    return r.returns, r.lengths


def _snapshot(policy: object) -> Optional[Dict[str, torch.Tensor]]:
    """A detached copy of the evaluated model's weights (``policy.model``) on the host, or None."""
    model = getattr(policy, 'model', None)
    state_dict = getattr(model, 'state_dict', None)
    if state_dict is None:
        return None
    return {k: v.detach().clone() if v.device.type == 'cpu' else v.detach().cpu() for k, v in state_dict().items()}


@for_roles(Role.EVALUATOR, reads=["train_iter", "last_eval_iter", "env_step?", "info_for_logging?"],
           writes=["eval_value", "last_eval_value", "last_eval_iter", "eval_output"])
def interaction_evaluator(cfg: Mapping, policy: Actor, env: EnvManager,
                          max_episode_return: Union[float, str, None] = None,
                          snapshot: bool = True, min_collect_return: Optional[float] = None,
                          max_eval_gap: Optional[int] = None, collect_window: int = 1,
                          eval_cost_ratio: Optional[float] = None,
                          running_mean_stop: bool = False) -> EvaluatorMiddleware:
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
    With ``eval_cost_ratio`` (e.g. 1.0), a due evaluation after the first (the untrained policy's, on the
    first call) also waits until the evaluation env steps so far plus its worst case -- every episode
    running to the env's time limit (:func:`episode_step_limit` of ``cfg.env.env_id`` and
    ``cfg.env.max_episode_steps``) -- stay below ``eval_cost_ratio`` times the training env steps since the
    evaluator's first call (``ctx.env_step``; a resumed run counts from its resume). So whenever such an
    evaluation has run, evaluation env steps are below ``eval_cost_ratio`` times training env steps: with
    1.0, evaluation never costs more env steps than training. None, or an unknown time limit: no such wait.
    With ``running_mean_stop`` (and ``cfg.env.stop_value``) an evaluation stops as soon as the mean of its
    finished episodes is below the stop value (:func:`run_eval_episodes`' ``min_running_mean``): stricter
    than "out of reach", so the stop value is reached only by a complete evaluation whose running mean stayed
    at or above it after every episode, and an evaluation stopped early reports a mean below it.

    Reads ``ctx.train_iter``, ``ctx.last_eval_iter``, ``ctx.info_for_logging``. Writes ``ctx.eval_value`` (mean return, only
    on steps that evaluate), ``ctx.last_eval_value``, ``ctx.last_eval_iter``, ``ctx.eval_output``
    (``{'episode_return': array, 'episode_length': array, 'env_steps': int, 'complete': bool,
    'train_iter': int, 'model_state': {name: tensor}}``: ``model_state`` is a copy of the weights
    that were evaluated, when ``snapshot`` and the policy has a ``model``, so that
    ``CkptSaver`` saves exactly those) and sets ``task.finish`` when the mean return reaches
    ``cfg.env.stop_value`` after some training (``ctx.train_iter > 0``). ``fn.env_steps`` counts the
    env steps of all evaluations so far (``fn.evaluations`` the evaluations). Role: EVALUATOR.
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
    worst_cost: Optional[int] = None
    ratio = 0.0 if eval_cost_ratio is None else float(eval_cost_ratio)
    if eval_cost_ratio is not None:
        if not eval_cost_ratio > 0:
            raise ValueError(f'eval_cost_ratio must be > 0, got {eval_cost_ratio!r}')
        limit = episode_step_limit(cfg['env'].get('env_id'), cfg['env'].get('max_episode_steps'))
        if limit is None:
            log.warning('interaction_evaluator: the env\'s time limit is unknown (env.max_episode_steps), so '
                        'evaluations do not wait for eval_cost_ratio')
        else:
            worst_cost = n_episode * limit
    start: Dict[str, int] = {}  # the env step of the first call: training env steps count from there

    def _evaluate(ctx: RLContext) -> None:
        start.setdefault('env_step', int(getattr(ctx, 'env_step', 0)))
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
            if worst_cost is not None:
                trained = int(getattr(ctx, 'env_step', 0)) - start['env_step']
                if fn.env_steps + worst_cost >= ratio * trained:
                    return
        res = run_eval_episodes(policy, env, n_episode, target_mean=stop_value,
                                max_episode_return=max_episode_return,
                                min_running_mean=stop_value if running_mean_stop else None)
        fn.env_steps += res.env_steps
        fn.evaluations += 1
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
        why = f'mean below {stop_value}' if running_mean_stop else f'{stop_value} out of reach'
        partial = '' if res.complete else f' (stopped after {len(returns)} of {n_episode} episodes: {why})'
        log.info('eval at train iter %d, env step %d: mean return %.2f (std %.2f, min %.1f, max %.1f)%s%s',
                 ctx.train_iter, getattr(ctx, 'env_step', 0), mean, float(returns.std()), float(returns.min()),
                 float(returns.max()), partial, f' >= stop value {stop_value}: finishing' if stop else '')
        if stop:
            task.finish = True

    fn = cast(EvaluatorMiddleware, _evaluate)
    fn.env_steps = 0
    fn.evaluations = 0
    return fn
