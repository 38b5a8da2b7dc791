"""Checkpoint files: what a checkpoint holds, writing and reading it safely, and finding a good one.

A checkpoint (``CkptSaver``'s ``final.pth.tar``, ``iteration_<n>.pth.tar``, ``eval.pth.tar``) is
``{'policy': policy.state_dict(), 'counters': {...}, 'extra': {...}}`` (and ``'modules'``) of tensors and plain
values only, so it loads with ``torch.load(path, weights_only=True)``: :func:`save_checkpoint`,
:func:`read_checkpoint` (checked, not applied), :func:`load_checkpoint` (into a policy and a context), the
counters a context keeps across a resume (:data:`COUNTER_KEYS`, :func:`check_counters`, :func:`restore_counters`),
:func:`to_plain` for configs stored with the weights, and, without loading anything, whether a checkpoint and the
replay buffer saved next to it (:func:`buffer_path`) are complete (:func:`checkpoint_problem`) and which is the
newest intact one of a run (:func:`latest_checkpoint`).

Below both the middleware (``middleware.CkptSaver`` writes these files) and the run tooling (``--resume``,
``--play``, ``pipeline.run.agents``) that read them. Importing this module loads neither torch nor gymnasium.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import os
import zipfile
from typing import Any, Dict, Mapping, Optional

from contexts import RLContext

from .device import to_host

__all__ = ['save_checkpoint', 'load_checkpoint', 'read_checkpoint', 'restore_counters', 'check_counters',
           'COUNTER_KEYS', 'MAX_LOADED_PARAMS', 'CheckpointError', 'to_plain', 'buffer_path', 'checkpoint_problem',
           'latest_checkpoint']

log = logging.getLogger(__name__)

#: Context counters saved with every checkpoint (those the context has) and restored on resume.
COUNTER_KEYS = ('train_iter', 'env_step', 'env_episode', 'last_eval_iter', 'last_eval_value',
                'trained_env_step', 'train_epoch')

#: The most parameters the networks rebuilt from a checkpoint's saved config may have unless the caller says
#: more (``max_params=`` of ``agents.*.load`` and ``load_policy``, ``--max-params`` of ``--play``); the
#: examples' largest network, the Atari Nature CNN, has about 1.7 million.
MAX_LOADED_PARAMS = 50_000_000

#: Lowest allowed value of an integer counter (others: 0).
_INT_MIN = {'last_eval_iter': -1}


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint (missing, corrupt, unsafe, or with bad counters)."""


def _plain(v: object) -> object:
    if isinstance(v, float) and not math.isfinite(v):
        return float(v)  # -inf is a plain float: fine for weights_only loading
    return v


def save_checkpoint(path: str, policy: Any, ctx: Optional[RLContext] = None, extra: Optional[Mapping[str, object]] = None,
                    policy_state: Optional[Mapping[str, object]] = None,
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
    import torch  # lazy: importing this module (and middleware) does not load torch

    state = to_host(state)  # the same object when every tensor is on the CPU already
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + '.tmp'
    torch.save(state, tmp)
    os.replace(tmp, path)
    return path


def read_checkpoint(path: str) -> Dict[str, Any]:
    """Load and check a checkpoint file without applying it: ``CheckpointError`` (a ``ValueError``)
    saying what is wrong for a missing, empty, corrupt, unsafe or foreign file."""
    import torch  # lazy: importing this module (and middleware) does not load torch

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


def _kept_fields(ctx: object) -> frozenset:
    return frozenset(getattr(ctx, '_kept_keys', ())) | frozenset(getattr(type(ctx), '_default_kept', ()))


def _field_defaults(ctx: object) -> Dict[str, object]:
    if dataclasses.is_dataclass(ctx):
        return {f.name: f.default for f in dataclasses.fields(ctx) if f.default is not dataclasses.MISSING}
    return {}


def restore_counters(ctx: object, counters: Mapping[str, object], source: str = 'checkpoint') -> None:
    """Set the context's kept fields from ``counters``, after checking all of them
    (:func:`check_counters`)."""
    for k, v in check_counters(ctx, counters, source).items():
        setattr(ctx, k, v)


def check_counters(ctx: object, counters: Mapping[str, Any], source: str = 'checkpoint') -> Dict[str, object]:
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
    values: Dict[str, object] = {}
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


def to_plain(obj: object) -> object:
    """Nested mappings/sequences of plain values (for JSON and for ``weights_only`` checkpoints)."""
    if isinstance(obj, Mapping):
        return {str(k): to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)


def buffer_path(ckpt_path: str) -> str:
    """The replay buffer file ``CkptSaver`` saves next to a checkpoint (``final.pth.tar`` -> ``final.buffer``)."""
    base = ckpt_path[:-len('.pth.tar')] if ckpt_path.endswith('.pth.tar') else ckpt_path
    return base + '.buffer'


def _file_problem(path: str, what: str) -> Optional[str]:
    """Why ``path`` is not a complete file (empty, unreadable, or a zip archive cut short), or None. Checkpoints
    and buffer files are the zip archives ``torch.save`` writes: a truncated one has lost its central directory
    (at the end) or members that end past the end of the file. Only the directory is read, not the data (the
    loader checks the contents); a file in another format is left to the loader."""
    try:
        size = os.path.getsize(path)
        with open(path, 'rb') as f:
            head = f.read(4)
    except OSError as e:
        return f'{what} {path} cannot be read ({e.strerror})'
    if size == 0:
        return f'{what} {path} is empty'
    if head != b'PK\x03\x04':
        return None
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                if info.header_offset + 30 + len(info.filename) + info.compress_size > size:
                    return f'{what} {path} is truncated ({size} bytes; {info.filename} ends past the end)'
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        return f'{what} {path} is truncated or corrupt ({size} bytes, not a complete archive: {e})'
    return None


def checkpoint_problem(path: str, with_buffer: bool = True) -> Optional[str]:
    """Why the checkpoint at ``path`` cannot be resumed from as it stands, or None: the checkpoint file (and,
    ``with_buffer``, the replay buffer file saved next to it, when there is one) is missing, empty or truncated.
    Cheap (reads the archives' directories only); what the files hold is checked when they are loaded."""
    if not os.path.isfile(path):
        return f'no checkpoint at {path}'
    problem = _file_problem(path, 'checkpoint')
    if problem is None and with_buffer and os.path.exists(buffer_path(path)):
        problem = _file_problem(buffer_path(path), 'replay buffer file')
    return problem


def latest_checkpoint(ckpt_dir: str) -> Optional[str]:
    """The newest intact learner checkpoint in ``ckpt_dir`` (``final.pth.tar`` or ``iteration_<n>.pth.tar``, the
    most recently written whose file and buffer file pass :func:`checkpoint_problem`; ``eval.pth.tar`` is the
    evaluator's and is never picked), or None. Newer checkpoints passed over are named in one warning line."""
    if not os.path.isdir(ckpt_dir):
        return None
    found = []
    for name in os.listdir(ckpt_dir):
        it = -1
        if name.startswith('iteration_') and name.endswith('.pth.tar'):
            digits = name[len('iteration_'):-len('.pth.tar')]
            if not digits.isdigit():
                continue
            it = int(digits)
        elif name != 'final.pth.tar':
            continue
        path = os.path.join(ckpt_dir, name)
        try:
            found.append((os.path.getmtime(path), it, path))
        except OSError:  # removed meanwhile
            continue
    skipped = []
    chosen = None
    for _, _, path in sorted(found, reverse=True):
        problem = checkpoint_problem(path)
        if problem is None:
            chosen = path
            break
        skipped.append(problem)
    if skipped:
        log.warning('%s; %s', '; '.join(skipped), f'using the newest intact checkpoint, {chosen}' if chosen else
                    'no intact checkpoint is left')
    return chosen
