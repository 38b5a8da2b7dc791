"""Checkpoints: periodic, best-evaluation and final; safe to load; resume continues counters."""
from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Any, Dict, Generator, Mapping, Optional

from contexts import RLContext
from pipeline.roles import Role, for_roles

__all__ = ['CkptSaver', 'save_checkpoint', 'load_checkpoint', 'read_checkpoint', 'restore_counters',
           'check_counters', 'COUNTER_KEYS', 'CheckpointError']

log = logging.getLogger(__name__)

#: Context counters saved with every checkpoint (those the context has) and restored on resume.
COUNTER_KEYS = ('train_iter', 'env_step', 'env_episode', 'last_eval_iter', 'last_eval_value',
                'trained_env_step', 'train_epoch')

#: Lowest allowed value of an integer counter (others: 0).
_INT_MIN = {'last_eval_iter': -1}


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint (missing, corrupt, unsafe, or with bad counters)."""


def _plain(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return float(v)  # -inf is a plain float: fine for weights_only loading
    return v


def save_checkpoint(path: str, policy: Any, ctx: Optional[RLContext] = None, extra: Optional[Dict[str, Any]] = None,
                    policy_state: Optional[Mapping[str, Any]] = None,
                    modules: Optional[Mapping[str, Any]] = None) -> str:
    """Write ``{'policy': policy.state_dict(), 'counters': {...}, 'extra': {...}}`` atomically.

    ``policy_state`` replaces ``policy.state_dict()`` (e.g. the weights an evaluator evaluated).
    ``modules`` (name -> object with ``state_dict()``, e.g. an RND reward model) are saved under
    ``'modules'``.
    Only tensors and plain Python values are stored, so the file loads with
    ``torch.load(path, weights_only=True)``; tensors are written from the host (a policy trained on a GPU
    saves CPU tensors), so the file loads on any machine, and :func:`load_checkpoint` puts the weights on
    the policy's device.
    """
    counters = {}
    if ctx is not None:
        kept = _kept_fields(ctx)
        for k in COUNTER_KEYS:
            if (k in kept or not kept) and hasattr(ctx, k):
                counters[k] = _plain(getattr(ctx, k))
    state = {'policy': dict(policy_state) if policy_state is not None else policy.state_dict(),
             'counters': counters, 'extra': dict(extra or {})}
    if modules:
        state['modules'] = {name: m.state_dict() for name, m in modules.items()}
    import torch  # here, so that importing middleware does not load torch

    from pipeline.device import to_host

    state = to_host(state)  # the same object when every tensor is on the CPU already
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + '.tmp'
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def read_checkpoint(path: str) -> Dict[str, Any]:
    """Load and check a checkpoint file without applying it: ``CheckpointError`` (a ``ValueError``)
    saying what is wrong for a missing, empty, corrupt, unsafe or foreign file."""
    import torch

    if not os.path.isfile(path):
        raise FileNotFoundError(f'no checkpoint at {path!r}')
    try:
        state = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:
        text = str(e)
        glob = next((ln.strip() for ln in text.splitlines() if 'GLOBAL' in ln or 'Unsupported global' in ln), None)
        if glob is not None:  # the pickle names a Python object: refused, never loaded
            raise CheckpointError(f'{path!r} is not a safe checkpoint: it holds Python objects other than tensors '
                                  f'and plain data, and such files are never loaded ({glob})') from None
        raise CheckpointError(f'{path!r} is not a checkpoint file: it is corrupt, truncated or in another '
                              f'format ({type(e).__name__})') from None
    if not isinstance(state, dict) or 'policy' not in state:
        keys = list(state)[:8] if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f'{path!r} is not a CkptSaver checkpoint (no "policy" entry; found {keys})')
    if not isinstance(state.get('counters', {}), dict):
        raise CheckpointError(f'{path!r}: "counters" must be a dict, got {type(state["counters"]).__name__}')
    return state


def _kept_fields(ctx: Any) -> frozenset:
    return frozenset(getattr(ctx, '_kept_keys', ())) | frozenset(getattr(type(ctx), '_default_kept', ()))


def _field_defaults(ctx: Any) -> Dict[str, Any]:
    if dataclasses.is_dataclass(ctx):
        return {f.name: f.default for f in dataclasses.fields(ctx) if f.default is not dataclasses.MISSING}
    return {}


def restore_counters(ctx: Any, counters: Mapping[str, Any], source: str = 'checkpoint') -> None:
    """Set the context's kept fields from ``counters``, after checking all of them
    (:func:`check_counters`)."""
    for k, v in check_counters(ctx, counters, source).items():
        setattr(ctx, k, v)


def check_counters(ctx: Any, counters: Mapping[str, Any], source: str = 'checkpoint') -> Dict[str, Any]:
    """The checked counters that may be set on ``ctx`` (nothing is set here).

    Only fields the context keeps across steps load (``OnlineRLContext``: ``env_step``,
    ``env_episode``, ``train_iter``, ``last_eval_iter``, ``last_eval_value``, plus any
    ``ctx.keep(...)`` key); an int field needs an int (not a bool) >= 0 (``last_eval_iter`` >= -1),
    a float field a number that is not NaN. Every problem is reported at once in a
    ``CheckpointError`` naming the keys; nothing is set unless all pass.
    """
    kept = _kept_fields(ctx)
    defaults = _field_defaults(ctx)
    errors = []
    values: Dict[str, Any] = {}
    for k, v in (counters.items() if isinstance(counters, Mapping) else ()):
        if k not in kept:
            errors.append(f'unknown counter {k!r} (this {type(ctx).__name__} keeps: {", ".join(sorted(kept))})')
            continue
        d = defaults.get(k, getattr(ctx, k, None))
        if isinstance(d, bool):
            ok = isinstance(v, bool)
        elif isinstance(d, int):
            ok = isinstance(v, int) and not isinstance(v, bool) and v >= _INT_MIN.get(k, 0)
            if not ok:
                errors.append(f'{k} must be an int >= {_INT_MIN.get(k, 0)}, got {v!r}')
                continue
        elif isinstance(d, float):
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
            if not ok:
                errors.append(f'{k} must be a number (not NaN), got {v!r}')
                continue
            v = float(v)
        else:
            ok = True
        if not ok:
            errors.append(f'{k}: wrong type {type(v).__name__}')
            continue
        values[k] = v
    if not isinstance(counters, Mapping):
        errors.append(f'counters must be a dict, got {type(counters).__name__}')
    if errors:
        raise CheckpointError(f'{source}: bad counters: ' + '; '.join(errors))
    return values


def load_checkpoint(path: str, policy: Any = None, ctx: Optional[RLContext] = None) -> Dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``, ``map_location='cpu'``: a file written on a GPU
    machine loads on a CPU-only one); restore ``policy`` (onto its device) and the ``ctx``
    counters (checked: see :func:`restore_counters`) when given. Returns the loaded dict. A file
    with anything but tensors and plain data raises ``CheckpointError`` (a ``ValueError``) instead
    of running code."""
    state = read_checkpoint(path)
    counters = check_counters(ctx, state.get('counters', {}), repr(path)) if ctx is not None else {}
    if policy is not None:
        try:
            policy.load_state_dict(state['policy'])
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise CheckpointError(f'{path!r} does not fit this policy ({type(e).__name__}: '
                                  f'{str(e).splitlines()[0][:300]})') from None
    for k, v in counters.items():
        setattr(ctx, k, v)
    return state


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
    ``extra['config']`` (``config=``) so that :func:`pipeline.policy.load_policy` rebuilds the policy.
    ``modules={'rnd': rnd_model, ...}``: more trained state that is not part of the policy (anything with
    ``state_dict()`` / ``load_state_dict()``, e.g. an RND reward model), saved in every checkpoint and
    restored on resume.
    ``resume_from=<path>`` is checked at once (``CheckpointError`` for a bad file) and loaded into
    the policy; call :meth:`restore` on the first context (the examples do) so counters, eps
    schedule, evaluation and save frequencies continue from there and the run does not start by
    evaluating; otherwise the counters are set on the first call.

    Reads ``ctx.train_iter``, ``ctx.eval_value``, ``ctx.eval_output``, counters. Writes the counters
    once on resume (not declared as data flow: :meth:`restore` normally sets them before the first
    step); ``self.last_path`` / ``self.paths`` say what was written. Roles: LEARNER, EVALUATOR.
    """

    def __init__(self, policy: Any, save_dir: str, train_freq: Optional[int] = None,
                 save_finish: bool = True, resume_from: Optional[str] = None, buffer: Any = None,
                 config: Optional[Mapping[str, Any]] = None, policy_type: Optional[str] = None,
                 modules: Optional[Mapping[str, Any]] = None) -> None:
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
        self.extra_static: Dict[str, Any] = {}
        if config is not None:
            from pipeline.experiment import to_plain
            self.extra_static['config'] = to_plain(config)
        if policy_type is not None:
            self.extra_static['policy_type'] = policy_type
        self.best_eval = -math.inf
        self.last_save_iter: Optional[int] = None
        self.last_path: Optional[str] = None
        self.paths: Dict[str, str] = {}
        self._counters: Optional[Dict[str, Any]] = None
        if resume_from is not None:
            state = load_checkpoint(resume_from, policy)
            self._counters = dict(state.get('counters', {}))
            extra = state.get('extra', {})
            self.best_eval = float(extra.get('best_eval', -math.inf))
            self._resume_modules(resume_from, state.get('modules', {}))
            self._resume_buffer(resume_from)

    def _resume_modules(self, path: str, saved: Any) -> None:
        for name, m in self.modules.items():
            if not isinstance(saved, Mapping) or name not in saved:
                log.warning('%s holds no state for %r: it starts afresh', path, name)
                continue
            try:
                m.load_state_dict(saved[name])
            except (KeyError, RuntimeError, ValueError, TypeError) as e:
                raise CheckpointError(f'{path!r}: the saved {name!r} does not fit ({type(e).__name__}: '
                                      f'{str(e).splitlines()[0][:300]})') from None

    def _resume_buffer(self, path: str) -> None:
        bpath = _buffer_path(path)
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

    def restore(self, ctx: Any) -> Any:
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

    def _extra(self, **kw: Any) -> Dict[str, Any]:
        d = dict(self.extra_static)
        d['best_eval'] = float(self.best_eval)
        d.update(kw)
        return d

    def _save(self, name: str, ctx: Any, policy_state: Optional[Mapping[str, Any]] = None,
              **extra: Any) -> str:
        path = os.path.join(self.dir, name)
        save_checkpoint(path, self.policy, ctx, self._extra(**extra), policy_state=policy_state,
                        modules=self.modules)
        self.last_path = path
        self.paths[name] = path
        return path

    def save_final(self, ctx: Any) -> str:
        """Write ``final.pth.tar`` now (and the buffer, when given); returns its path."""
        return self._save_with_buffer('final.pth.tar', ctx)

    def _save_with_buffer(self, name: str, ctx: Any) -> str:
        """The buffer first (``<name>.buffer``, atomically), then the checkpoint: a checkpoint on disk always
        has its buffer next to it. Of the periodic buffers only the newest is kept."""
        if self.buffer is not None:
            bpath = _buffer_path(os.path.join(self.dir, name))
            os.makedirs(self.dir, exist_ok=True)
            self.buffer.save_data(bpath + '.tmp')
            os.replace(bpath + '.tmp', bpath)
        path = self._save(name, ctx)
        if self.buffer is not None and name.startswith('iteration_'):
            keep = os.path.basename(_buffer_path(path))
            for f in os.listdir(self.dir):
                if f.startswith('iteration_') and f.endswith('.buffer') and f != keep:
                    try:
                        os.remove(os.path.join(self.dir, f))
                    except OSError:  # removed meanwhile
                        pass
        return path

    def __call__(self, ctx: RLContext) -> Generator:
        from pipeline import task

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


def _buffer_path(ckpt_path: str) -> str:
    base = ckpt_path[:-len('.pth.tar')] if ckpt_path.endswith('.pth.tar') else ckpt_path
    return base + '.buffer'
