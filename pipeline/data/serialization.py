"""Safe (no arbitrary code on load) encoding of buffer contents for ``save_data``/``load_data``.

Everything is turned into plain containers (dict/list/str/numbers/None) and torch tensors, written
with ``torch.save`` and read back with ``torch.load(weights_only=True)``, whose unpickler refuses
any other global. Numpy arrays, numpy scalars, tuples, EasyDicts and dicts with non-string keys are
tagged so that they come back as the same types.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

_TAG = "__rlpipe__"


def encode(x: Any, _where: str = "data") -> Any:
    """Turn ``x`` into something ``torch.load(weights_only=True)`` can read back."""
    if x is None or isinstance(x, (bool, int, float, str)):
        if type(x) not in (type(None), bool, int, float, str):  # e.g. IntEnum / str subclasses
            raise TypeError(f"save_data cannot store {type(x).__name__} in {_where} safely")
        return x
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"save_data cannot store a numpy array of dtype {x.dtype} in {_where} "
                            "safely; use numeric arrays")
        return {_TAG: "ndarray", "v": torch.from_numpy(np.ascontiguousarray(x).copy())}
    if isinstance(x, np.generic):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"save_data cannot store numpy scalar {x!r} in {_where} safely")
        return {_TAG: "npscalar", "v": torch.from_numpy(np.array(x))}
    if type(x).__module__.startswith("treetensor"):
        return {_TAG: "treetensor", "cls": type(x).__module__ + "." + type(x).__name__,
                "v": encode(_tree_to_dict(x), _where)}
    if isinstance(x, Mapping):
        cls = type(x).__name__
        if type(x) is dict and all(type(k) is str for k in x) and _TAG not in x:
            return {k: encode(v, _where) for k, v in x.items()}
        if cls == "EasyDict" and all(type(k) is str for k in x):
            return {_TAG: "easydict", "v": {k: encode(v, _where) for k, v in x.items()}}
        return {_TAG: "dict", "k": [encode(k, _where) for k in x], "v": [encode(v, _where) for v in x.values()]}
    if type(x) is list:
        return [encode(v, _where) for v in x]
    if type(x) is tuple:
        return {_TAG: "tuple", "v": [encode(v, _where) for v in x]}
    raise TypeError(f"save_data cannot store an object of type {type(x).__module__}.{type(x).__name__} "
                    f"in {_where} safely (no pickling of arbitrary objects); store tensors, numpy arrays, "
                    "numbers, strings and dicts/lists/tuples of them")


def _tree_to_dict(t: Any) -> dict:
    out = {}
    for k, v in t.items():
        out[k] = _tree_to_dict(v) if type(v).__module__.startswith("treetensor") and hasattr(v, "items") else v
    return out


def decode(x: Any) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(x, dict):
        tag = x.get(_TAG)
        if tag is None:
            return {k: decode(v) for k, v in x.items()}
        if tag == "ndarray":
            return x["v"].numpy()
        if tag == "npscalar":
            return x["v"].numpy()[()]
        if tag == "tuple":
            return tuple(decode(v) for v in x["v"])
        if tag == "dict":
            return {decode(k): decode(v) for k, v in zip(x["k"], x["v"])}
        if tag == "easydict":
            from easydict import EasyDict

            return EasyDict({k: decode(v) for k, v in x["v"].items()})
        if tag == "treetensor":
            import treetensor.torch as ttorch

            return ttorch.as_tensor(decode(x["v"]))
        raise ValueError(f"unknown tag {tag!r} in saved buffer data (file from a newer version?)")
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x
