"""The task runtime: middleware composed over one shared context per step.

``task`` (the one :class:`~pipeline.runtime.task.Task` of a process) runs the chain: the two phases of a step
(:mod:`.phases`), its events (:mod:`.events`), parallel and sequential groups (:mod:`.combinators`). Around it:
the node roles a middleware belongs to (:mod:`.roles`), the context fields it reads and writes (:mod:`.contracts`),
what a pipeline looks like (:mod:`.describe`), the router that carries events between nodes (:mod:`.router`),
which node of a launch this process is (:mod:`.node`), ``StepTimer`` (:mod:`.wrappers`) and the contracts of what
middleware are handed (:mod:`.protocols`). Imports neither torch nor gymnasium.
"""
from .contracts import WiringError, WiringWarning
from .roles import Role, for_all_roles, for_roles
from .router import LocalRouter, Router
from .task import Task, task
from .wrappers import StepTimer

__all__ = ["task", "Task", "Role", "for_roles", "for_all_roles", "WiringWarning", "WiringError", "Router",
           "LocalRouter", "StepTimer"]
