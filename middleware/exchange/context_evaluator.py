"""The evaluator's side of ``ContextExchanger``: evaluate at the learner's pace, send results to everybody."""
from __future__ import annotations

from typing import Any, Generator, Optional, Set

from contexts import OnlineRLContext
from pipeline.runtime.node import restarts_expected
from pipeline.runtime.roles import Role

from .context import ContextExchanger
from .shared import current_task


class EvaluatorContextExchanger(ContextExchanger, side=Role.EVALUATOR):
    """``ContextExchanger`` on a node with the evaluator role and no learner role (see ``ContextExchanger``)."""

    role_name = 'evaluator'

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # ContextExchanger's arguments, passed on
        self._steps = 0
        super().__init__(*args, **kwargs)

    def _peer_lost(self, node_id: int, roles: Set[str], dead: bool = False) -> None:
        self._finish_if_no_learner(node_id, roles, dead)

    def __call__(self, ctx: OnlineRLContext) -> Generator:
        task = current_task()
        self._learner_timed_out()
        if self._steps and not task.finish:
            def give_up() -> Optional[str]:  # with restarts, a lost learner is waited for (bounded)
                return None if self._with_role('learner') or restarts_expected() else 'no learner is alive'

            seen = self._updates.taken
            self._w.wait(lambda: self._updates.n != seen, self.wait_timeout, give_up, 'a learner update')
        self._steps += 1
        self._apply_update(ctx)
        yield
        self._send_eval(ctx)
        if task.finish:
            self._w.flush()
