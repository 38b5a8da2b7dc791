"""Safe (no arbitrary code on load) encoding of buffer contents for ``save_data``/``load_data``.

Files are columnar (format version 2: :mod:`.columnar_io` stacks each field of all items into one
tensor; a frame storage's frames once, :mod:`.frame_file`); files of version 1 (one encoded object
per item) still load. Per value, everything is turned into plain containers (dict/list/str/numbers/
None) and torch tensors, written with ``torch.save`` and read back with
``torch.load(weights_only=True)``, whose unpickler refuses any other global. Numpy arrays, numpy scalars, tuples, EasyDicts and dicts with non-string keys are
tagged so that they come back as the same types.
"""
from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Callable, ContextManager, Dict, Optional, Protocol, Sequence, cast

import numpy as np
import torch
from easydict import EasyDict

from .columnar_io import decode_rows, encode_rows
from .frame_file import frame_rows, frames_node, packed_rows
from .frame_storage import FrameStorage, _Packed
from .item import peek_data
from .sampler import Sampler, UniformSampler
from .storage import SlotStorage
from .writer import FifoWriter, Writer

if TYPE_CHECKING:
    from treevalue import TreeValue


class Stateful(Protocol):
    """A part of a buffer whose state ``save_data`` saves: middleware, a sampler or a writer with ``state_dict``."""

    def state_dict(self) -> Mapping[str, object]: ...

    def load_state_dict(self, state: Dict[str, object]) -> None: ...

_TAG = "__rlpipe__"
FORMAT = "rlpipe.DequeBuffer"
VERSION = 2  # 2: one column per field (columnar_io); 1: one encoded object per item (still read)


def encode(x: object, _where: str = "data") -> object:
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


def _tree_to_dict(t: TreeValue) -> dict:
    out = {}
    for k, v in t.items():
        out[k] = _tree_to_dict(v) if type(v).__module__.startswith("treetensor") and hasattr(v, "items") else v
    return out


def decode(x: object) -> object:
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

            return EasyDict({k: decode(v) for k, v in x["v"].items()})
        if tag == "treetensor":
            import treetensor.torch as ttorch  # lazy: treetensor is slow to import

            return ttorch.as_tensor(decode(x["v"]))
        raise ValueError(f"unknown tag {tag!r} in saved buffer data (file from a newer version?)")
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x


def storage_payload(s: "SlotStorage") -> dict:
    """Everything ``DequeBuffer.save_data`` writes (the caller holds ``s.lock``): format version 2, one
    column per field (:mod:`.columnar_io`) instead of one encoded object per item."""
    if s.syncers:
        s.sync(s.ordered_slots().copy())
    order = s.ordered_slots().tolist()
    items = [s.items[k] for k in order]
    return {
        "format": FORMAT,
        "version": VERSION,
        "size": s.size,
        "next_id": s.next_id,
        "count": len(items),
        "ids": torch.tensor([it.index for it in items], dtype=torch.int64),
        "data": _data_column(s, items),
        "meta": encode_rows([it.meta for it in items], encode, "meta"),
    }


def _data_column(s: "SlotStorage", items: list) -> dict:
    node = None
    if isinstance(s, FrameStorage):  # every frame once (frame_file)
        node = frames_node(s, items, encode)
    return node if node is not None else encode_rows([peek_data(it) for it in items], encode, "data")


def _read(path: str, where: str) -> dict:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - UnpicklingError, RuntimeError, ...
        raise ValueError(f"{where}: not a buffer file saved by save_data, or it contains "
                         f"objects that are not allowed to load ({type(e).__name__}: {e})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ValueError(f"{where}: not a buffer file saved by DequeBuffer.save_data")
    version = payload.get("version")
    if version not in (1, VERSION):
        raise ValueError(f"{where}: buffer file format version {version!r}, but this rlpipe reads versions 1 "
                         f"and {VERSION} (saved by a newer rlpipe? upgrade it to load this file)")
    missing = [k for k in ("ids", "data", "meta", "next_id") + (("count",) if version == VERSION else ())
               if k not in payload]
    if missing:
        raise ValueError(f"{where}: corrupt buffer file, missing {', '.join(map(repr, missing))}; "
                         "the buffer was not changed")
    return payload


def _items_v1(payload: dict, where: str, keep: int, new: SlotStorage) -> tuple:
    """(all ids, [(data, meta)] of the newest ``keep``) of a version-1 file (one object per item)."""
    ids, datas, metas = payload["ids"], payload["data"], payload["meta"]
    if not all(isinstance(x, list) for x in (ids, datas, metas)):
        raise ValueError(f"{where}: corrupt buffer file ('ids', 'data' and 'meta' must be lists)")
    if not (len(ids) == len(datas) == len(metas)):
        raise ValueError(f"{where}: corrupt file (lengths differ: {len(ids)} ids, {len(datas)} data, "
                         f"{len(metas)} meta)")
    if not all(type(i) is int and i >= 0 for i in ids):
        raise ValueError(f"{where}: corrupt file (ids must be integers >= 0)")
    start = max(0, len(ids) - keep)
    try:
        items = [(decode(datas[i]), decode(metas[i])) for i in range(start, len(ids))]
    except Exception as e:  # noqa: BLE001 - whatever a damaged entry raises
        raise ValueError(f"{where}: corrupt file, an item does not decode ({type(e).__name__}: {e}); "
                         "the buffer was not changed") from None
    return ids, items


def _items_v2(payload: dict, where: str, keep: int, new: SlotStorage) -> tuple:
    """(all ids, [(data, meta)] of the newest ``keep``) of a version-2 (columnar) file."""
    ids, n = payload["ids"], payload["count"]
    if type(n) is not int or n < 0:
        raise ValueError(f"{where}: corrupt file ('count' must be an integer >= 0)")
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64 or ids.shape != (n,):
        raise ValueError(f"{where}: corrupt file (ids must be {n} int64 values)")
    ids = ids.tolist()
    if any(i < 0 for i in ids):
        raise ValueError(f"{where}: corrupt file (ids must be integers >= 0)")
    start = max(0, n - keep)
    node = payload["data"]
    try:
        metas = decode_rows(payload["meta"], n, decode)[start:]
        if isinstance(node, dict) and node.get("kind") == "frames":

            if hasattr(new, "push_packed"):  # into a FrameStorage: its pool straight from the file's frames
                return ids, list(zip(packed_rows(cast(FrameStorage, new), node, n, start, decode), metas))
            return ids, list(zip(frame_rows(node, n, decode)[start:], metas))
        datas = decode_rows(node, n, decode)[start:]
    except Exception as e:  # noqa: BLE001 - whatever a damaged column raises
        raise ValueError(f"{where}: corrupt file, an item does not decode ({type(e).__name__}: {e}); "
                         "the buffer was not changed") from None
    return ids, list(zip(datas, metas))


def load_into_storage(s: "SlotStorage", path: str, lock: ContextManager[object]) -> dict:
    """Replace the contents of ``s`` with the file ``DequeBuffer.save_data`` wrote (format version 2, or
    version 1 from rlpipe before columnar files).

    The whole file is checked and decoded into a new storage first; only then are its contents
    swapped into ``s`` (so a bad file leaves the buffer as it was). Raises ``ValueError`` naming
    what is wrong: not a buffer file, a newer format, missing keys, ids that are not integers >= 0 or
    not strictly increasing (duplicates), lengths that differ, data that does not decode. Returns the
    saved states of the buffer's middleware (``{}`` when the file has none).
    """

    where = f"load_data({path!r})"
    payload = _read(path, where)
    next_id = payload["next_id"]
    if not (type(next_id) is int and next_id >= 0):
        raise ValueError(f"{where}: corrupt file (ids and next_id must be integers >= 0)")
    new = s.fresh() if hasattr(s, "fresh") else SlotStorage(s.size, s.columnar, 0)
    read = _items_v1 if payload["version"] == 1 else _items_v2
    ids, items = read(payload, where, s.size, new)
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise ValueError(f"{where}: corrupt file (ids not strictly increasing: duplicate or out-of-order ids)")
    ids = ids[len(ids) - len(items):]
    for _, meta in items:
        if meta is not None and not isinstance(meta, Mapping):
            raise ValueError(f"{where}: corrupt file (an item's meta is a {type(meta).__name__}, not a dict)")
    push = new.push
    if items and hasattr(new, "push_packed"):

        if isinstance(items[0][0], _Packed):
            push = new.push_packed  # records packed by frame_file.packed_rows
    for i, (data, meta) in zip(ids, items):
        new.next_id = i  # push assigns exactly the saved index
        push(data, meta)
    new.next_id = max(next_id, ids[-1] + 1 if ids else 0)
    states = payload.get("middleware", {})
    if not isinstance(states, dict):
        raise ValueError(f"{where}: corrupt file ('middleware' must be a dict)")
    with lock:
        s.adopt(new)
        for listener in s.listeners:
            listener.on_clear()
            listener.on_load()
    return states


def stateful_parts(middleware: Sequence[Callable[..., object]], sampler: Sampler,
                   writer: Optional[Writer] = None) -> Dict[str, Stateful]:
    """What ``save_data`` saves the state of: middleware with ``state_dict``/``load_state_dict`` at their place in
    the chain (``"<i>:<class>"``), the sampler (``"sampler:<class>"``; a uniform sampler has no state) and the
    writer (``"writer:<class>"``; the FIFO writer has no state)."""
    out: Dict[str, Stateful] = {f"{i}:{type(mw).__name__}": cast(Stateful, mw) for i, mw in enumerate(middleware)
                           if hasattr(mw, "state_dict") and hasattr(mw, "load_state_dict")}
    if type(sampler) is not UniformSampler:
        out[f"sampler:{type(sampler).__name__}"] = sampler
    if writer is not None and type(writer) is not FifoWriter:
        out[f"writer:{type(writer).__name__}"] = writer
    return out


def restore_states(states: Dict[str, object], parts: Dict[str, Stateful], path: str, wants_priorities: bool) -> None:
    """``load_data``: give each of ``parts`` (:func:`stateful_parts`) its state saved in ``path``, if any; a
    ``UserWarning`` when a prioritized buffer's file holds the state of the removed ``PriorityExperienceReplay``
    middleware instead of a sampler's."""
    for key, obj in parts.items():
        state = states.get(key)
        if state is not None:
            try:
                obj.load_state_dict(cast(Dict[str, object], state))  # checked by the part itself
            except (KeyError, TypeError, ValueError) as e:
                raise ValueError(f"load_data({path!r}): the saved state of {key} does not fit "
                                 f"({type(e).__name__}: {e}); the items were loaded") from None
    if wants_priorities and not any(k.startswith("sampler:") for k in states):
        old = [k for k in states if k.endswith(":PriorityExperienceReplay")]
        if old:
            warnings.warn(f"load_data({path!r}): the items and their meta['priority'] were loaded, not the "
                          f"state of the removed {old[0]} middleware (max_priority, IS-weight annealing "
                          "count): they start again", UserWarning, stacklevel=3)
