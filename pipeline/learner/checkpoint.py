"""A learner's directory checkpoint (``Learner.save_to_path`` / ``restore_from_path``): the state file, which
loads with ``torch.load(weights_only=True)``, and what may go in it (:func:`check_safe`)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Dict, Union

import torch


__all__ = ["save_state_dir", "load_state_dir", "check_safe"]

_STATE_FILE = "learner_state.pt"
_META_FILE = "learner_meta.json"
_FORMAT_VERSION = 1


def save_state_dir(path: Union[str, os.PathLike], state: Mapping, meta: Mapping[str, object]) -> str:
    """Write a learner's ``state`` (``Learner.get_state``) into directory ``path`` (created) as a file that
    loads with ``torch.load(weights_only=True)``, and ``meta`` (plus the format version) beside it as JSON;
    returns the path. ``TypeError`` for state that such a file cannot hold (:func:`check_safe`)."""
    path = os.fspath(path)
    check_safe(state, "state")
    os.makedirs(path, exist_ok=True)
    target = os.path.join(path, _STATE_FILE)
    tmp = target + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, target)
    with open(os.path.join(path, _META_FILE), "w", encoding="utf-8") as f:
        json.dump({"format_version": _FORMAT_VERSION, **meta}, f)
    return path


def load_state_dir(path: Union[str, os.PathLike]) -> Dict[str, object]:
    """The state :func:`save_state_dir` wrote into ``path`` (safe: no arbitrary unpickling)."""
    target = os.path.join(os.fspath(path), _STATE_FILE)
    if not os.path.isfile(target):
        raise FileNotFoundError(f"no learner checkpoint at {target!r} (expected a save_to_path directory)")
    try:
        return torch.load(target, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises UnpicklingError for disallowed globals
        raise ValueError(
            f"{target!r} is not a safe learner checkpoint (only tensors and plain data are loaded): {exc}"
        ) from exc


_SAFE_SCALARS = (str, int, float, bool, bytes, type(None), torch.dtype, torch.device, torch.Size)


def check_safe(obj: object, where: str) -> None:
    """Raise TypeError unless ``obj`` only holds what torch.load(weights_only=True) accepts."""
    if isinstance(obj, (torch.Tensor,) + _SAFE_SCALARS):
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not isinstance(k, _SAFE_SCALARS):
                raise TypeError(f"{where} has a key of type {type(k).__name__}; checkpoints hold plain keys only")
            check_safe(v, f"{where}[{k!r}]")
        return
    if isinstance(obj, (list, tuple, set, frozenset)):
        for i, v in enumerate(obj):
            check_safe(v, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(obj).__name__}: checkpoints hold only tensors, numbers, strings and "
        "lists/tuples/dicts of them (so they load with torch.load(weights_only=True)); "
        "convert it in get_extra_state"
    )
