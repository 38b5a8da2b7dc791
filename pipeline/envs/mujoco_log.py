"""MuJoCo's warnings go to the ``mujoco`` logger, not to ``MUJOCO_LOG.TXT`` in the working directory.

Apart from :mod:`pipeline.envs.mujoco` so that :func:`pipeline.envs.gym_make.make_gym_env`, which calls
:func:`log_mujoco_warnings` whenever it made a MuJoCo env, and the MuJoCo env factory (which makes its envs
with ``make_gym_env``) do not import each other.
"""
from __future__ import annotations

import logging

__all__ = ['log_mujoco_warnings']


def log_mujoco_warnings() -> None:
    """Send MuJoCo's warnings (e.g. an unstable simulation) to the ``mujoco`` logger instead of its default,
    which appends them to ``MUJOCO_LOG.TXT`` in the working directory. Safe to call again;
    :func:`pipeline.envs.gym_make.make_gym_env` calls it whenever it made a MuJoCo env."""
    import mujoco  # optional extra: mujoco

    if mujoco.get_mju_user_warning() is None:
        mujoco.set_mju_user_warning(_mujoco_warning)


def _mujoco_warning(message: str) -> None:
    logging.getLogger('mujoco').warning('MuJoCo: %s', message)
