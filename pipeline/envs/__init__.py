"""Environments: a vectorised gymnasium env manager (gymnasium is imported lazily)."""
from .env_manager import EnvManager, EnvStep, EpisodeInfo, UnknownEnvError, make_gym_env

__all__ = ['EnvManager', 'EnvStep', 'EpisodeInfo', 'UnknownEnvError', 'make_gym_env']
