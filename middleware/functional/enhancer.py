"""Transition enhancers on the collector (DI-engine's ``functional/enhancer.py``): ``nstep_reward_enhancer`` and
the ``NStepAccumulator`` that turns 1-step transitions into n-step ones."""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Callable, Deque, Dict, List, Mapping, cast

from contexts import OnlineRLContext
from pipeline.runtime.roles import Role, for_roles

if TYPE_CHECKING:
    from pipeline.data.records import Transition

__all__ = ['nstep_reward_enhancer', 'NStepAccumulator']


class NStepAccumulator:
    """Turns per-env streams of 1-step transitions into n-step transitions (both
    :class:`~pipeline.data.records.Transition`; the n-step ones carry ``nstep``).

    A transition is emitted once its ``n`` following rewards are known, or when its episode ends
    (then with fewer steps). The emitted transition keeps ``obs``/``action`` of the first step and
    gets ``reward = sum_j gamma**j * r_j`` over the ``k`` steps summed, ``next_obs``,
    ``terminated`` and ``truncated`` of the last summed step, and ``nstep = k`` (so the learner
    bootstraps with ``gamma**k``, and never across a terminal; a truncated end still bootstraps).
    """

    def __init__(self, nstep: int, gamma: float) -> None:
        if nstep < 1:
            raise ValueError(f'nstep must be >= 1, got {nstep}')
        self.nstep = int(nstep)
        self.gamma = float(gamma)
        self._pending: Dict[object, Deque[Transition]] = {}
        # gamma**j for j < nstep, each the previous times gamma (the products a running factor would give)
        self._discount = [1.0]
        for _ in range(1, self.nstep):
            self._discount.append(self._discount[-1] * self.gamma)

    def _emit(self, q: Deque[Transition], k: int) -> Transition:
        first = q[0]
        last = q[k - 1]
        ret = 0.0
        discount = self._discount
        for j in range(k):
            ret += discount[j] * float(q[j]['reward'])
        out = cast('Transition', dict(first))  # a copy of the first transition, rewritten below
        out['reward'] = ret
        out['next_obs'] = last['next_obs']
        out['terminated'] = bool(last['terminated'])
        out['truncated'] = bool(last.get('truncated', False))
        out['nstep'] = k
        return out

    def add(self, transition: Transition) -> List[Transition]:
        """Feed one transition (with ``env_id``); returns the n-step transitions now complete."""
        key = transition.get('env_id', 0)
        q = self._pending.get(key)
        if q is None:
            q = self._pending[key] = deque()
        q.append(transition)
        out = []
        if transition['terminated'] or transition.get('truncated', False):
            while q:
                out.append(self._emit(q, len(q) if len(q) < self.nstep else self.nstep))
                q.popleft()
        elif len(q) >= self.nstep:
            out.append(self._emit(q, self.nstep))
            q.popleft()
        return out

    def pending(self) -> int:
        """Transitions waiting for future rewards."""
        return sum(len(q) for q in self._pending.values())

    def clear(self) -> None:
        self._pending.clear()


@for_roles(Role.COLLECTOR, reads=["transitions"], writes=["transitions"])
def nstep_reward_enhancer(cfg: Mapping) -> Callable[[OnlineRLContext], None]:
    """Replace ``ctx.transitions`` by n-step transitions (``cfg.policy.nstep``, discount
    ``cfg.policy.discount_factor``).

    Reads ``ctx.transitions`` (1-step :class:`~pipeline.data.records.Transition` in time order,
    each with ``env_id``; partial episodes continue across calls). Writes ``ctx.transitions`` (the
    n-step transitions, with ``nstep``, that became complete: see :class:`NStepAccumulator`;
    transitions whose n future rewards are not yet known are held back until a later call).
    Role: COLLECTOR (it must see every transition of an env in order).
    """
    acc = NStepAccumulator(int(cfg['policy']['nstep']), float(cfg['policy']['discount_factor']))

    def _nstep(ctx: OnlineRLContext) -> None:
        if not ctx.transitions:
            return
        out: List[Transition] = []
        for t in ctx.transitions:
            out.extend(acc.add(t))
        ctx.transitions = out

    setattr(_nstep, 'accumulator', acc)
    return _nstep
