"""``RunRecorder``: what a training script reports when its run ends (the examples' result dicts)."""
from __future__ import annotations

import time
from typing import Any, Dict

from ..runtime.roles import for_all_roles

__all__ = ['RunRecorder']


@for_all_roles(reads=['train_output?', 'train_data?'])
class RunRecorder:
    """A middleware that keeps the last step's ``ctx.train_output`` and ``ctx.train_data`` (every step
    gets a new context) and the time it was made; :meth:`summary` turns them and the last context
    into the dict a script returns. Reads ``ctx.train_output``, ``ctx.train_data``; writes nothing.

        recorder = RunRecorder()
        with task.start(ctx=OnlineRLContext()):
            ...
            task.use(recorder)
            ctx, interrupted = run_pipeline(ckpt)
        return recorder.summary(ctx, run.dir, interrupted, buffer_count=buffer_.count(), success_rate=0.9)
    """

    def __init__(self) -> None:
        self.train_output: object = None
        self.train_data: object = None
        self.started = time.time()

    def __call__(self, ctx: Any) -> None:
        self.train_output = ctx.train_output
        self.train_data = ctx.train_data

    def summary(self, ctx: Any, run_dir: object, interrupted: bool, **values: object) -> Dict[str, object]:
        """``values`` followed by the counters of ``ctx`` (``env_step``, ``env_episode``, ``train_iter``),
        the last ``train_output`` / ``train_data``, ``wall_time`` (s since this recorder was made),
        ``run_dir`` and ``interrupted``."""
        return {**values, 'env_step': ctx.env_step, 'env_episode': ctx.env_episode, 'train_iter': ctx.train_iter,
                'train_output': self.train_output, 'train_data': self.train_data,
                'wall_time': time.time() - self.started, 'run_dir': run_dir, 'interrupted': interrupted}
