"""The subprocess backend: worker processes on gymnasium's ``AsyncVectorEnv``, each stepping a group
of envs.

``env_num`` envs are split into consecutive groups of ``k = ceil(env_num / workers)``; worker ``w``
runs envs ``w*k .. w*k + k - 1`` as one :class:`~pipeline.envs.env_group.EnvGroup`, stepping them in
turn. About one worker per core beats one per env: every step costs each worker a pipe round trip and
a process wake-up, which for 8 envs on 2 cores cost more than the parallelism gains. With
``workers=env_num`` every env has its own process.

Observations travel through ``AsyncVectorEnv``'s shared memory (``[workers, k, *obs_shape]``, read as
``[workers * k, *obs_shape]``: env ``i`` is row ``i``); rewards, flags and final observations come
back in the ``info`` slot of each worker's answer (see :mod:`pipeline.envs.env_group`). This module
talks to the workers over ``AsyncVectorEnv``'s own pipes (the ``('step', ...)`` / ``('reset', ...)``
messages its ``step_async``/``reset_async`` send) so that it can step a subset of the envs, wait with
one deadline, and say which env failed.

Failure reports name the env (from the :class:`~pipeline.envs.env_group.EnvMarks` slot its worker
set before making, resetting or stepping it): an exception in a worker comes with the worker's
traceback (from ``AsyncVectorEnv``'s error queue); a worker that dies (segfault, ``os._exit``) with
its exit code and, for fatal signals, the Python stack ``faulthandler`` wrote; a worker that does not
answer within ``step_timeout`` with the stack it is stuck in (``faulthandler`` on ``SIGUSR1``).
"""
from __future__ import annotations

import os
import queue
import select
import signal
import tempfile
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode

from .backend_protocol import StepArrays
from .env_group import EnvMarks, WorkerEnvFn, pack_array
from .errors import EnvWorkerError

__all__ = ['SubprocessBackend', 'EnvWorkerError', 'default_workers']

_CLOSE_TIMEOUT = 5.0


def default_workers(env_num: int) -> int:
    """One worker per usable core, at most one per env."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(env_num, cores))


# How one step's envs map to workers: per worker involved, ``(worker, rows in its group or None for
# all, positions of those envs in the step: a slice or an index array, their rows in the shared
# observation memory: a slice or an index array)``.
_Plan = List[Tuple[int, Optional[List[int]], Any, Any]]


class SubprocessBackend:
    """``env_num`` envs in at most ``workers`` processes (see the module docstring);
    ``step_timeout`` (seconds, or None for no limit) bounds every wait for the workers' answers."""

    name = 'subprocess'

    def __init__(self, fns: Sequence[Callable[[], object]], step_timeout: Optional[float] = 60.0,
                 start_method: Optional[str] = None, workers: Optional[int] = None, first: int = 0) -> None:
        # ``first``: the manager's index of env 0 here (errors name envs by the manager's index)
        if step_timeout is not None and step_timeout <= 0:
            raise ValueError(f'step_timeout must be > 0 seconds or None, got {step_timeout!r}')
        n = len(fns)
        if workers is None:
            workers = default_workers(n)
        if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
            raise ValueError(f'workers must be a positive int (or None: one per core), got {workers!r}')
        k = -(-n // min(workers, n))
        n_workers = -(-n // k)
        self.env_num, self.group_size, self.workers = n, k, n_workers
        self._timeout = step_timeout
        self._first = first
        self._broken: Optional[str] = None
        self._closed = False
        self._vec = None
        self._requests: Deque[Tuple[np.ndarray, _Plan, bool]] = deque()  # step_async requests, oldest first
        self._owed = [0] * n_workers  # step answers each worker still owes (steps in flight)
        # each worker's trace file: the worker writes it (and unlinks its name as soon as it has it open), this
        # process reads it through the descriptor kept here; the marks file's name goes once every worker has it
        self._trace_paths: List[str] = []
        self._trace_fds: List[int] = []
        for w in range(n_workers):
            fd, path = tempfile.mkstemp(prefix=f'rlpipe-worker{w}-', suffix='.trace')
            self._trace_fds.append(fd)
            self._trace_paths.append(path)
        fd, marks_path = tempfile.mkstemp(prefix='rlpipe-marks-')
        os.close(fd)
        self._marks_path = marks_path
        self._marks = EnvMarks(marks_path, n_workers, create=True)
        worker_fns = [WorkerEnvFn(fns[w * k:(w + 1) * k], k, first + w * k, w, self._trace_paths[w], marks_path,
                                  n_workers)
                      for w in range(n_workers)]
        try:
            self._vec = AsyncVectorEnv(worker_fns, shared_memory=True, copy=False, context=start_method,
                                       daemon=True, autoreset_mode=AutoresetMode.DISABLED)
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:  # a worker died making its envs
            err = self._first_dead_worker_error(e)
            self._remove_files()
            raise err from e
        except BaseException:  # e.g. the first env failed in this process, or the envs' spaces differ
            self._remove_files()
            raise
        self._pipes = self._vec.parent_pipes
        self._procs = self._vec.processes
        self._unlink_names()  # every worker made its envs (AsyncVectorEnv checked their spaces): none needs a name
        # the single env's spaces, from the group AsyncVectorEnv made in this process for its spaces
        parent_spaces = worker_fns[0].parent_spaces
        if parent_spaces is None:  # pragma: no cover - AsyncVectorEnv made a group here, which sets them
            self.close()
            raise RuntimeError('subprocess backend: the envs\' spaces were not read in this process')
        self.observation_space, self.action_space = parent_spaces
        shm = self._vec.observations
        if not isinstance(shm, np.ndarray):
            self.close()
            raise TypeError(f'the subprocess backend needs array observations; got observation space '
                            f'{self.observation_space} (flatten dict observations with a wrapper)')
        self._obs: np.ndarray = shm.reshape((n_workers * k,) + shm.shape[2:])  # a view: env i is row i
        self._full: _Plan = [(w, None, slice(w * k, min(n, (w + 1) * k)), slice(w * k, min(n, (w + 1) * k)))
                             for w in range(n_workers)]
        self._plans: Dict[bytes, _Plan] = {}  # plans of subsets stepped before (e.g. overlap's halves)

    # ------------------------------------------------------------------ protocol
    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        self._check_usable()
        while self._requests:  # steps in flight: their answers come first
            self.step_wait()
        k = self.group_size
        workers = range(len(self._pipes))
        for w in workers:
            s = None if seeds is None else [int(x) for x in seeds[w * k:(w + 1) * k]]
            self._send(w, ('reset', {'seed': s, 'options': None}))
        for _ in self._answers(list(workers)):
            pass
        return self._obs[:self.env_num].copy()

    def _plan(self, ids: np.ndarray) -> _Plan:
        n = len(ids)
        if n == self.env_num and (n == 1 or bool((ids[1:] > ids[:-1]).all())):
            return self._full  # every env, in order
        key = ids.tobytes()
        plan = self._plans.get(key)
        if plan is not None:
            return plan
        k = self.group_size
        by_worker: Dict[int, Tuple[List[int], List[int]]] = {}
        for j, i in enumerate(ids.tolist()):
            rows, pos = by_worker.setdefault(i // k, ([], []))
            rows.append(i % k)
            pos.append(j)
        plan = []
        for w, (rows, pos) in sorted(by_worker.items()):
            size = min(self.env_num, (w + 1) * k) - w * k
            if rows == list(range(size)) and pos == list(range(pos[0], pos[0] + size)):
                # the worker's whole group, in order: no row list to send, slices to copy
                plan.append((w, None, slice(pos[0], pos[0] + size), slice(w * k, w * k + size)))
            else:
                p = np.asarray(pos)
                plan.append((w, rows, p, ids[p]))
        if len(self._plans) < 64:
            self._plans[key] = plan
        return plan

    def step(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> StepArrays:
        self.step_async(ids, actions, keep_infos)
        return self.step_wait()

    def step_async(self, ids: np.ndarray, actions: np.ndarray, keep_infos: bool) -> None:
        """Send the step to the workers of ``ids`` and return; :meth:`step_wait` takes the answers.

        Several requests may be in flight (for disjoint envs): a worker answers its requests in the
        order it got them, and :meth:`step_wait` takes the oldest request's answers first, so the next
        answer on each of its workers' pipes is always its own."""
        self._check_usable()
        plan = self._plan(ids)
        for w, rows, pos, _ in plan:
            self._send(w, ('step', (rows, pack_array(actions[pos]), keep_infos)))
            self._owed[w] += 1
        self._requests.append((ids, plan, keep_infos))

    def step_wait(self) -> StepArrays:
        """The answers to the oldest :meth:`step_async` request (see :meth:`SyncBackend.step`): the
        observations are copied out of the shared memory, so nothing returned aliases it."""
        self._check_usable()
        ids, plan, keep_infos = self._requests.popleft()
        try:
            return self._take_answers(ids, plan, keep_infos)
        except BaseException:
            if self._broken is None:  # e.g. Ctrl-C: some answers of this step may be unread
                self._broken = 'a step_wait() was interrupted'
            raise

    def _take_answers(self, ids: np.ndarray, plan: _Plan, keep_infos: bool) -> StepArrays:
        n = len(ids)
        shm = self._obs
        after = np.empty((n,) + shm.shape[1:], dtype=shm.dtype)
        reward = np.empty(n, dtype=np.float64)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        infos: Optional[List[Any]] = [None] * n if keep_infos else None
        finals: List[Tuple[int, object, dict]] = []
        # each worker's answer is taken in as it arrives, while the others are still stepping
        for j, answer in self._answers([w for w, _, _, _ in plan]):
            w, _, pos, src = plan[j]
            self._owed[w] -= 1
            after[pos] = shm[src]
            r, te, tr, w_infos, w_finals = answer[4]
            reward[pos] = r
            terminated[pos] = te
            truncated[pos] = tr
            if w_infos is not None or w_finals:
                at = range(pos.start, pos.stop) if isinstance(pos, slice) else pos.tolist()
                if w_infos is not None:
                    for i, info in zip(at, w_infos):
                        infos[i] = info  # type: ignore[index]  # not None: w_infos come with keep_infos
                finals.extend((at[row], obs, info) for row, (obs, info) in w_finals.items())
        next_obs = after
        final_infos: Dict[int, dict] = {}
        if finals:
            next_obs = after.copy()
            for i, obs, info in finals:
                next_obs[i] = obs
                final_infos[i] = info
        return next_obs, after, reward, terminated, truncated, infos, final_infos

    def close(self) -> None:
        """Ask every worker to close; terminate (then kill) any that does not answer in time."""
        if self._closed:
            return
        self._closed = True
        self._requests.clear()
        vec = self._vec
        if vec is None:
            return
        pipes, procs = vec.parent_pipes, vec.processes
        graceful = self._broken is None
        if graceful:
            for pipe in pipes:
                try:
                    pipe.send(('close', None))
                except (OSError, ValueError):
                    graceful = False
            deadline = time.monotonic() + _CLOSE_TIMEOUT
            for w, pipe in enumerate(pipes):
                # the answers to steps in flight come before the answer to 'close'
                for _ in range(self._owed[w] + 1):
                    try:
                        if pipe.poll(max(0.0, deadline - time.monotonic())):
                            pipe.recv()
                        else:
                            graceful = False
                            break
                    except (OSError, EOFError, ValueError):
                        graceful = False
                        break
        for p in procs:
            if not graceful and p.is_alive():
                p.terminate()
        for p in procs:
            p.join(_CLOSE_TIMEOUT)
            if p.is_alive():
                p.kill()
                p.join(_CLOSE_TIMEOUT)
        for pipe in pipes:
            try:
                pipe.close()
            except OSError:  # pragma: no cover
                pass
        vec.error_queue.close()
        vec.closed = True  # AsyncVectorEnv.__del__ must not close it again
        self._remove_files()

    # ------------------------------------------------------------------ helpers
    def _check_usable(self) -> None:
        if self._broken is not None:
            raise RuntimeError(f'the env manager is unusable after an earlier failure ({self._broken}); '
                               f'close() it and create a new one')

    def _send(self, w: int, msg: object) -> None:
        try:
            self._pipes[w].send(msg)
        except (OSError, ValueError) as e:
            self._fail(self._dead_worker_error(w), e)

    def _answers(self, ws: Sequence[int]) -> Iterator[Tuple[int, Any]]:
        """``(j, answer of worker ws[j])`` for every listed worker, in the order they answer; one
        ``poll`` waits for all of them, with one deadline for the whole step."""
        pipes = self._pipes
        poller = select.poll()
        fd_of: Dict[int, int] = {}
        for j, w in enumerate(ws):
            fd = pipes[w].fileno()
            fd_of[fd] = j
            poller.register(fd, select.POLLIN)
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while fd_of:
            events = poller.poll(None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000.0)
            if not events:
                self._fail(self._hung_worker_error(ws[min(fd_of.values())]))
            for fd, _ in events:
                k = fd_of.pop(fd, None)
                if k is None:
                    continue
                poller.unregister(fd)
                w = ws[k]
                try:
                    result, ok = pipes[w].recv()
                except (EOFError, OSError) as e:
                    self._fail(self._dead_worker_error(w), e)
                if not ok:
                    self._fail(self._raised_error(w))
                yield k, result

    def _fail(self, err: EnvWorkerError, cause: Optional[BaseException] = None) -> None:
        self._broken = f'env {err.env_index} failed'
        raise err from cause

    def _env_of(self, w: int) -> int:
        """The env worker ``w`` was last making, resetting or stepping (its first env if unknown)."""
        k = self.group_size
        i = int(self._marks.slots[w]) if self._marks.slots is not None else -1
        lo, hi = self._first + w * k, self._first + min(self.env_num, (w + 1) * k)
        return i if lo <= i < hi else lo

    def _where(self, w: int) -> str:
        k = self.group_size
        if k == 1:
            return ''
        lo, hi = self._first + w * k, self._first + min(self.env_num, (w + 1) * k)
        return f' (worker {w}, which runs envs {lo}-{hi - 1})'

    def _raised_error(self, w: int) -> EnvWorkerError:
        try:
            if self._vec is None:  # pragma: no cover - a worker's error comes after the envs were made
                raise queue.Empty
            _, exctype, value, trace = self._vec.error_queue.get(timeout=_CLOSE_TIMEOUT)
        except queue.Empty:
            return EnvWorkerError(self._env_of(w), f'raised an exception{self._where(w)} (its traceback did '
                                                   f'not arrive)')
        name = getattr(exctype, '__name__', str(exctype))
        return EnvWorkerError(self._env_of(w), f'raised {name}: {value}{self._where(w)}', trace)

    def _dead_worker_error(self, w: int) -> EnvWorkerError:
        proc = self._procs[w]
        proc.join(1.0)
        code = proc.exitcode
        what = f'worker process died (exit code {code})' if code is not None else 'worker pipe broke'
        if code is not None and code < 0:
            try:
                what += f' from signal {signal.Signals(-code).name}'
            except ValueError:  # pragma: no cover
                pass
        return EnvWorkerError(self._env_of(w), what + self._where(w), self._read_trace(w))

    def _hung_worker_error(self, w: int) -> EnvWorkerError:
        proc = self._procs[w]
        if not proc.is_alive():
            return self._dead_worker_error(w)
        trace = ''
        if hasattr(signal, 'SIGUSR1'):
            before = len(self._read_trace(w))
            try:
                if proc.pid is not None:  # (alive: it has one)
                    os.kill(proc.pid, signal.SIGUSR1)
            except OSError:  # pragma: no cover
                pass
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                time.sleep(0.05)
                if self._trace_size(w) > before:
                    time.sleep(0.1)  # let faulthandler finish writing
                    break
            trace = self._read_trace(w)[before:]
        return EnvWorkerError(self._env_of(w), f'did not answer within step_timeout={self._timeout} s (hung?)'
                                               f'{self._where(w)}; the stack it is stuck in is below', trace)

    def _first_dead_worker_error(self, cause: BaseException) -> EnvWorkerError:
        """``AsyncVectorEnv`` failed in its constructor: name an env that failed being made."""
        for w in range(len(self._trace_paths)):
            text = self._read_trace(w)
            if 'Traceback' in text or 'Fatal Python error' in text:
                return EnvWorkerError(self._env_of(w), f'failed while making its env{self._where(w)}', text)
        return EnvWorkerError(-1, f'a worker failed while making its envs ({cause!r})')

    def _trace_size(self, w: int) -> int:
        try:
            return os.fstat(self._trace_fds[w]).st_size
        except (OSError, IndexError):
            return 0

    def _read_trace(self, w: int) -> str:
        size = self._trace_size(w)
        try:
            data = os.pread(self._trace_fds[w], size, 0) if size else b''
        except (OSError, IndexError):
            return ''
        return data.decode('utf-8', errors='replace')

    def _unlink_names(self) -> None:
        for path in self._trace_paths + [self._marks_path]:
            try:
                os.unlink(path)
            except OSError:  # a worker unlinked its trace file's name already
                pass

    def _remove_files(self) -> None:
        self._marks.close()
        self._unlink_names()
        fds, self._trace_fds = self._trace_fds, []
        for fd in fds:
            try:
                os.close(fd)
            except OSError:  # pragma: no cover
                pass
