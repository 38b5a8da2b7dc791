"""Learner weights and checkpoints: `get_weights`/`set_weights`, `get_state`/`set_state`, and a
directory checkpoint (`save_to_path`/`restore_from_path`) that loads with ``torch.load(weights_only=True)``."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from typing import Any, Dict, Iterable, Optional, Union

import torch

from ..device import host_copy

__all__ = ["LearnerStateMixin", "check_safe"]

_STATE_FILE = "learner_state.pt"
_META_FILE = "learner_meta.json"
_FORMAT_VERSION = 1


class LearnerStateMixin:
    """The weights/state/checkpoint half of :class:`~pipeline.learner.Learner`.

    Uses the learner's ``modules``, ``optimizers``, counters and its
    ``get_extra_state``/``set_extra_state`` hooks.
    """

    def _check_ids(self, ids: Iterable[str], what: str) -> None:
        unknown = [m for m in ids if m not in self.modules]
        if unknown:
            raise ValueError(f"{what} names unknown module ids {unknown}; this learner has {list(self.modules)}")

    def get_weights(self, module_ids: Optional[Iterable[str]] = None, *, copy_tensors: bool = True) -> Dict[str, dict]:
        """module id -> state_dict: copies on the host (CPU) whatever the learner's device, ready to send to
        another process or node, which loads them onto its own device; with ``copy_tensors=False`` the
        modules' own tensors (on the learner's device)."""
        ids = list(self.modules) if module_ids is None else list(module_ids)
        self._check_ids(ids, "get_weights")
        out = {}
        for mid in ids:
            sd = self.modules[mid].state_dict()
            out[mid] = ({k: v.detach().clone() if v.device.type == "cpu" else v.detach().cpu() for k, v in sd.items()}
                        if copy_tensors else dict(sd))
        return out

    def set_weights(self, weights: Mapping, *, weights_seq_no: Optional[int] = None) -> bool:
        """Load module weights (module id -> state_dict; tensors on any device are copied onto the learner's).

        With ``weights_seq_no`` older than this learner's, nothing happens and False is
        returned; otherwise the weights are loaded, the learner takes that sequence number and
        True is returned.
        """
        if not isinstance(weights, Mapping):
            raise TypeError(f"weights must be a mapping module_id -> state_dict, got {type(weights).__name__}")
        self._check_ids(weights, "set_weights")
        if weights_seq_no is not None and weights_seq_no < self.weights_seq_no:
            return False
        for mid, sd in weights.items():
            self.modules[mid].load_state_dict(sd)
        if weights_seq_no is not None:
            self.weights_seq_no = int(weights_seq_no)
        return True

    def get_state(self) -> Dict[str, Any]:
        """A snapshot: weights, optimizer states, counters and :meth:`get_extra_state`, every tensor a copy on
        the host (CPU) whatever the learner's device (:meth:`set_state` loads it onto any device)."""
        on_cpu = self.device.type == "cpu"
        return {
            "modules": self.get_weights(),
            "optimizers": {mid: copy.deepcopy(opt.state_dict()) if on_cpu else host_copy(opt.state_dict())
                           for mid, opt in self.optimizers.items()},
            "counters": {
                "weights_seq_no": self.weights_seq_no,
                "num_minibatch_updates_lifetime": self.num_minibatch_updates_lifetime,
                "num_env_steps_trained_lifetime": self.num_env_steps_trained_lifetime,
                "num_module_steps_trained_lifetime": dict(self.num_module_steps_trained_lifetime),
                "num_skipped_steps_lifetime": dict(self.num_skipped_steps_lifetime),
            },
            "extra": self.get_extra_state() if on_cpu else host_copy(self.get_extra_state()),
        }

    def set_state(self, state: Mapping) -> None:
        """Restore a :meth:`get_state` snapshot (modules missing from it are left as they are); its tensors
        may be on any device (e.g. a checkpoint written on a GPU machine, loaded with ``map_location='cpu'``):
        they are loaded onto the learner's device."""
        if not isinstance(state, Mapping) or "modules" not in state:
            raise ValueError("set_state needs a dict from Learner.get_state() (with 'modules')")
        self._check_ids(state["modules"], "state['modules']")
        self._check_ids(state.get("optimizers", {}), "state['optimizers']")
        for mid, sd in state["modules"].items():
            self.modules[mid].load_state_dict(sd)
        for mid, osd in state.get("optimizers", {}).items():
            self.optimizers[mid].load_state_dict(osd)
        c = state.get("counters", {})
        self.weights_seq_no = int(c.get("weights_seq_no", self.weights_seq_no))
        self.num_minibatch_updates_lifetime = int(c.get("num_minibatch_updates_lifetime", self.num_minibatch_updates_lifetime))
        self.num_env_steps_trained_lifetime = int(c.get("num_env_steps_trained_lifetime", self.num_env_steps_trained_lifetime))
        for mid, v in c.get("num_module_steps_trained_lifetime", {}).items():
            if mid in self.modules:
                self.num_module_steps_trained_lifetime[mid] = int(v)
        for mid, v in c.get("num_skipped_steps_lifetime", {}).items():
            if mid in self.modules:
                self.num_skipped_steps_lifetime[mid] = int(v)
        self.set_extra_state(state.get("extra") or {})

    def save_to_path(self, path: Union[str, os.PathLike]) -> str:
        """Write :meth:`get_state` into directory ``path`` (created); returns the path.

        The state file loads with ``torch.load(weights_only=True)``: only tensors and plain
        containers/numbers/strings are stored (subclass extra state must follow that too).
        """
        path = os.fspath(path)
        state = self.get_state()
        check_safe(state, "state")
        os.makedirs(path, exist_ok=True)
        target = os.path.join(path, _STATE_FILE)
        tmp = target + ".tmp"
        torch.save(state, tmp)
        os.replace(tmp, target)
        meta = {"format_version": _FORMAT_VERSION, "class": type(self).__qualname__, "module_ids": list(self.modules)}
        with open(os.path.join(path, _META_FILE), "w", encoding="utf-8") as f:
            json.dump(meta, f)
        return path

    def restore_from_path(self, path: Union[str, os.PathLike]) -> None:
        """Load a checkpoint written by :meth:`save_to_path` (safe: no arbitrary unpickling)."""
        target = os.path.join(os.fspath(path), _STATE_FILE)
        if not os.path.isfile(target):
            raise FileNotFoundError(f"no learner checkpoint at {target!r} (expected a save_to_path directory)")
        try:
            state = torch.load(target, map_location="cpu", weights_only=True)
        except Exception as exc:  # torch raises UnpicklingError for disallowed globals
            raise ValueError(
                f"{target!r} is not a safe learner checkpoint (only tensors and plain data are loaded): {exc}"
            ) from exc
        self.set_state(state)


_SAFE_SCALARS = (str, int, float, bool, bytes, type(None), torch.dtype, torch.device, torch.Size)


def check_safe(obj: Any, where: str) -> None:
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
