"""Environments: a vectorised gymnasium env manager with sync / subprocess / EnvPool backends
(gymnasium is imported lazily), Atari and MuJoCo helpers."""
from .env_manager import BACKENDS, EnvManager, EnvStep, EnvWorkerError, EpisodeInfo, UnknownEnvError, make_gym_env

__all__ = ['BACKENDS', 'EnvManager', 'EnvStep', 'EnvWorkerError', 'EpisodeInfo', 'UnknownEnvError', 'make_gym_env']
