"""The running part of a training script: :func:`run_pipeline` runs the task to its end or to Ctrl-C (then
writes the final checkpoint and prints the command that resumes), :func:`run_script` is the script's
``if __name__ == '__main__':`` part. Imports neither torch nor gymnasium."""
from __future__ import annotations

import shlex
import sys
from typing import Any, Callable, Optional

from ..runtime import task
from .prepare import resume_command

__all__ = ['run_pipeline', 'run_script']


def run_pipeline(ckpt: Any = None, max_step: Optional[int] = None) -> tuple:
    """``task.run(max_step)`` inside ``with task.start(...)``; returns ``(last ctx, interrupted)``.

    A learner (or a node without roles) with a ``CkptSaver`` always ends with ``final.pth.tar`` written, also
    when the finish came from another node between two steps. On Ctrl-C it prints one line instead of a
    traceback; on a learner with a ``CkptSaver`` it writes ``final.pth.tar`` (and the buffer, when the saver has one) and prints the
    exact command that resumes the run."""
    try:
        if max_step is None:
            task.run()
        else:
            task.run(max_step)
        ctx = task.ctx
        # A finish from another node can arrive between two steps: the run then ends without a step whose
        # backward part saw it, and the saver wrote no final checkpoint. Write it here (once).
        if (ckpt is not None and getattr(ckpt, 'save_finish', False) and task.has_role('learner')
                and 'final.pth.tar' not in getattr(ckpt, 'paths', {'final.pth.tar': None})):
            ckpt.save_final(ctx)
        return ctx, False
    except KeyboardInterrupt:
        ctx = task.ctx
        where = f'env step {getattr(ctx, "env_step", "?")}, train iter {getattr(ctx, "train_iter", "?")}'
        if ckpt is not None and task.has_role('learner'):
            path = ckpt.save_final(ctx)
            if task.router is not None and task.router.is_active:  # a node of `rlpipe run`
                how = f'add --resume {shlex.quote(path)} to the same rlpipe run command'
            else:
                how = resume_command(path)
            print(f'\ninterrupted at {where}: saved {path}\nresume with: {how}', flush=True)
        else:
            print(f'\ninterrupted at {where}', flush=True)
        return ctx, True


def run_script(main: Callable[[], object]) -> None:
    """A training script's ``if __name__ == '__main__':`` part: run ``main()`` and exit with its code (an
    int; 0 for anything else). A Ctrl-C that reaches here came before training started (``run_pipeline``
    handles it during training): one line instead of a traceback, exit code 130."""
    try:
        code = main()
    except KeyboardInterrupt:
        print('\ninterrupted before training started; nothing saved')
        sys.exit(130)
    sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)
