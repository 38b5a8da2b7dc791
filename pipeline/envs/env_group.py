"""The worker side of the subprocess backend: one worker process steps a group of envs.

A worker of gymnasium's ``AsyncVectorEnv`` runs one ``gymnasium.Env``; here that env is an
:class:`EnvGroup`, which holds ``k`` consecutive envs of the manager (an in-process
:class:`~pipeline.envs.sync_backend.SyncBackend`) and steps them in turn. Its observation is the
``[k, *obs_shape]`` batch, which ``AsyncVectorEnv``'s worker writes to shared memory; everything else
a step produces (rewards, termination and truncation apart, final observations and infos of
finished episodes, the infos when asked) goes back in the ``info`` slot of the worker's answer. The
group resets finished envs itself, so the vector env runs with autoreset disabled.

A group reports ``terminated = truncated = False`` to ``AsyncVectorEnv`` (its own flags are per env,
in the payload). Only the parent (:mod:`pipeline.envs.subprocess_backend`) reads the answers.

:class:`EnvMarks` is a small memory-mapped file with one slot per worker, holding the index of the
env the worker is making, resetting or stepping now: after an exception, a crash or a hang the
parent reads it to name the env (a dead or stuck process cannot say so itself).
"""
from __future__ import annotations

import ctypes
import faulthandler
import mmap
import os
import signal
import sys
import threading
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union, cast

import gymnasium as gym
import numpy as np

from .sync_backend import SyncBackend

__all__ = ['EnvGroup', 'WorkerEnvFn', 'EnvMarks', 'GroupStep', 'pack_array', 'unpack_array', 'die_with_parent']

# What a group's step returns in the info slot: (rewards, terminated, truncated, infos or None,
# {row in the request: (final observation, final info)}). Lists, not arrays: a pipe pickles a few
# Python floats and bools ~10x faster than the same numpy arrays.
GroupStep = Tuple[List[float], List[bool], List[bool], Optional[List[dict]], Dict[int, Tuple[Any, dict]]]

# Actions travel as (dtype, shape, bytes) for the same reason; the envs get the same numpy scalars or
# rows as on the in-process backend.
PackedArray = Tuple[str, Tuple[int, ...], bytes]


def pack_array(a: np.ndarray) -> Union[np.ndarray, PackedArray]:
    """``a`` as ``(dtype, shape, bytes)``; object arrays (e.g. dict actions) as they are."""
    return a if a.dtype.hasobject else (a.dtype.str, a.shape, a.tobytes())


def unpack_array(p: Union[np.ndarray, PackedArray]) -> np.ndarray:
    if isinstance(p, np.ndarray):
        return p
    dtype, shape, data = p
    return np.frombuffer(data, dtype=dtype).reshape(shape)

_trace_file = None  # the worker's open traceback file (kept referenced for faulthandler)


class EnvMarks:
    """``n`` int64 slots in a memory-mapped file shared by the parent and the workers."""

    def __init__(self, path: str, n: int, create: bool = False) -> None:
        self.path = path
        with open(path, 'r+b' if not create else 'w+b') as f:
            if create:
                f.write(np.full(n, -1, dtype=np.int64).tobytes())
                f.flush()
            self._map = mmap.mmap(f.fileno(), n * 8)
        self.slots = np.frombuffer(self._map, dtype=np.int64)

    def close(self) -> None:
        self.slots = None  # type: ignore[assignment]  # release the buffer before closing the map
        try:
            self._map.close()
        except BufferError:  # pragma: no cover - a view still alive; the OS frees it at exit
            pass


class EnvGroup(gym.Env):
    """Envs ``first .. first + len(fns) - 1`` of a manager, stepped in turn in one process.

    Spaces are the single env's batched to ``size`` rows (``size >= len(fns)``: every group of a
    manager has the same spaces, as ``AsyncVectorEnv`` requires; rows past ``len(fns)`` stay zero).

    ``reset(seed=[s_0, ...])`` seeds env ``j`` with ``s_j``; ``step((rows, actions, keep_infos))``
    steps the envs at ``rows`` (``None``: all) with the :func:`pack_array` ed ``actions`` and returns the batch of current observations, then
    ``0.0, False, False`` and the :data:`GroupStep` payload.
    """

    def __init__(self, fns: Sequence[Callable[[], object]], size: int, first: int = 0,
                 mark: Optional[np.ndarray] = None) -> None:
        self._envs = SyncBackend(fns, mark=mark, first=first)
        env0 = self._envs.envs[0]
        self.metadata = dict(getattr(env0, 'metadata', {}) or {})
        self.render_mode = getattr(env0, 'render_mode', None)
        self.single_observation_space = env0.observation_space
        self.single_action_space = env0.action_space
        self.observation_space = gym.vector.utils.batch_space(env0.observation_space, size)
        self.action_space = gym.vector.utils.batch_space(env0.action_space, size)
        # rows of the batched observation: an array (a group slices it by rows, so its envs' spaces are arrays)
        self._obs = cast(np.ndarray, gym.vector.utils.create_empty_array(env0.observation_space, size, np.zeros))
        self._all = np.arange(len(fns), dtype=np.int64)

    # One seed per env of the group, where gym.Env.reset takes one int: the manager's backend is the only caller.
    def reset(self, *, seed: Optional[Sequence[int]] = None,  # type: ignore[override]
              options: object = None) -> Tuple[np.ndarray, Dict[str, object]]:
        first = self._envs.reset(seed)
        self._obs[:len(first)] = first
        return self._obs, {}

    def step(self, request: Tuple[Optional[Sequence[int]], PackedArray, bool]) -> Tuple[Any, float, bool, bool, Any]:
        rows, actions, keep_infos = request
        ids = self._all if rows is None else np.asarray(rows, dtype=np.int64)
        next_obs, after, reward, terminated, truncated, infos, finals = \
            self._envs.step(ids, unpack_array(actions), keep_infos)
        if rows is None and len(ids) == len(self._obs):
            self._obs = after  # a fresh array of every row: no copy needed
        else:
            self._obs[ids] = after
        final = {j: (next_obs[j], info) for j, info in finals.items()}
        payload: GroupStep = (reward.tolist(), terminated.tolist(), truncated.tolist(), infos, final)
        return self._obs, 0.0, False, False, payload

    def close(self) -> None:
        self._envs.close()


PARENT_CHECK_INTERVAL = 0.5  # seconds between a worker's checks that its parent is alive


def die_with_parent(parent_pid: int, pdeathsig: bool) -> None:
    """Called in an env worker: it must not outlive the process that made its env manager.

    ``pdeathsig`` (Linux): the kernel SIGKILLs this process when its parent dies (``PR_SET_PDEATHSIG``), also
    while an env hangs in C code. It is asked only when the manager was made on the parent's main thread:
    the signal follows the death of the parent *thread* that started the worker. A daemon thread checks the
    parent every ``PARENT_CHECK_INTERVAL`` s as well (other systems, a manager made on another thread, or a
    ``forkserver`` parent) and ends the process once it has been re-parented."""
    if pdeathsig and sys.platform.startswith('linux'):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            PR_SET_PDEATHSIG = 1
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # pragma: no cover - no libc prctl
            pass
    ppid = os.getppid()
    if ppid != parent_pid and not _pid_alive(parent_pid):  # it died before prctl took effect
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_INTERVAL)
            if os.getppid() != ppid:
                os._exit(1)

    threading.Thread(target=watch, name='rlpipe-env-worker-parent-watch', daemon=True).start()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - alive, another user's
        return True
    return True


class WorkerEnvFn:
    """Picklable factory of worker ``worker``'s :class:`EnvGroup` (envs ``first ..`` made by ``fns``).

    In the worker it first ties the process to its parent (:func:`die_with_parent`), points
    ``faulthandler`` at ``trace_path`` (stacks on fatal signals and on ``SIGUSR1``; the file is unlinked at
    once, the parent reads it through the descriptor it kept) and attaches the :class:`EnvMarks` file; an exception while making an env is written
    to the trace file too. Called in the parent (``AsyncVectorEnv`` makes one env there for its
    spaces) it makes a group of only the first env, with the same spaces.
    """

    def __init__(self, fns: Sequence[Callable[[], object]], size: int, first: int, worker: int,
                 trace_path: str, marks_path: str, n_workers: int) -> None:
        self.fns, self.size, self.first, self.worker = list(fns), size, first, worker
        self.trace_path, self.marks_path, self.n_workers = trace_path, marks_path, n_workers
        self.parent_pid = os.getpid()
        # made on the parent's main thread: PR_SET_PDEATHSIG is safe (see die_with_parent)
        self.pdeathsig = threading.current_thread() is threading.main_thread()
        self.parent_spaces: Optional[Tuple[object, object]] = None  # the single env's, once made in the parent

    def __getstate__(self) -> Dict[str, object]:
        return {k: v for k, v in self.__dict__.items() if k != 'parent_spaces'}

    def __call__(self) -> EnvGroup:
        if os.getpid() == self.parent_pid:
            group = EnvGroup(self.fns[:1], self.size, self.first)
            self.parent_spaces = (group.single_observation_space, group.single_action_space)
            return group
        global _trace_file
        die_with_parent(self.parent_pid, self.pdeathsig)
        _trace_file = open(self.trace_path, 'w')
        try:  # the parent reads it through the descriptor it kept: nothing stays on disk if it is killed
            os.unlink(self.trace_path)
        except OSError:
            pass
        faulthandler.enable(file=_trace_file, all_threads=True)
        if hasattr(faulthandler, 'register'):
            faulthandler.register(signal.SIGUSR1, file=_trace_file, all_threads=True)
        marks = EnvMarks(self.marks_path, self.n_workers)
        try:
            group = EnvGroup(self.fns, self.size, self.first, mark=marks.slots[self.worker:self.worker + 1])
        except BaseException:
            _trace_file.write(traceback.format_exc())
            _trace_file.flush()
            raise
        group._marks = marks  # type: ignore[attr-defined]  # keep the map open while the group lives
        return group
