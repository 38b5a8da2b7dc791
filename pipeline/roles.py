"""Node roles and the one place where a middleware declares the roles it belongs to.

In a multi-process run every node has roles (learner, collector, ...). A middleware marked with
``for_roles`` runs only on nodes that have at least one of its roles; on other nodes the runtime skips
it, exactly as if it were ``task.void()``. A node with no roles runs every middleware (the single-process
case). The decision is taken when the chain runs, so roles may be set before or after a middleware is
constructed or registered.
"""
from __future__ import annotations

import enum
import functools
from typing import Any, Callable, FrozenSet, Iterable, Optional, TypeVar, Union

F = TypeVar("F", bound=Callable[..., Any])


class Role(str, enum.Enum):
    LEARNER = "learner"
    COLLECTOR = "collector"
    EVALUATOR = "evaluator"
    FETCHER = "fetcher"

    def __str__(self) -> str:  # "learner", not "Role.LEARNER"
        return self.value


RoleLike = Union[Role, str]


def as_role(role: RoleLike) -> Role:
    """``Role`` from a ``Role`` or its string value; a clear error for anything else."""
    if isinstance(role, Role):
        return role
    try:
        return Role(str(role).lower())
    except ValueError:
        raise ValueError(
            f"unknown role {role!r}: use one of {', '.join(r.value for r in Role)}"
        ) from None


def roles_of(fn: Any) -> Optional[FrozenSet[Role]]:
    """The roles a middleware declared, or None if it runs everywhere."""
    return getattr(fn, "__roles__", None)


def _mark(obj: Any, roles: FrozenSet[Role]) -> Any:
    try:
        obj.__roles__ = roles
        return obj
    except (AttributeError, TypeError):
        # Objects that refuse attributes (bound methods, builtins) get a thin marked wrapper.
        @functools.wraps(obj)
        def marked(ctx):
            return obj(ctx)

        marked.__roles__ = roles
        return marked


def for_roles(*roles: RoleLike) -> Callable[[F], F]:
    """Declare the roles a middleware belongs to.

    Decorate a middleware function, a factory that returns a middleware, or a middleware class::

        @for_roles(Role.LEARNER)
        def trainer(cfg, learner): ...      # the returned middleware is marked

        @for_roles(Role.COLLECTOR)
        class StepCollector: ...            # instances are marked
    """
    marked_roles = frozenset(as_role(r) for r in roles)
    if not marked_roles:
        raise ValueError("for_roles needs at least one role")

    def decorate(target: F) -> F:
        if isinstance(target, type):
            target.__roles__ = marked_roles
            return target

        @functools.wraps(target)
        def factory(*args, **kwargs):
            out = target(*args, **kwargs)
            if out is None or getattr(out, "__is_void__", False):
                return out
            if not callable(out):  # a decorated plain middleware returned its generator: nothing to mark
                return out
            return _mark(out, marked_roles)

        factory.__roles__ = marked_roles
        return factory  # type: ignore[return-value]

    return decorate


def normalize_roles(roles: Optional[Iterable[RoleLike]]) -> set:
    if roles is None:
        return set()
    if isinstance(roles, (str, Role)):
        roles = [roles]
    return {as_role(r) for r in roles}
