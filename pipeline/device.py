"""Where the networks, batches and optimizer states live: the ``device`` setting and the moves.

One setting, ``policy.device`` (the examples' ``--device``), says where a policy trains:

- ``'auto'`` (default): the GPU when ``torch.cuda.is_available()``, else the CPU; inside a Ray actor,
  the GPU Ray assigned to it (``ray.get_gpu_ids()``), else the CPU;
- ``'cpu'``, ``'cuda'`` (the current CUDA device) or ``'cuda:N'``.

``policy.acting_device`` (``--acting-device``) is where the networks of a node of a multi-node run that
does not learn (collectors, evaluators) live; unset, such a node acts on the CPU. A node that learns
(and a single process) acts with the learner's networks, on ``policy.device``.

Moves: :func:`to_device` moves every tensor of a (nested) batch once (pinned host memory and
``non_blocking=True`` towards a CUDA device); :func:`to_host` brings tensors back to the CPU
(weights sent to other nodes, checkpoints, priorities and metrics). Both return the very object they
got when nothing had to move.

Importing this module does not import torch: :func:`device_spec_problem` checks a setting's spelling
for the config check that runs before torch loads.
"""
from __future__ import annotations

import copy
import itertools
import json
import os
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, TypeVar, Union

if TYPE_CHECKING:
    import torch

T = TypeVar('T')
M = TypeVar('M', bound='torch.nn.Module')

__all__ = ['DeviceError', 'DeviceLike', 'DEVICE_CHOICES', 'device_spec_problem', 'device_problem', 'resolve_device',
           'policy_device', 'node_learns', 'ray_gpu_ids', 'to_device', 'to_host', 'host_copy', 'module_device',
           'place_module', 'obs_tensor']

#: the accepted spellings, in words (error messages, ``--help``)
DEVICE_CHOICES = "'auto', 'cpu', 'cuda' or 'cuda:N'"

DeviceLike = Union[None, str, 'torch.device']


class DeviceError(ValueError):
    """A device setting that is misspelt or names a device this machine does not have (one line)."""


def device_spec_problem(value: object) -> Optional[str]:
    """None when ``value`` is a device setting (``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'``; any case),
    else what is wrong. Does not import torch and does not look at the machine (:func:`device_problem` does)."""
    if not isinstance(value, str):
        return f'expected {DEVICE_CHOICES}, got {type(value).__name__} {value!r}'
    v = value.strip().lower()
    if v in ('auto', 'cpu', 'cuda') or (v.startswith('cuda:') and v[5:].isdigit()):
        return None
    return f'expected {DEVICE_CHOICES}, got {value!r}'


def _cuda_problem(spec: str, what: str = 'device') -> Optional[str]:
    """Why ``spec`` (``'cuda'`` or ``'cuda:N'``) cannot be used on this machine, or None (``what`` names the
    setting in the message)."""
    import torch  # lazy: this module is on the --help path

    if torch.version.cuda is None or not torch.cuda.is_available():
        why = (f'this torch ({torch.__version__}) is built without CUDA' if torch.version.cuda is None
               else 'no CUDA GPU is visible (torch.cuda.is_available() is False)')
        return f'{what} {spec}: {why}; use cpu, or auto (the GPU where there is one, else the CPU)'
    if ':' in spec:
        index, count = int(spec.split(':', 1)[1]), torch.cuda.device_count()
        if index >= count:
            return (f'{what} {spec}: this machine has {count} CUDA device{"s" if count != 1 else ""} '
                    f'(cuda:0 to cuda:{count - 1}); use one of them, cuda or auto')
    return None


def device_problem(value: Any, what: str = 'device') -> Optional[str]:
    """None when ``value`` is a device setting this machine can use, else a one-line message (naming the
    setting ``what``) saying what is wrong and what to use instead (e.g. ``'cuda'`` where torch sees no GPU)."""
    problem = device_spec_problem(value)
    if problem is not None:
        return f'{what}: {problem}'
    v = value.strip().lower()
    return _cuda_problem(v, what) if v.startswith('cuda') else None


def ray_gpu_ids() -> Optional[List[object]]:
    """The GPU ids Ray assigned to this process when it is a Ray actor (``ray.get_gpu_ids()``: ``[]`` for an
    actor without GPUs), None outside a Ray actor (Ray is never imported here)."""
    ray = sys.modules.get('ray')
    if ray is None:
        return None
    try:
        if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
            return None
        return list(ray.get_gpu_ids())
    except Exception:  # noqa: BLE001 - an old or partial Ray: treat as outside an actor
        return None


def resolve_device(spec: DeviceLike = 'auto', what: str = 'device') -> 'torch.device':
    """The ``torch.device`` of a setting: ``'auto'`` (or None) is the GPU when CUDA is available (in a Ray
    actor: the GPU Ray assigned, which is ``cuda:0`` in the actor), else the CPU. A ``torch.device``, or the
    name of another torch device type (e.g. ``'meta'`` in tests), is taken as it is. Raises
    :class:`DeviceError` (one line) for a misspelt setting or a CUDA device the machine does not have
    (``what`` names the setting in it)."""
    import torch  # lazy: this module is on the --help path

    if isinstance(spec, torch.device):
        if spec.type == 'cuda':
            problem = _cuda_problem(str(spec), what)
            if problem is not None:
                raise DeviceError(problem)
        return _with_index(spec)
    if spec is None:
        spec = 'auto'
    if isinstance(spec, str) and device_spec_problem(spec) is not None:
        try:  # another torch device type (e.g. 'meta', 'mps'), accepted from Python as a torch.device would be
            return resolve_device(torch.device(spec.strip()), what)
        except RuntimeError:
            pass
    problem = device_problem(spec, what)
    if problem is not None:
        raise DeviceError(problem)
    v = spec.strip().lower()
    if v == 'auto':
        ids = ray_gpu_ids()
        if ids is not None:  # a Ray actor: only a GPU that Ray assigned (CUDA_VISIBLE_DEVICES shows it as 0)
            return torch.device('cuda:0') if ids and torch.cuda.is_available() else torch.device('cpu')
        return _with_index(torch.device('cuda')) if torch.cuda.is_available() else torch.device('cpu')
    return _with_index(torch.device(v))


def _with_index(dev: 'torch.device') -> 'torch.device':
    """``cuda`` as the current CUDA device with its index (``cuda:0``), so that devices compare equal to a
    tensor's ``.device``; other devices unchanged."""
    import torch  # lazy: this module is on the --help path

    if dev.type == 'cuda' and dev.index is None:
        return torch.device('cuda', torch.cuda.current_device())
    return dev


def node_learns() -> bool:
    """False on a node of a multi-node run (``rlpipe run``, local or on Ray) whose roles do not include the
    learner (a collector or an evaluator node); True in a single process and on a node that learns."""
    text = os.environ.get('RLPIPE_NODE')
    if not text:
        return True
    try:
        roles = [str(r) for r in json.loads(text).get('roles') or ()]
    except (ValueError, AttributeError):
        return True
    return not roles or 'learner' in roles


def policy_device(section: Mapping, device: DeviceLike = None) -> 'torch.device':
    """Where a policy's networks live: ``device`` when given; on a node that does not learn,
    ``section['acting_device']`` (default the CPU); else ``section['device']`` (default ``'auto'``).
    ``section`` is the config's ``policy`` section."""
    if device is not None:
        return resolve_device(device)
    if not node_learns():
        return resolve_device(section.get('acting_device') or 'cpu', 'policy.acting_device')
    return resolve_device(section.get('device') or 'auto', 'policy.device')


def module_device(module: torch.nn.Module) -> 'torch.device':
    """The device of a module's first parameter (or buffer); the CPU for a module without tensors."""
    import torch  # lazy: this module is on the --help path

    for t in module.parameters():
        return t.device
    for b in module.buffers():
        return b.device
    return torch.device('cpu')


def place_module(module: M, device: 'torch.device') -> M:
    """``module.to(device)`` when one of its parameters or buffers is elsewhere (nothing is touched when all
    are there already); returns the module."""
    if any(t.device != device for t in itertools.chain(module.parameters(), module.buffers())):
        module.to(device)
    return module


def obs_tensor(obs: object, device: 'torch.device', dtype: Optional['torch.dtype'] = None) -> 'torch.Tensor':
    """Observations (a numpy array from the envs, or a tensor) as one tensor on ``device``: a single
    conversion (and, off the CPU, a single host-to-device copy) per step."""
    import torch  # lazy: this module is on the --help path

    return torch.as_tensor(obs, dtype=dtype, device=device)


def _is_tree(x: object) -> bool:
    tv = sys.modules.get('treevalue')
    return tv is not None and isinstance(x, tv.TreeValue)


def _map_tensors(obj: object, fn: Callable[[torch.Tensor], torch.Tensor], memo: Dict[int, object]) -> Any:
    """``obj`` with every tensor ``t`` replaced by ``fn(t)`` (``memo``: one call per tensor object); the same
    object when nothing changed (containers are copied only where a leaf changed)."""
    import torch  # lazy: this module is on the --help path

    if isinstance(obj, torch.Tensor):
        key = id(obj)
        if key not in memo:
            memo[key] = fn(obj)
        return memo[key]
    if isinstance(obj, Mapping):
        changed = {}
        for k, v in obj.items():
            nv = _map_tensors(v, fn, memo)
            if nv is not v:
                changed[k] = nv
        if not changed:
            return obj
        out: Any  # a mapping of obj's own type, written below
        if type(obj) is dict:
            out = dict(obj)
        else:

            try:
                out = copy.copy(obj)  # keeps the type (and an OrderedDict's _metadata)
            except Exception:  # noqa: BLE001 - a mapping that does not copy: a plain dict
                out = dict(obj)
        for k, v in changed.items():
            out[k] = v
        return out
    if isinstance(obj, (list, tuple)):
        items = [_map_tensors(v, fn, memo) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        if isinstance(obj, list):
            return items
        return type(obj)(*items) if hasattr(obj, '_fields') else type(obj)(items)
    if _is_tree(obj):
        import treevalue  # lazy: this module is on the --help path

        return treevalue.mapping(obj, lambda v: _map_tensors(v, fn, memo))
    return obj


def to_device(obj: T, device: DeviceLike, non_blocking: Optional[bool] = None) -> T:
    """``obj`` (a tensor, or dicts / lists / tuples / treetensor trees of them) with every tensor on
    ``device``, each moved once (a tensor reached twice is moved once). Towards a CUDA device, CPU tensors
    go through pinned memory with ``non_blocking=True`` (``non_blocking``: force it on or off). Tensors
    already there, and everything that is not a tensor, are kept as they are."""
    import torch  # lazy: this module is on the --help path

    dev = resolve_device(device)
    cuda = dev.type == 'cuda'
    if non_blocking is None:
        non_blocking = cuda

    def move(t: torch.Tensor) -> torch.Tensor:
        if t.device == dev:
            return t
        if cuda and non_blocking and t.device.type == 'cpu':
            return t.pin_memory().to(dev, non_blocking=True)
        return t.to(dev, non_blocking=non_blocking)

    return _map_tensors(obj, move, {})


def host_copy(obj: T) -> T:
    """``obj`` with every tensor replaced by a detached copy on the CPU (a snapshot that later updates on
    any device do not change)."""
    def copy_(t: torch.Tensor) -> torch.Tensor:
        return t.detach().clone() if t.device.type == 'cpu' else t.detach().cpu()

    return _map_tensors(obj, copy_, {})


def to_host(obj: T) -> T:
    """``obj`` with every tensor that is not on the CPU copied to the CPU (detached); CPU tensors and
    everything else are kept as they are (the same object when nothing had to move)."""
    def move(t: torch.Tensor) -> torch.Tensor:
        return t if t.device.type == 'cpu' else t.detach().cpu()

    return _map_tensors(obj, move, {})
