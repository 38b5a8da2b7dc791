"""rlpipe's runtime: ``from pipeline import task, Task, Role``.

Subpackages (imported on demand, so ``import pipeline`` stays light): ``pipeline.learner``,
``pipeline.data``, ``pipeline.policy``, ``pipeline.envs``, ``pipeline.parallel``; ``pipeline.agents`` trains,
saves, loads and runs a DQN, PPO or SAC policy in a few lines (``docs/agents.md``).
"""
from .contracts import WiringError, WiringWarning
from .roles import Role, for_all_roles, for_roles
from .router import LocalRouter, Router
from .task import Task, task
from .wrappers import StepTimer

__all__ = ["task", "Task", "Role", "for_roles", "for_all_roles", "WiringWarning", "WiringError", "Router", "LocalRouter", "StepTimer"]
__version__ = "0.1.0"
