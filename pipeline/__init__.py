"""rlpipe: ``from pipeline import task, Task, Role``.

Rooms (imported on demand, so ``import pipeline`` stays light): ``pipeline.runtime`` (the task runtime; its
public names are the ones below), ``pipeline.data`` (replay buffers), ``pipeline.learner``, ``pipeline.policy``,
``pipeline.offline``, ``pipeline.reward_model``, ``pipeline.envs``, ``pipeline.parallel`` (the bus and ``rlpipe
run``), ``pipeline.config`` (config schemas and checks), ``pipeline.checkpoint`` (checkpoint files),
``pipeline.device`` and, on top of the middleware, ``pipeline.run`` (running experiments: the examples' flags,
run folders, ``--resume``/``--play``, recipes; ``pipeline.run.agents`` trains, saves, loads and runs a DQN, PPO
or SAC policy in a few lines, ``docs/agents.md``).
"""
from .runtime import (LocalRouter, Role, Router, StepTimer, Task, WiringError, WiringWarning, for_all_roles, for_roles,
                      task)

__all__ = ["task", "Task", "Role", "for_roles", "for_all_roles", "WiringWarning", "WiringError", "Router", "LocalRouter", "StepTimer"]
__version__ = "0.1.0"
