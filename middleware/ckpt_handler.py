"""Checkpoints: periodic, best-evaluation and final; safe to load; resume continues counters."""
from __future__ import annotations

import logging
import math
import os
from typing import Any, Dict, Generator, Optional, Union

import torch

from contexts import RLContext
from pipeline.roles import Role, for_roles

__all__ = ['CkptSaver', 'save_checkpoint', 'load_checkpoint', 'COUNTER_KEYS']

log = logging.getLogger(__name__)

#: Context counters saved with every checkpoint and restored on resume.
COUNTER_KEYS = ('train_iter', 'env_step', 'env_episode', 'last_eval_iter', 'last_eval_value')


def _plain(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return float(v)  # -inf is a plain float: fine for weights_only loading
    return v


def save_checkpoint(path: str, policy: Any, ctx: Optional[RLContext] = None, extra: Optional[Dict[str, Any]] = None) -> str:
    """Write ``{'policy': policy.state_dict(), 'counters': {...}, 'extra': {...}}`` atomically.

    Only tensors and plain Python values are stored, so the file loads with
    ``torch.load(path, weights_only=True)``.
    """
    counters = {}
    if ctx is not None:
        for k in COUNTER_KEYS:
            if hasattr(ctx, k):
                counters[k] = _plain(getattr(ctx, k))
    state = {'policy': policy.state_dict(), 'counters': counters, 'extra': dict(extra or {})}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + '.tmp'
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def load_checkpoint(path: str, policy: Any = None, ctx: Optional[RLContext] = None) -> Dict[str, Any]:
    """Load a checkpoint safely (``weights_only=True``); restore ``policy`` and ``ctx`` counters
    when given. Returns the loaded dict. A file with anything but tensors and plain data raises
    ``ValueError`` instead of running code."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f'no checkpoint at {path!r}')
    try:
        state = torch.load(path, map_location='cpu', weights_only=True)
    except Exception as e:  # UnpicklingError for disallowed globals
        raise ValueError(f'{path!r} is not a safe checkpoint (only tensors and plain data load): {e}') from e
    if not isinstance(state, dict) or 'policy' not in state:
        raise ValueError(f'{path!r} is not a CkptSaver checkpoint (no "policy" entry)')
    if policy is not None:
        policy.load_state_dict(state['policy'])
    if ctx is not None:
        for k, v in state.get('counters', {}).items():
            setattr(ctx, k, v)
    return state


@for_roles(Role.LEARNER, reads=["train_iter", "eval_value?", "env_step?"],
           writes=["train_iter", "env_step", "env_episode", "last_eval_iter", "last_eval_value"])
class CkptSaver:
    """Save ``policy`` checkpoints under ``<save_dir>/ckpt/``.

    - ``iteration_<train_iter>.pth.tar`` every ``train_freq`` train iterations (if set);
    - ``eval.pth.tar`` whenever ``ctx.eval_value`` beats the best so far;
    - ``final.pth.tar`` in the backward part of the step where ``task.finish`` is set (so it
      sees a finish set by any later middleware of that step, e.g. ``termination_checker``).

    Each checkpoint holds the policy state (model, target net, optimizer) and the context
    counters (``train_iter``, ``env_step``, ``env_episode``, ``last_eval_*``).
    ``resume_from=<path>`` loads that checkpoint on the first call and sets the counters on the
    context, so a resumed run continues counting (and its eps schedule, eval and save
    frequencies) from there. The replay buffer is not part of the checkpoint (use
    ``buffer.save_data``).

    Reads ``ctx.train_iter``, ``ctx.eval_value``, counters. Writes the counters once on resume;
    ``self.last_path`` / ``self.paths`` say what was written. Role: LEARNER.
    """

    def __init__(self, policy: Any, save_dir: str, train_freq: Optional[int] = None,
                 save_finish: bool = True, resume_from: Optional[str] = None) -> None:
        if train_freq is not None and (not isinstance(train_freq, int) or train_freq < 1):
            raise ValueError(f'train_freq must be a positive int or None, got {train_freq!r}')
        self.policy = policy
        self.dir = os.path.join(save_dir, 'ckpt')
        self.train_freq = train_freq
        self.save_finish = save_finish
        self.resume_from = resume_from
        self.best_eval = -math.inf
        self.last_save_iter: Optional[int] = None
        self.last_path: Optional[str] = None
        self.paths: Dict[str, str] = {}
        self._resumed = resume_from is None

    def _save(self, name: str, ctx: RLContext) -> str:
        path = os.path.join(self.dir, name)
        save_checkpoint(path, self.policy, ctx, {'best_eval': float(self.best_eval)})
        self.last_path = path
        self.paths[name] = path
        return path

    def __call__(self, ctx: RLContext) -> Generator:
        from pipeline import task

        if not self._resumed:
            state = load_checkpoint(self.resume_from, self.policy, ctx)
            self.best_eval = float(state.get('extra', {}).get('best_eval', -math.inf))
            self.last_save_iter = ctx.train_iter
            self._resumed = True
            log.info('resumed from %s at train iter %d, env step %d', self.resume_from, ctx.train_iter,
                     ctx.env_step)
        if self.last_save_iter is None:
            self.last_save_iter = ctx.train_iter
        if self.train_freq and ctx.train_iter - self.last_save_iter >= self.train_freq:
            self._save(f'iteration_{ctx.train_iter}.pth.tar', ctx)
            self.last_save_iter = ctx.train_iter
        ev = getattr(ctx, 'eval_value', None)
        if ev is not None and ev > self.best_eval:
            self.best_eval = float(ev)
            self._save('eval.pth.tar', ctx)
        yield
        if self.save_finish and task.finish:
            self._save('final.pth.tar', ctx)
