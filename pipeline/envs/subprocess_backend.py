"""The subprocess backend: one worker process per env, on gymnasium's ``AsyncVectorEnv``.

Observations travel through ``AsyncVectorEnv``'s shared memory; workers run in its ``SAME_STEP``
autoreset mode, so a finished env is reset within the step and its final observation comes back in
``info['final_obs']``. This module talks to the workers over ``AsyncVectorEnv``'s own pipes (the
same ``('step', action)`` / ``('reset', kwargs)`` messages its ``step_async``/``reset_async`` send)
so that it can step a subset of the envs, wait with a deadline per env, and say which env failed.

Failure reports: an exception in a worker comes with the worker's traceback (from
``AsyncVectorEnv``'s error queue); a worker that dies (segfault, ``os._exit``) with its exit code
and, for fatal signals, the Python stack ``faulthandler`` wrote; a worker that does not answer
within ``step_timeout`` with the stack it is stuck in (``faulthandler`` on ``SIGUSR1``).
"""
from __future__ import annotations

import faulthandler
import os
import select
import signal
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from .sync_backend import StepArrays

__all__ = ['SubprocessBackend', 'EnvWorkerError']

_CLOSE_TIMEOUT = 5.0
_trace_file = None  # the worker's open traceback file (kept referenced for faulthandler)


class EnvWorkerError(RuntimeError):
    """An env failed in its worker process: ``env_index`` says which, ``worker_traceback`` where."""

    def __init__(self, env_index: int, what: str, worker_traceback: str = '') -> None:
        self.env_index = env_index
        self.worker_traceback = worker_traceback
        msg = f'env {env_index} (subprocess backend) {what}'
        if worker_traceback:
            msg += f'\n--- worker traceback (env {env_index}) ---\n{worker_traceback.rstrip()}'
        msg += '\nThe env manager cannot be used any more: close() it and create a new one.'
        super().__init__(msg)


class _TracedEnvFn:
    """Makes the env in a worker after pointing ``faulthandler`` at a per-env file (stacks on fatal
    signals and on ``SIGUSR1``); an exception while making the env is written there too."""

    def __init__(self, fn: Callable[[], Any], trace_path: str) -> None:
        self.fn = fn
        self.trace_path = trace_path
        self.parent_pid = os.getpid()

    def __call__(self) -> Any:
        if os.getpid() == self.parent_pid:  # AsyncVectorEnv makes one env in the parent for its spaces
            return self.fn()
        global _trace_file
        _trace_file = open(self.trace_path, 'w')
        faulthandler.enable(file=_trace_file, all_threads=True)
        if hasattr(faulthandler, 'register'):
            faulthandler.register(signal.SIGUSR1, file=_trace_file, all_threads=True)
        try:
            return self.fn()
        except BaseException:
            _trace_file.write(traceback.format_exc())
            _trace_file.flush()
            raise


class SubprocessBackend:
    """``env_num`` worker processes (see the module docstring); ``step_timeout`` (seconds, or None
    for no limit) bounds every wait for a worker's answer."""

    name = 'subprocess'

    def __init__(self, fns: Sequence[Callable[[], Any]], step_timeout: Optional[float] = 60.0,
                 start_method: Optional[str] = None) -> None:
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode

        if step_timeout is not None and step_timeout <= 0:
            raise ValueError(f'step_timeout must be > 0 seconds or None, got {step_timeout!r}')
        self._timeout = step_timeout
        self._broken: Optional[str] = None
        self._closed = False
        self._trace_paths = []
        for i in range(len(fns)):
            fd, path = tempfile.mkstemp(prefix=f'rlpipe-env{i}-', suffix='.trace')
            os.close(fd)
            self._trace_paths.append(path)
        traced = [_TracedEnvFn(fn, p) for fn, p in zip(fns, self._trace_paths)]
        try:
            self._vec = AsyncVectorEnv(traced, shared_memory=True, copy=False, context=start_method,
                                       daemon=True, autoreset_mode=AutoresetMode.SAME_STEP)
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:  # a worker died making its env
            self._vec = None
            err = self._first_dead_worker_error(e)
            self._remove_trace_files()
            raise err from e
        self._pipes = self._vec.parent_pipes
        self._procs = self._vec.processes
        self.observation_space = self._vec.single_observation_space
        self.action_space = self._vec.single_action_space
        shm = self._vec.observations
        if not isinstance(shm, np.ndarray):
            self.close()
            raise TypeError(f'the subprocess backend needs array observations; got observation space '
                            f'{self.observation_space} (flatten dict observations with a wrapper)')
        self._shm: np.ndarray = shm

    # ------------------------------------------------------------------ protocol
    def reset(self, seeds: Optional[Sequence[int]]) -> np.ndarray:
        self._check_usable()
        ids = range(len(self._pipes))
        for i in ids:
            self._send(i, ('reset', {'seed': None if seeds is None else int(seeds[i]), 'options': None}))
        self._recv_all(ids)
        return self._shm.copy()

    def step(self, ids: np.ndarray, act_list: List[Any], keep_infos: bool) -> StepArrays:
        self._check_usable()
        for j, i in enumerate(ids.tolist()):
            self._send(i, ('step', act_list[j]))
        results = self._recv_all(ids.tolist())
        n = len(ids)
        after = self._shm.copy() if n == len(self._pipes) else self._shm[ids]
        reward = np.empty(n, dtype=np.float64)
        terminated = np.empty(n, dtype=bool)
        truncated = np.empty(n, dtype=bool)
        infos: Optional[List[dict]] = [] if keep_infos else None
        final_infos: Dict[int, dict] = {}
        next_obs = after
        for j, (_, r, te, tr, info) in enumerate(results):
            reward[j] = r
            terminated[j] = te
            truncated[j] = tr
            if te or tr:
                if next_obs is after:
                    next_obs = after.copy()
                next_obs[j] = info['final_obs']
                info = info['final_info']
                final_infos[j] = info
            if infos is not None:
                infos.append(info)
        return next_obs, after, reward, terminated, truncated, infos, final_infos

    def close(self) -> None:
        """Ask every worker to close; terminate (then kill) any that does not answer in time."""
        if self._closed:
            return
        self._closed = True
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
            for pipe in pipes:
                try:
                    if pipe.poll(max(0.0, deadline - time.monotonic())):
                        pipe.recv()
                    else:
                        graceful = False
                except (OSError, EOFError, ValueError):
                    graceful = False
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
        self._remove_trace_files()

    # ------------------------------------------------------------------ helpers
    def _check_usable(self) -> None:
        if self._broken is not None:
            raise RuntimeError(f'the env manager is unusable after an earlier failure ({self._broken}); '
                               f'close() it and create a new one')

    def _send(self, i: int, msg: Any) -> None:
        try:
            self._pipes[i].send(msg)
        except (OSError, ValueError) as e:
            self._fail(self._dead_worker_error(i), e)

    def _recv_all(self, ids: Sequence[int]) -> List[Any]:
        """Each listed worker's answer, in order; one ``poll`` call waits for all of them (no
        per-pipe selector), with one deadline for the whole step."""
        pipes = self._pipes
        out: List[Any] = [None] * len(ids)
        if self._timeout is None:
            waiting = list(range(len(ids)))
        else:
            poller = select.poll()
            fd_of = {}
            for j, i in enumerate(ids):
                fd = pipes[i].fileno()
                fd_of[fd] = j
                poller.register(fd, select.POLLIN)
            deadline = time.monotonic() + self._timeout
            waiting = []
            while fd_of:
                events = poller.poll(max(0.0, deadline - time.monotonic()) * 1000.0)
                if not events:
                    j = min(fd_of.values())
                    self._fail(self._hung_worker_error(ids[j]))
                for fd, _ in events:
                    j = fd_of.pop(fd, None)
                    if j is not None:
                        poller.unregister(fd)
                        waiting.append(j)
            waiting.sort()
        for j in waiting:
            i = ids[j]
            try:
                result, ok = pipes[i].recv()
            except (EOFError, OSError) as e:
                self._fail(self._dead_worker_error(i), e)
            if not ok:
                self._fail(self._raised_error(i))
            out[j] = result
        return out

    def _fail(self, err: EnvWorkerError, cause: Optional[BaseException] = None) -> None:
        self._broken = f'env {err.env_index} failed'
        raise err from cause

    def _raised_error(self, i: int) -> EnvWorkerError:
        import queue
        try:
            index, exctype, value, trace = self._vec.error_queue.get(timeout=_CLOSE_TIMEOUT)
        except queue.Empty:
            return EnvWorkerError(i, 'raised an exception (its traceback did not arrive)')
        name = getattr(exctype, '__name__', str(exctype))
        return EnvWorkerError(int(index), f'raised {name}: {value}', trace)

    def _dead_worker_error(self, i: int) -> EnvWorkerError:
        proc = self._procs[i]
        proc.join(1.0)
        code = proc.exitcode
        what = f'worker process died (exit code {code})' if code is not None else 'worker pipe broke'
        if code is not None and code < 0:
            try:
                what += f' from signal {signal.Signals(-code).name}'
            except ValueError:  # pragma: no cover
                pass
        return EnvWorkerError(i, what, self._read_trace(i))

    def _hung_worker_error(self, i: int) -> EnvWorkerError:
        proc = self._procs[i]
        if not proc.is_alive():
            return self._dead_worker_error(i)
        trace = ''
        if hasattr(signal, 'SIGUSR1'):
            before = os.path.getsize(self._trace_paths[i]) if os.path.exists(self._trace_paths[i]) else 0
            try:
                os.kill(proc.pid, signal.SIGUSR1)
            except OSError:  # pragma: no cover
                pass
            end = time.monotonic() + 2.0
            while time.monotonic() < end:
                time.sleep(0.05)
                if os.path.exists(self._trace_paths[i]) and os.path.getsize(self._trace_paths[i]) > before:
                    time.sleep(0.1)  # let faulthandler finish writing
                    break
            trace = self._read_trace(i)[before:]
        return EnvWorkerError(i, f'did not answer within step_timeout={self._timeout} s (hung?); the stack '
                                 f'it is stuck in is below', trace)

    def _first_dead_worker_error(self, cause: BaseException) -> EnvWorkerError:
        """``AsyncVectorEnv`` failed in its constructor: name a worker that failed making its env."""
        for i in range(len(self._trace_paths)):
            text = self._read_trace(i)
            if 'Traceback' in text or 'Fatal Python error' in text:
                return EnvWorkerError(i, 'failed while making its env', text)
        return EnvWorkerError(-1, f'a worker failed while making its env ({cause!r})')

    def _read_trace(self, i: int) -> str:
        try:
            with open(self._trace_paths[i]) as f:
                return f.read()
        except OSError:
            return ''

    def _remove_trace_files(self) -> None:
        for path in self._trace_paths:
            try:
                os.unlink(path)
            except OSError:
                pass
