"""``CkptSaver``: periodic, best-evaluation and final checkpoints; resume continues counters. The checkpoint
files themselves (writing, safe reading, counters) are :mod:`pipeline.checkpoint`."""
from __future__ import annotations

import logging
import math
import os
from typing import Dict, Generator, Mapping, Optional, Protocol, Tuple, cast

from contexts import RLContext
from pipeline import task
from pipeline.checkpoint import (CheckpointError, buffer_path, load_checkpoint, read_checkpoint, restore_counters,
                                 save_checkpoint, to_plain)
from pipeline.runtime.roles import Role, for_roles

__all__ = ['CkptSaver']

log = logging.getLogger(__name__)


class BufferFiles(Protocol):
    """A replay buffer that :class:`CkptSaver` saves with each checkpoint (``DequeBuffer``)."""

    def save_data(self, path: str) -> None: ...

    def load_data(self, path: str) -> None: ...

    def count(self) -> int: ...


class _LoadsState(Protocol):
    def load_state_dict(self, state: Mapping[str, object], /) -> object: ...


@for_roles(Role.LEARNER, Role.EVALUATOR, reads=["train_iter", "eval_value?", "eval_output?", "env_step?"])
class CkptSaver:
    """Save ``policy`` checkpoints under ``<save_dir>/ckpt/``.

    On a learner (or a node without roles):

    - ``iteration_<train_iter>.pth.tar`` every ``train_freq`` train iterations (if set);
    - ``final.pth.tar`` in the backward part of the step where ``task.finish`` is set (so it
      sees a finish set by any later middleware of that step, e.g. ``termination_checker``), or
      when :meth:`save_final` is called (e.g. on Ctrl-C).

    With ``buffer=`` the replay buffer is saved next to both kinds (``final.buffer``,
    ``iteration_<n>.buffer``; of the periodic ones only the newest is kept) and restored on resume
    from either (also when a restarted learner resumes from its newest checkpoint). The size and
    write time of a buffer file: ``benchmarks/bench_buffer_io.py`` (figures: docs/benchmarks.md).

    On an evaluator (or a node without roles):

    - ``eval.pth.tar`` whenever ``ctx.eval_value`` beats the best so far, including the one already in
      that file (a restarted evaluator, which writes into the same run folder, never replaces a better
      saved evaluation with a worse one). It holds the weights that
      were evaluated (``ctx.eval_output['model_state']``, written by ``interaction_evaluator``;
      the current weights when there is no snapshot) with ``extra['eval_value']`` and
      ``extra['eval_train_iter']``, the train iteration they belong to. In a multi-node run the
      evaluator's node writes it, not the learner, whose weights have moved on.

    Each checkpoint holds the policy state (model; on the learner also target net and optimizer),
    the context counters (``train_iter``, ``env_step``, ``env_episode``, ``last_eval_*``) and
    ``extra['config']`` (``config=``) and ``extra['spaces']`` (``spaces=(observation_space, action_space)``,
    ``Box`` or ``Discrete``) so that :func:`pipeline.policy.load_policy` rebuilds the policy without making
    the env.
    ``modules={'rnd': rnd_model, ...}``: more trained state that is not part of the policy (anything with
    ``state_dict()`` / ``load_state_dict()``, e.g. an RND reward model), saved in every checkpoint and
    restored on resume.
    ``resume_from=<path>`` is checked at once (``CheckpointError`` for a bad file) and loaded into
    the policy; call :meth:`restore` on the first context (the examples do) so counters, eps
    schedule, evaluation and save frequencies continue from there and the run does not start by
    evaluating; otherwise the counters are set on the first call. A checkpoint in this saver's own
    ``ckpt/`` folder (a run that continues itself) also keeps its best evaluation: ``eval.pth.tar`` is
    replaced only by a better one; from elsewhere, ``eval.pth.tar`` holds the best evaluation of this run.

    Reads ``ctx.train_iter``, ``ctx.eval_value``, ``ctx.eval_output``, counters. Writes the counters
    once on resume (not declared as data flow: :meth:`restore` normally sets them before the first
    step); ``self.last_path`` / ``self.paths`` say what was written. Roles: LEARNER, EVALUATOR.
    """

    def __init__(self, policy: object, save_dir: str, train_freq: Optional[int] = None,
                 save_finish: bool = True, resume_from: Optional[str] = None, buffer: Optional[BufferFiles] = None,
                 config: Optional[Mapping[str, object]] = None, policy_type: Optional[str] = None,
                 modules: Optional[Mapping[str, object]] = None, spaces: Optional[Tuple[object, object]] = None) -> None:
        if train_freq is not None and (not isinstance(train_freq, int) or train_freq < 1):
            raise ValueError(f'train_freq must be a positive int or None, got {train_freq!r}')
        self.policy = policy
        self.dir = os.path.join(save_dir, 'ckpt')
        self.train_freq = train_freq
        self.save_finish = save_finish
        self.resume_from = resume_from
        self.buffer = buffer
        self.modules = dict(modules or {})
        for name, m in self.modules.items():
            if not (hasattr(m, 'state_dict') and hasattr(m, 'load_state_dict')):
                raise TypeError(f'CkptSaver: modules[{name!r}] needs state_dict() and load_state_dict(), '
                                f'got {type(m).__name__}')
        self.extra_static: Dict[str, object] = {}
        if config is not None:
            self.extra_static['config'] = to_plain(config)
        if policy_type is not None:
            self.extra_static['policy_type'] = policy_type
        if spaces is not None:
            from pipeline.envs.saved_spaces import spaces_to_plain  # lazy: loads gymnasium and torch

            self.extra_static['spaces'] = spaces_to_plain(*spaces)
        self.best_eval = -math.inf
        self.last_save_iter: Optional[int] = None
        self.last_path: Optional[str] = None
        self.paths: Dict[str, str] = {}
        self._counters: Optional[Dict[str, object]] = None
        if resume_from is not None:
            state = load_checkpoint(resume_from, policy)
            self._counters = dict(state.get('counters', {}))
            extra = state.get('extra', {})
            if os.path.dirname(os.path.abspath(resume_from)) == os.path.abspath(self.dir):
                self.best_eval = float(extra.get('best_eval', -math.inf))
            else:  # a checkpoint from elsewhere: eval.pth.tar here holds the best evaluation of this folder's run
                log.info('%s is not in %s: the best evaluation saved here is this run\'s', resume_from, self.dir)
            self._resume_modules(resume_from, state.get('modules', {}))
            self._resume_buffer(resume_from)

    def _resume_modules(self, path: str, saved: object) -> None:
        for name, m in self.modules.items():
            if not isinstance(saved, Mapping) or name not in saved:
                log.warning('%s holds no state for %r: it starts afresh', path, name)
                continue
            try:
                cast(_LoadsState, m).load_state_dict(saved[name])  # checked in __init__
            except (KeyError, RuntimeError, ValueError, TypeError) as e:
                raise CheckpointError(f'{path!r}: the saved {name!r} does not fit ({type(e).__name__}: '
                                      f'{str(e).splitlines()[0][:300]})') from None

    def _resume_buffer(self, path: str) -> None:
        bpath = buffer_path(path)
        if self.buffer is None:
            return
        if not os.path.isfile(bpath):
            log.warning('no replay buffer saved with %s (%s is missing): the buffer starts empty', path, bpath)
            return
        try:
            self.buffer.load_data(bpath)
        except ValueError as e:  # truncated, corrupt, foreign: one line, not a traceback
            raise CheckpointError(f'the replay buffer saved with {path!r} does not load: {e}') from None
        log.info('replay buffer restored from %s (%d items)', bpath, self.buffer.count())

    def restore(self, ctx: RLContext) -> RLContext:
        """Set the resumed checkpoint's counters on ``ctx`` (checked); returns ``ctx``. No-op
        without ``resume_from`` or when already applied."""
        if self._counters is not None:
            restore_counters(ctx, self._counters, source=repr(self.resume_from))
            self.last_save_iter = ctx.train_iter
            log.info('resumed from %s at train iter %d, env step %d', self.resume_from, ctx.train_iter,
                     getattr(ctx, 'env_step', 0))
            self._counters = None
        return ctx

    def _best_on_disk(self) -> float:
        """The eval value of the ``eval.pth.tar`` already in this run folder (-inf when there is none or it
        is unreadable). A restarted evaluator writes into the same folder: it must not replace a better
        evaluation that its earlier incarnation (or another evaluator) saved."""
        path = os.path.join(self.dir, 'eval.pth.tar')
        if not os.path.isfile(path):
            return -math.inf
        try:
            extra = read_checkpoint(path).get('extra', {})
            v = float(extra.get('eval_value', -math.inf)) if isinstance(extra, Mapping) else -math.inf
        except (OSError, CheckpointError, TypeError, ValueError) as e:
            log.warning('%s is unreadable (%s): the next better evaluation replaces it', path, e)
            return -math.inf
        if v > self.best_eval:
            log.info('%s holds a better evaluation (%.4g) than this evaluator has seen: kept until one beats it',
                     path, v)
            self.best_eval = v
        return v

    def _extra(self, **kw: object) -> Dict[str, object]:
        d = dict(self.extra_static)
        d['best_eval'] = float(self.best_eval)
        d.update(kw)
        return d

    def _save(self, name: str, ctx: RLContext, policy_state: Optional[Mapping[str, object]] = None,
              **extra: object) -> str:
        path = os.path.join(self.dir, name)
        save_checkpoint(path, self.policy, ctx, self._extra(**extra), policy_state=policy_state,
                        modules=self.modules)
        self.last_path = path
        self.paths[name] = path
        return path

    def save_final(self, ctx: RLContext) -> str:
        """Write ``final.pth.tar`` now (and the buffer, when given); returns its path."""
        return self._save_with_buffer('final.pth.tar', ctx)

    def _save_with_buffer(self, name: str, ctx: RLContext) -> str:
        """The buffer first (``<name>.buffer``, atomically), then the checkpoint: a checkpoint on disk always
        has its buffer next to it. Of the periodic buffers only the newest is kept."""
        if self.buffer is not None:
            bpath = buffer_path(os.path.join(self.dir, name))
            os.makedirs(self.dir, exist_ok=True)
            self.buffer.save_data(bpath + '.tmp')
            os.replace(bpath + '.tmp', bpath)
        path = self._save(name, ctx)
        if self.buffer is not None and name.startswith('iteration_'):
            keep = os.path.basename(buffer_path(path))
            for f in os.listdir(self.dir):
                if f.startswith('iteration_') and f.endswith('.buffer') and f != keep:
                    try:
                        os.remove(os.path.join(self.dir, f))
                    except OSError:  # removed meanwhile
                        pass
        return path

    def __call__(self, ctx: RLContext) -> Generator:
        self.restore(ctx)
        learner = task.has_role(Role.LEARNER)
        if self.last_save_iter is None:
            self.last_save_iter = ctx.train_iter
        if learner and self.train_freq and ctx.train_iter - self.last_save_iter >= self.train_freq:
            self._save_with_buffer(f'iteration_{ctx.train_iter}.pth.tar', ctx)
            self.last_save_iter = ctx.train_iter
        ev = getattr(ctx, 'eval_value', None)
        if task.has_role(Role.EVALUATOR) and ev is not None and ev > self.best_eval and ev > self._best_on_disk():
            eo = getattr(ctx, 'eval_output', None)
            snap = eo.get('model_state') if isinstance(eo, Mapping) else None
            it = eo.get('train_iter', ctx.train_iter) if isinstance(eo, Mapping) else ctx.train_iter
            self.best_eval = float(ev)
            state = {'model': snap} if snap is not None else None
            self._save('eval.pth.tar', ctx, policy_state=state, eval_value=float(ev), eval_train_iter=int(it))
        yield
        if learner and self.save_finish and task.finish:
            self.save_final(ctx)

