"""``EnvStepper``: the one way the collectors step an ``EnvManager`` with a policy.

``StepCollector``, ``EpisodeCollector`` and ``RolloutCollector`` all step through it: it resets the
env (and the policy's per-env state) before the first step, steps every env in lock step or two halves
overlapped (``step_async``/``step_wait``), counts env steps and finished episodes on the context, logs
the finished episodes and resets the policy's state of the envs that finished one. What a collector
builds from the steps (transitions, episodes, a rollout) is its own business.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable, List, Mapping, Optional, Tuple, Union, cast

import numpy as np

from contexts import OnlineRLContext
from pipeline.runtime.protocols import ActingPolicy

if TYPE_CHECKING:  # loads gymnasium, which `import middleware` does not
    from pipeline.envs import EnvManager, EnvStep, EpisodeInfo

__all__ = ['EnvStepper', 'log_finished', 'Actor']

Actor = Union[ActingPolicy, Callable[..., object]]
"""What a collector acts with: a policy's collect mode (``forward(obs, **kwargs)``) or a plain callable."""

_NO_KWARGS: Mapping[str, object] = {}


def log_finished(ctx: OnlineRLContext, finished: List[EpisodeInfo]) -> None:
    """Append finished episodes' returns and lengths to ``ctx.info_for_logging['collect_episode_return'
    / 'collect_episode_length']`` (and raw game scores, when the env reports them, to ``['collect_score']``)."""
    if finished:
        info = ctx.info_for_logging
        info.setdefault('collect_episode_return', []).extend(e.episode_return for e in finished)
        info.setdefault('collect_episode_length', []).extend(e.length for e in finished)
        scores = [e.score for e in finished if getattr(e, 'score', None) is not None]
        if scores:  # raw game scores under training-only wrappers (Atari: clipped rewards, episodic life)
            info.setdefault('collect_score', []).extend(scores)


class EnvStepper:
    """Steps ``env`` (an ``EnvManager``) with ``policy``'s forward, one step of all envs (lock step) or of
    one half of them (``overlap=True``) per :meth:`step`.

    ``policy`` is a collect mode (``policy.forward(obs [n, ...], **kwargs)``, or a plain callable); with
    ``action_key=None`` its output is the actions, else a mapping whose ``[action_key]`` is (e.g. PPO's
    ``{'env_action', 'action', 'logp', 'value'}`` with ``action_key='env_action'``). :meth:`step` returns
    the ``EnvStep`` together with the output of the forward pass that chose its actions (for the same
    envs, ``EnvStep.env_ids``), so a collector can keep per-step extras such as log-probabilities.

    Writes, per step, on the ``ctx`` it is given: ``ctx.env_step`` (+ the envs stepped),
    ``ctx.env_episode`` (+ the episodes finished) and ``ctx.info_for_logging`` (their returns and lengths:
    :func:`log_finished`); calls ``policy.reset()`` after a reset of the env and ``policy.reset(env_ids)``
    for the envs that finished an episode, when the policy has ``reset``.

    Overlapped (needs ``env_num >= 2``, else it steps in lock step): the halves are
    :meth:`EnvManager.halves`. Each :meth:`step` starts the other half's step, with actions chosen now,
    and returns the step of the half started before (in the previous call, or first in this one), so
    one half steps in the workers while this process runs the policy and the caller's work on the other.
    ``start_next=False`` only takes the half in flight and leaves nothing in flight (the end of a
    rollout). For a deterministic policy the steps are those of lock step, half by half in env order.
    """

    def __init__(self, policy: Actor, env: EnvManager, overlap: bool = False, action_key: Optional[str] = None) -> None:
        self.policy = policy
        self.env = env
        self.action_key = action_key
        self._forward: Callable[..., object] = policy.forward if hasattr(policy, 'forward') else policy
        self._reset: Optional[Callable[..., None]] = getattr(policy, 'reset', None)
        self.overlap = bool(overlap) and env.env_num >= 2  # one env: lock step
        #: steps per round of all envs: 2 when overlapped (two halves), else 1
        self.parts = 2 if self.overlap else 1
        # (ids, rows of env.obs: a slice, so the policy gets a view, not a copy), made at the first step
        self._halves: Optional[Tuple[Tuple[np.ndarray, slice], ...]] = None
        self._waiting: Optional[int] = None  # the half whose step is in flight
        self._out: List[object] = [None, None]  # each half's forward output, while its step is in flight

    def reset_if_needed(self, drop_in_flight: bool = False) -> bool:
        """Reset the env and the policy's per-env state before the first step (with ``drop_in_flight``
        also when a step is in flight, e.g. left by an interrupted call); True if it reset."""
        env = self.env
        if not env.needs_reset and not (drop_in_flight and env.in_flight):
            return False
        env.reset()
        self._waiting = None
        if self._reset is not None:
            self._reset()
        return True

    def step(self, ctx: OnlineRLContext, kwargs: Mapping[str, object] = _NO_KWARGS,
             start_next: bool = True) -> Tuple[EnvStep, object]:
        """One step of every env (lock step) or of one half (overlap): ``(EnvStep, forward output)``.

        ``kwargs`` go to ``policy.forward(obs, **kwargs)``. Counts and logs on ``ctx`` (see the class)."""
        if self.overlap:
            step, out = self._overlapped(kwargs, start_next)
        else:
            out = self._forward(self.env.obs, **kwargs)
            key = self.action_key
            step = self.env.step(out if key is None else cast(Mapping[str, object], out)[key])
        ctx.env_step += len(step.env_ids)
        finished = step.finished
        if finished:
            ctx.env_episode += len(finished)
            log_finished(ctx, finished)
            if self._reset is not None:
                self._reset([e.env_id for e in finished])
        return step, out

    def _start(self, h: int, kwargs: Mapping[str, object]) -> None:
        """Choose half ``h``'s actions now and start its step."""
        ids, rows = self._halves[h]  # type: ignore[index]  # set by _overlapped, the only caller
        env = self.env
        out = self._forward(env.obs[rows], **kwargs)
        key = self.action_key
        env.step_async(out if key is None else cast(Mapping[str, object], out)[key], ids)
        self._out[h] = out

    def _overlapped(self, kwargs: Mapping[str, object], start_next: bool) -> Tuple[EnvStep, object]:
        env = self.env
        if self._halves is None:
            self._halves = tuple((h, slice(int(h[0]), int(h[-1]) + 1)) for h in env.halves())
        if env.in_flight == 0:  # the first step, after a reset, or after start_next=False: start half 0
            self._waiting = None
        if self._waiting is None:
            self._start(0, kwargs)
            self._waiting = 0
        waiting = self._waiting
        if start_next:
            self._start(1 - waiting, kwargs)
        step = env.step_wait()
        self._waiting = 1 - waiting if start_next else None
        out, self._out[waiting] = self._out[waiting], None
        return step, out
