"""The errors of making and running envs: an unknown env id, an env that failed in a worker process."""
from __future__ import annotations

__all__ = ['UnknownEnvError', 'EnvWorkerError']


class UnknownEnvError(ValueError):
    """The gymnasium env id is not registered."""


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
