"""Node roles and the one place where a middleware declares the roles it belongs to.

In a multi-process run every node has roles (learner, collector, ...). A middleware marked with
``for_roles`` runs only on nodes that have at least one of its roles; on other nodes the runtime skips
it, exactly as if it were ``task.void()``. A node with no roles runs every middleware (the single-process
case). The decision is taken when the chain runs, so roles may be set before or after a middleware is
constructed or registered.
"""
from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Callable, Dict, FrozenSet, Iterable, Optional, Set, TypeVar, Union

from .contracts import Fields

F = TypeVar("F", bound=Callable[..., object])


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


def roles_of(fn: object) -> Optional[FrozenSet[Role]]:
    """The roles a middleware declared, or None if it runs everywhere."""
    return getattr(fn, "__roles__", None)


def _mark(obj: Callable[..., object], marks: Dict[str, object]) -> Callable[..., object]:
    try:
        for name, value in marks.items():
            setattr(obj, name, value)
        return obj
    except (AttributeError, TypeError):
        # Objects that refuse attributes (bound methods, builtins) get a thin marked wrapper.
        @functools.wraps(obj)
        def marked(ctx: object) -> object:
            return obj(ctx)

        for name, value in marks.items():
            setattr(marked, name, value)
        return marked


def _marking(marks: Dict[str, object]) -> Callable[[F], F]:
    """A decorator that sets ``marks`` on a middleware class, a middleware, or what a factory returns."""

    def decorate(target: F) -> F:
        fields = marks.get("__fields__")
        if isinstance(fields, Fields) and not fields.owner:
            marks["__fields__"] = dataclasses.replace(fields, owner=target.__qualname__)
        if isinstance(target, type):
            for name, value in marks.items():
                setattr(target, name, value)
            return target

        @functools.wraps(target)
        def factory(*args: object, **kwargs: object) -> object:
            out = target(*args, **kwargs)
            if out is None or getattr(out, "__is_void__", False):
                return out
            if not callable(out):  # a decorated plain middleware returned its generator: nothing to mark
                return out
            return _mark(out, marks)

        for name, value in marks.items():
            setattr(factory, name, value)
        return factory  # type: ignore[return-value]  # it takes what ``target`` takes: mypy cannot see that

    return decorate


def for_roles(*roles: RoleLike, reads: Iterable[str] = (), writes: Iterable[str] = ()) -> Callable[[F], F]:
    """Declare the roles a middleware belongs to and the context fields it reads and writes.

    Decorate a middleware function, a factory that returns a middleware, or a middleware class::

        @for_roles(Role.LEARNER, reads=["train_data"], writes=["train_output", "train_iter"])
        def trainer(cfg, learner): ...      # the returned middleware is marked

        @for_roles(Role.COLLECTOR)
        class StepCollector: ...            # instances are marked

    ``reads``/``writes`` (see ``pipeline.runtime.contracts``) are checked when ``task.run`` starts.
    """
    marked_roles = frozenset(as_role(r) for r in roles)
    if not marked_roles:
        raise ValueError("for_roles needs at least one role (use for_all_roles to declare only fields)")
    marks: Dict[str, object] = {"__roles__": marked_roles}
    if reads or writes:
        marks["__fields__"] = Fields.of(reads, writes)
    return _marking(marks)


def for_all_roles(reads: Iterable[str] = (), writes: Iterable[str] = ()) -> Callable[[F], F]:
    """Declare the context fields of a middleware that runs on every node (see ``for_roles``)."""
    return _marking({"__fields__": Fields.of(reads, writes)})


def normalize_roles(roles: Optional[Union[RoleLike, Iterable[RoleLike]]]) -> Set[Role]:
    if roles is None:
        return set()
    if isinstance(roles, (str, Role)):
        roles = [roles]
    return {as_role(r) for r in roles}
