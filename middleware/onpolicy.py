"""On-policy middleware: fixed-length rollouts, GAE, and one ``Learner.update`` per rollout (PPO).

Pipeline (single process)::

    task.use(RolloutCollector(cfg, policy.collect_mode, env))   # COLLECTOR: ctx.rollout
    task.use(gae_estimator(cfg, policy.model))                  # LEARNER: advantage, return
    task.use(OnPolicyTrainer(cfg, policy.learn_mode))           # LEARNER: one update, train_iter + 1

A rollout (``ctx.rollout``) is a dict of numpy arrays with a time axis ``T = n_steps`` and an env
axis ``N``: ``obs [T, N, ...]``, ``action``, ``logp``, ``value``, ``reward``, ``terminated``,
``truncated``, ``final_value`` (critic value of the true final observation where truncated, else
0), ``disc_return`` (each env's running discounted return, for reward scaling), and ``last_value``
``[N]`` (value of each env's observation after the last step).
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Protocol, cast

import numpy as np

from pipeline.runtime.roles import Role, for_roles
from pipeline.runtime.protocols import TrainablePolicy

from .env_stepper import EnvStepper

if TYPE_CHECKING:  # loads gymnasium, which `import middleware` does not
    from pipeline.envs import EnvManager
    from pipeline.policy.ppo import PPOCollectMode
from .functional.trainer import flatten_update_result

if TYPE_CHECKING:
    import torch

    from contexts import OnlineRLContext


class _ReturnScaler(Protocol):
    def update(self, x: np.ndarray) -> None: ...

    def scale(self, x: np.ndarray) -> np.ndarray: ...


class _HasRetNorm(Protocol):
    """A model that normalises rewards (``PPOModel``): the running statistics of discounted returns."""

    @property
    def ret_norm(self) -> _ReturnScaler: ...

__all__ = ['RolloutCollector', 'gae_estimator', 'OnPolicyTrainer', 'rollout_to_batch']

log = logging.getLogger(__name__)

ROLLOUT_KEYS = ('obs', 'action', 'logp', 'value', 'reward', 'terminated', 'truncated', 'final_value',
                'disc_return')


def _rollout_arrays(T: int, obs0: np.ndarray) -> tuple:
    """Empty arrays of one rollout of ``T`` steps of the ``N = len(obs0)`` envs: ``obs [T, N, ...]``;
    ``logp``, ``value``, ``reward``, ``final_value``, ``disc_return`` ``[T, N]`` float32 zeros;
    ``terminated``, ``truncated`` ``[T, N]`` bool."""
    N = len(obs0)
    obs = np.empty((T,) + obs0.shape, dtype=obs0.dtype)
    logp, value, reward, final_value, disc = np.zeros((5, T, N), dtype=np.float32)
    return (obs, logp, value, reward, final_value, disc, np.empty((T, N), dtype=bool),
            np.empty((T, N), dtype=bool))


@for_roles(Role.COLLECTOR, reads=["env_step", "env_episode"],
           writes=["rollout", "env_step", "env_episode", "info_for_logging"])
class RolloutCollector:
    """Collect one rollout of ``cfg.policy.collect.n_steps`` steps of every env per call.

    ``policy`` is a collect mode with ``forward(obs) -> {'env_action', 'action', 'logp', 'value'}``
    and ``value(obs)`` (e.g. ``PPOPolicy.collect_mode``); ``env`` an ``EnvManager`` (reset on the
    first call; episodes continue across rollouts). The envs are stepped by an
    :class:`~middleware.env_stepper.EnvStepper` (as in ``StepCollector``), which hands back each step
    with the forward output that chose its actions (``action``, ``logp``, ``value`` for the rollout) and
    resets the policy's per-env state (``policy.reset(env_ids)``, when it has one) of finished envs.

    Reads ``ctx.env_step``, ``ctx.env_episode``. Writes ``ctx.rollout`` (see the module docstring),
    advances ``ctx.env_step`` by ``n_steps * env_num`` and ``ctx.env_episode`` by the finished
    episodes, and appends their returns/lengths to ``ctx.info_for_logging['collect_episode_return' /
    'collect_episode_length']``. Role: COLLECTOR.

    ``overlap=True`` steps the envs in two halves (:meth:`EnvManager.halves`, with
    ``step_async``/``step_wait``): while one half steps in the worker processes of
    ``backend='subprocess'``, this process runs the policy on the other half. Worth it when the
    policy's forward pass costs about as much as a step (a CNN on Atari, on CPU); on ``sync`` and
    ``envpool`` it changes nothing but the order of the work. Every action is still chosen by the
    current policy and the rollout is complete when the call returns (nothing stays in flight), so
    with a deterministic policy the rollout is the lock-step one. Needs ``env_num >= 2``.
    """

    def __init__(self, cfg: Mapping, policy: PPOCollectMode, env: EnvManager, overlap: bool = False) -> None:
        self.n_steps = int(cfg['policy']['collect']['n_steps'])
        if self.n_steps < 1:
            raise ValueError(f'policy.collect.n_steps must be >= 1, got {self.n_steps}')
        for name in ('forward', 'value'):
            if not callable(getattr(policy, name, None)):
                raise TypeError(f'RolloutCollector needs a collect mode with forward(obs) and value(obs) '
                                f'(e.g. PPOPolicy.collect_mode); {type(policy).__name__} has no {name}()')
        self.policy = policy
        self.env = env
        self.gamma = float(cfg['policy']['discount_factor'])
        self._ret = np.zeros(env.env_num, dtype=np.float64)
        self.stepper = EnvStepper(policy, env, overlap, action_key='env_action')
        self.overlap = self.stepper.overlap

    def __call__(self, ctx: OnlineRLContext) -> None:
        env, pol, stepper, T, N = self.env, self.policy, self.stepper, self.n_steps, self.env.env_num
        # in flight when a call starts: left by an interrupted call, its results belong to no rollout
        if stepper.reset_if_needed(drop_in_flight=True):
            self._ret[:] = 0.0
        obs, logp, value, reward, final_value, disc, terminated, truncated = _rollout_arrays(T, env.obs)
        action = None
        ret, gamma, parts = self._ret, self.gamma, stepper.parts
        for t in range(T):
            for p in range(parts):  # lock step: all envs; overlapped: one half, then the other
                # the last step starts no next one: the rollout is complete when the call returns
                step, fwd = stepper.step(ctx, start_next=t + 1 < T or p + 1 < parts)
                out = cast(Mapping[str, np.ndarray], fwd)  # PPO's collect mode: action, logp, value
                ids = step.env_ids
                sl = slice(int(ids[0]), int(ids[-1]) + 1)  # all envs, or a half (consecutive ids)
                a = out['action']
                if action is None:
                    action = np.empty((T, N) + a.shape[1:], dtype=a.dtype)
                obs[t, sl] = step.obs
                action[t, sl] = a
                logp[t, sl] = out['logp']
                value[t, sl] = out['value']
                reward[t, sl] = step.reward
                terminated[t, sl] = step.terminated
                truncated[t, sl] = step.truncated
                r = ret[sl]  # a view: updated in place
                r *= gamma
                r += step.reward
                disc[t, sl] = r
                if step.finished:
                    r[step.terminated | step.truncated] = 0.0
                    cut = np.flatnonzero(step.truncated & ~step.terminated)
                    if len(cut):
                        final_value[t, sl.start + cut] = pol.value(step.next_obs[cut])
        setattr(ctx, 'rollout', {'obs': obs, 'action': action, 'logp': logp, 'value': value, 'reward': reward,
                       'terminated': terminated, 'truncated': truncated, 'final_value': final_value,
                       'disc_return': disc, 'last_value': pol.value(env.obs)})  # an extra key of the context


@for_roles(Role.LEARNER, reads=["rollout"])  # adds keys to the rollout dict in place
def gae_estimator(cfg: Mapping, model: object = None) -> Callable[[object], None]:
    """Add GAE(lambda) advantages and value targets to ``ctx.rollout``.

    Uses ``cfg.policy.discount_factor`` and ``cfg.policy.gae_lambda``; a truncated episode
    bootstraps from the value of its true final observation, a terminated one from nothing. With
    ``cfg.policy.learn.normalize_reward``, rewards are first divided by the running standard
    deviation of the discounted return (``model.ret_norm``, updated here from the rollout's
    ``disc_return``; clipped to +-10), as Stable-Baselines3's ``VecNormalize`` does.

    Reads ``ctx.rollout`` (nothing happens when it is None). Writes ``ctx.rollout['advantage']``
    and ``ctx.rollout['return']`` (``[T, N]`` float32). Role: LEARNER.
    """
    from pipeline.policy.config_defaults import config_value  # lazy: `import middleware` loads no torch
    from pipeline.policy.gae import gae_advantages  # here: importing pipeline.policy loads the learner

    gamma = float(config_value(cfg, 'policy.discount_factor', 'ppo'))
    lam = float(config_value(cfg, 'policy.gae_lambda', 'ppo'))
    norm_reward = bool(config_value(cfg, 'policy.learn.normalize_reward', 'ppo'))
    if norm_reward and getattr(model, 'ret_norm', None) is None:
        raise ValueError('policy.learn.normalize_reward needs gae_estimator(cfg, model) with a model that has '
                         'ret_norm (e.g. PPOPolicy.model)')

    def _gae(ctx: object) -> None:
        r = getattr(ctx, 'rollout', None)
        if r is None:
            return
        reward = r['reward']
        if norm_reward:
            ret_norm = cast(_HasRetNorm, model).ret_norm  # checked above
            ret_norm.update(r['disc_return'].reshape(-1))
            reward = ret_norm.scale(reward)
        r['advantage'], r['return'] = gae_advantages(reward, r['value'], r['terminated'], r['truncated'],
                                                     r['last_value'], r['final_value'], gamma, lam)

    return _gae


def rollout_to_batch(rollout: Mapping[str, np.ndarray]) -> Dict[str, torch.Tensor]:
    """The flat training batch ``[T * N]`` of torch tensors: obs, action, logp, value, advantage, return."""
    import torch  # lazy: `import middleware` loads no torch

    out = {}
    for k in ('obs', 'action', 'logp', 'value', 'advantage', 'return'):
        v = rollout[k]
        out[k] = torch.from_numpy(np.ascontiguousarray(v).reshape((-1,) + v.shape[2:]))
    return out


@for_roles(Role.LEARNER, reads=["rollout", "env_step?"], writes=["train_output", "train_iter"])
class OnPolicyTrainer:
    """One ``learner.update`` per rollout: ``n_epochs`` epochs of ``batch_size``-row minibatches.

    Calls ``learner.update(batch=rollout_to_batch(ctx.rollout), minibatch_size=m,
    num_epochs=cfg.policy.learn.n_epochs, shuffle_batch_per_epoch=True, timesteps=ctx.env_step)``
    with ``m = min(cfg.policy.learn.batch_size, rows)``: the Learner runs the minibatch loop. After
    training, the model's running observation statistics (``obs_norm``, when it has one) are
    updated from the rollout's observations, so a rollout is always trained with the statistics it
    was collected with.

    Reads ``ctx.rollout`` (with ``advantage``/``return`` from :func:`gae_estimator`; nothing happens
    when it is None), ``ctx.env_step``. Writes ``ctx.train_output``: a list of one
    :class:`~pipeline.data.records.TrainOutput` (metric -> float: losses, ``approx_kl``,
    ``clip_fraction``, ``learning_rate``, ``clip_range``, ``num_minibatch_updates``,
    ``explained_variance``, ...), and advances ``ctx.train_iter`` by one. Role: LEARNER.
    """

    def __init__(self, cfg: Mapping, learner: TrainablePolicy, log_freq: int = 50) -> None:
        if not hasattr(learner, 'update'):
            raise TypeError(f'OnPolicyTrainer needs a learner with update(...) (e.g. PPOPolicy.learn_mode); '
                            f'got {type(learner).__name__}')
        lc = cfg['policy']['learn']
        self.learner = learner
        self.n_epochs = int(lc['n_epochs'])
        self.batch_size = int(lc['batch_size'])
        self.log_freq = log_freq
        self.obs_norm = getattr(getattr(learner, 'model', None), 'obs_norm', None)

    def __call__(self, ctx: OnlineRLContext) -> None:
        r = getattr(ctx, 'rollout', None)
        if r is None:
            return
        if 'advantage' not in r:
            raise ValueError('OnPolicyTrainer: ctx.rollout has no advantages; put gae_estimator(cfg, model) '
                             'before the trainer')
        batch = rollout_to_batch(r)
        rows = batch['obs'].shape[0]
        result = self.learner.update(batch=batch, minibatch_size=min(self.batch_size, rows),
                                     num_epochs=self.n_epochs, shuffle_batch_per_epoch=True,
                                     timesteps={'num_env_steps_sampled_lifetime': int(ctx.env_step)})
        out = flatten_update_result(result, self.learner)
        ret, val = r['return'], r['value']
        var = float(np.var(ret))
        metrics = cast(Dict[str, object], out)  # a metric TrainOutput does not name
        metrics['explained_variance'] = float('nan') if var == 0 else 1.0 - float(np.var(ret - val)) / var
        if self.obs_norm is not None:
            self.obs_norm.update(r['obs'].reshape((-1,) + r['obs'].shape[2:]))
        ctx.train_output = [out]
        ctx.train_iter += 1
        if self.log_freq and ctx.train_iter % self.log_freq == 0:
            log.info('train iter %d, env step %d: loss %.4f, approx_kl %.4f, clip_fraction %.3f, lr %.2e',
                     ctx.train_iter, ctx.env_step, out.get('total_loss', float('nan')),
                     out.get('approx_kl', float('nan')), out.get('clip_fraction', float('nan')),
                     out.get('learning_rate', float('nan')))
