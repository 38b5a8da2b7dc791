"""Exploration middleware (DI-engine's ``functional/explorer.py``): ``eps_greedy_handler``, the eps-greedy
schedule of the collect mode."""
from __future__ import annotations

from typing import Callable, Mapping

from contexts import OnlineRLContext
from pipeline.runtime.roles import Role, for_roles

__all__ = ['eps_greedy_handler']


def _eps_fn(cfg: Mapping) -> Callable[[int], float]:
    from pipeline.policy.common import eps_schedule  # lazy: `import middleware` loads no torch

    e = cfg['policy']['other']['eps']
    return eps_schedule(e['type'], float(e['start']), float(e['end']), int(e['decay']))


@for_roles(Role.COLLECTOR, reads=["env_step"], writes=["collect_kwargs"])
def eps_greedy_handler(cfg: Mapping) -> Callable[[OnlineRLContext], None]:
    """Set the exploration rate from the env-step count.

    Reads ``ctx.env_step``; writes ``ctx.collect_kwargs['eps']``.
    Schedule from ``cfg.policy.other.eps`` (``type`` exp/linear, ``start``, ``end``, ``decay``).
    Role: COLLECTOR.
    """
    eps_at = _eps_fn(cfg)

    def _eps_greedy(ctx: OnlineRLContext) -> None:
        ctx.collect_kwargs['eps'] = eps_at(ctx.env_step)

    return _eps_greedy
