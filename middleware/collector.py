"""Collectors: step or episode collection from an ``EnvManager`` with a policy's collect mode."""
from __future__ import annotations

from typing import TYPE_CHECKING, Dict, List, Mapping

from contexts import OnlineRLContext
from pipeline.runtime.roles import Role, for_roles

from .env_stepper import Actor, EnvStepper

if TYPE_CHECKING:
    from pipeline.envs import EnvManager, EnvStep
    from pipeline.data.records import Transition

__all__ = ['StepCollector', 'EpisodeCollector']


def _transitions(step: EnvStep) -> List[Transition]:
    """One :class:`~pipeline.data.records.Transition` per env from an ``EnvStep`` (numpy rows for
    observations and vector actions, Python scalars else)."""
    obs, next_obs = step.obs, step.next_obs
    action = step.action
    # Discrete actions become Python ints; vector (continuous) actions stay numpy rows so they
    # collate into an [N, act_dim] tensor like observations do.
    act = action.tolist() if getattr(action, 'ndim', 2) <= 1 else list(action)
    rew = step.reward.tolist()
    te = step.terminated.tolist()
    tr = step.truncated.tolist()
    ids = step.env_ids.tolist()
    return [{'obs': obs[j], 'action': act[j], 'reward': rew[j], 'next_obs': next_obs[j],
             'terminated': te[j], 'truncated': tr[j], 'env_id': ids[j]} for j in range(len(ids))]


def _collect_count(cfg: Mapping, key: str) -> int:
    n = int(cfg['policy']['collect'][key])
    if n < 1:
        raise ValueError(f'policy.collect.{key} must be >= 1, got {n}')
    return n


class _EnvCollector:
    """What both collectors share: an :class:`~middleware.env_stepper.EnvStepper` of the policy's collect
    mode on an ``EnvManager`` (lock step, or two halves overlapped: see :class:`StepCollector`)."""

    def __init__(self, policy: Actor, env: EnvManager, overlap: bool = False) -> None:
        self.policy = policy
        self.env = env
        self.stepper = EnvStepper(policy, env, overlap)
        self.overlap = self.stepper.overlap


@for_roles(Role.COLLECTOR, reads=["collect_kwargs?", "env_step", "env_episode"],
           writes=["transitions", "env_step", "env_episode", "info_for_logging"])
class StepCollector(_EnvCollector):
    """Collect at least ``cfg.policy.collect.n_sample`` transitions (whole rounds over all envs).

    Reads ``ctx.collect_kwargs`` (passed to ``policy.forward(obs, **collect_kwargs)``, e.g.
    ``eps``), ``ctx.env_step``, ``ctx.env_episode``. Writes ``ctx.transitions`` (a list of
    :class:`~pipeline.data.records.Transition`: ``obs, action, reward, next_obs, terminated,
    truncated, env_id``, in time order), advances ``ctx.env_step`` (by the transitions collected)
    and ``ctx.env_episode`` (by the episodes finished), and appends finished episodes' returns/lengths to
    ``ctx.info_for_logging['collect_episode_return' / 'collect_episode_length']`` (and raw game
    scores, when the env reports them, to ``['collect_score']``).

    ``policy`` is a collect mode (``forward(obs [N, ...], **kwargs) -> actions [N]``); ``env`` an
    ``EnvManager`` (reset on the first call; episodes continue across calls). Role: COLLECTOR.

    ``overlap=True`` steps the envs in two halves (:meth:`EnvManager.halves`) with
    ``step_async``/``step_wait``: while one half steps in the worker processes, this process runs the
    policy on the other half and builds its transitions, instead of waiting. It helps with
    ``backend='subprocess'`` when the envs' steps are slow (Atari, MuJoCo) or the policy's forward
    pass is; on ``sync`` and ``envpool`` it changes nothing but the order of the work. The
    transitions are the same as in lock step for a deterministic policy, in the same order (half
    by half); the difference is that one half's step is in flight between calls, its actions chosen
    in the previous call (with the policy and ``collect_kwargs`` of then), and ``n_sample`` is
    reached in half rounds. Needs ``env_num >= 2`` (with one env it steps in lock step).
    """

    def __init__(self, cfg: Mapping, policy: Actor, env: EnvManager, overlap: bool = False) -> None:
        super().__init__(policy, env, overlap)
        self.n_sample = _collect_count(cfg, 'n_sample')

    def __call__(self, ctx: OnlineRLContext) -> None:
        stepper = self.stepper
        stepper.reset_if_needed()
        kwargs = ctx.collect_kwargs
        out: List[Transition] = []
        while len(out) < self.n_sample:
            out.extend(_transitions(stepper.step(ctx, kwargs)[0]))
        ctx.transitions = out


@for_roles(Role.COLLECTOR, reads=["collect_kwargs?", "env_step", "env_episode"],
           writes=["episodes", "env_step", "env_episode", "info_for_logging"])
class EpisodeCollector(_EnvCollector):
    """Collect at least ``cfg.policy.collect.n_episode`` complete episodes.

    Episodes in progress when a call returns are continued by the next call (no data is thrown
    away). Reads ``ctx.collect_kwargs``, ``ctx.env_step``, ``ctx.env_episode``. Writes
    ``ctx.episodes`` (a list of episodes, each a list of
    :class:`~pipeline.data.records.Transition` as in :class:`StepCollector`), advances
    ``ctx.env_step`` and ``ctx.env_episode``, and logs returns in ``ctx.info_for_logging``.
    Role: COLLECTOR. ``overlap=True``: as in :class:`StepCollector`.
    """

    def __init__(self, cfg: Mapping, policy: Actor, env: EnvManager, overlap: bool = False) -> None:
        super().__init__(policy, env, overlap)
        self.n_episode = _collect_count(cfg, 'n_episode')
        self._partial: Dict[int, List[Transition]] = {}

    def __call__(self, ctx: OnlineRLContext) -> None:
        stepper = self.stepper
        if stepper.reset_if_needed():
            self._partial.clear()
        kwargs = ctx.collect_kwargs
        done_eps: List[List[Transition]] = []
        partial = self._partial
        while len(done_eps) < self.n_episode:
            for t in _transitions(stepper.step(ctx, kwargs)[0]):
                partial.setdefault(t['env_id'], []).append(t)
                if t['terminated'] or t['truncated']:
                    done_eps.append(partial.pop(t['env_id']))
        ctx.episodes = done_eps
