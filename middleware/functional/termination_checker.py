"""Stop the pipeline after a number of env steps or train iterations."""
from __future__ import annotations

from typing import Callable, Optional

from contexts import RLContext
from pipeline import task
from pipeline.runtime.roles import for_all_roles

__all__ = ['termination_checker']


@for_all_roles(reads=["env_step?", "train_iter?"])
def termination_checker(max_env_step: Optional[int] = None, max_train_iter: Optional[int] = None
                        ) -> Callable[[RLContext], None]:
    """Set ``task.finish`` once ``ctx.env_step >= max_env_step`` or ``ctx.train_iter >= max_train_iter``.

    Reads ``ctx.env_step``, ``ctx.train_iter``. Writes ``task.finish`` (the current step still runs
    to its end). Not role-gated: every node stops by its own counters.
    """
    for name, v in (('max_env_step', max_env_step), ('max_train_iter', max_train_iter)):
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
            raise ValueError(f'termination_checker: {name} must be an int >= 0 or None, got {v!r}')

    def _check(ctx: RLContext) -> None:
        # env_step: an OnlineRLContext's (an OfflineRLContext has none: give it max_train_iter only)
        if max_env_step is not None and getattr(ctx, 'env_step') >= max_env_step:
            task.finish = True
        elif max_train_iter is not None and ctx.train_iter >= max_train_iter:
            task.finish = True

    return _check
