"""The torch modules a learner trains, keyed by module id (:class:`ModuleSet`): checked when given, and their
weights read and loaded by id."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Dict, Iterable, Optional, Union

import torch
from torch import nn

__all__ = ["ModuleSet", "move_modules"]


class ModuleSet(Dict[str, nn.Module]):
    """module id -> ``nn.Module`` (a dict, so ``learner.modules[mid]`` reads a module), built from one module
    (id ``default_id``) or a non-empty mapping; every id a string, every value a module."""

    def __init__(self, modules: Union[nn.Module, Mapping[str, nn.Module]], default_id: str) -> None:
        if isinstance(modules, nn.Module):
            modules = {default_id: modules}
        if not isinstance(modules, Mapping) or not modules:
            raise ValueError("modules must be an nn.Module or a non-empty mapping module_id -> nn.Module")
        super().__init__()
        for mid, mod in modules.items():
            if not isinstance(mid, str):
                raise TypeError(f"module ids are strings, got {mid!r}")
            if not isinstance(mod, nn.Module):
                raise TypeError(f"module {mid!r} is a {type(mod).__name__}, not an nn.Module")
            self[mid] = mod

    def check_ids(self, ids: Iterable[str], what: str) -> None:
        """``ValueError`` naming the ids in ``ids`` that are not module ids (``what``: where they came from)."""
        unknown = [m for m in ids if m not in self]
        if unknown:
            raise ValueError(f"{what} names unknown module ids {unknown}; this learner has {list(self)}")

    def weights(self, module_ids: Optional[Iterable[str]] = None, copy_tensors: bool = True) -> Dict[str, dict]:
        """module id -> state_dict: copies on the host (CPU) with ``copy_tensors``, else the modules' own tensors."""
        ids = list(self) if module_ids is None else list(module_ids)
        self.check_ids(ids, "get_weights")
        out = {}
        for mid in ids:
            sd = self[mid].state_dict()
            out[mid] = ({k: v.detach().clone() if v.device.type == "cpu" else v.detach().cpu() for k, v in sd.items()}
                        if copy_tensors else dict(sd))
        return out

    def load(self, weights: Mapping[str, Mapping], what: str) -> None:
        """Load ``weights`` (module id -> state_dict, tensors on any device) into the modules."""
        self.check_ids(weights, what)
        for mid, sd in weights.items():
            self[mid].load_state_dict(sd)


def move_modules(objects: Iterable[object], device: torch.device) -> Dict[int, nn.Parameter]:
    """Move every ``nn.Module`` among ``objects`` (each once) to ``device``; returns id of each old parameter ->
    the parameter after the move (a move may make new ``Parameter`` objects, e.g. to ``'meta'``)."""
    mods: Dict[int, nn.Module] = {}
    for m in objects:
        if isinstance(m, nn.Module):
            mods.setdefault(id(m), m)
    renamed: Dict[int, nn.Parameter] = {}
    for m in mods.values():
        before = list(m.parameters())
        m.to(device)
        renamed.update(zip(map(id, before), m.parameters()))
    return renamed
