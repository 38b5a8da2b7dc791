"""What a middleware reads from and writes to the context, declared in code, and the check of a chain.

A middleware declares its fields once, in the decorator that declares its roles::

    @for_roles(Role.LEARNER, reads=["train_data"], writes=["train_output", "train_iter"])
    def trainer(cfg, learner): ...

    @for_all_roles(reads=["env_step?"])        # not role-gated
    def termination_checker(...): ...

A read is a field name; ``"a|b"`` means "one of them" and a trailing ``?`` an optional read (shown, not
checked). A name starting with ``@`` is data shared outside the context: ``"@buffer"`` is what
``data_pusher`` puts in the replay buffer and the fetchers/learners read from it. A class may instead define ``__fields__(self, roles) -> Fields`` when what it reads and writes
depends on the node's roles (the ``ContextExchanger``).

At the start of ``task.run`` the runtime checks the chain that will run on this node (``check_chain``): a
required read that no earlier middleware writes and that is not a kept field of the context is reported,
as a ``WiringWarning`` or, in strict mode (``task.start(fields_check="error")`` or
``RLPIPE_FIELDS_CHECK=error``), a ``WiringError`` before the first step; ``"off"`` skips the check.
Middleware that declare nothing are taken on trust: a read after one of them is not reported.
"""
from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass
from typing import AbstractSet, Callable, Iterable, List, Optional, Sequence, Set, Tuple

__all__ = ["Fields", "WiringWarning", "WiringError", "fields_of", "check_chain", "report", "branches_of"]


class WiringWarning(UserWarning):
    """A middleware reads a context field that nothing before it provides."""


class WiringError(ValueError):
    """The strict form of ``WiringWarning``: raised at ``task.run`` start, before the first step."""


@dataclass(frozen=True)
class Fields:
    """The context fields a middleware reads and writes (see the module docstring for the syntax)."""

    reads: Tuple[str, ...] = ()
    writes: Tuple[str, ...] = ()
    owner: str = ""  # the declaring function or class, for messages

    @staticmethod
    def of(reads: Iterable[str] = (), writes: Iterable[str] = (), owner: str = "") -> "Fields":
        reads, writes = _names(reads, "reads"), _names(writes, "writes")
        for w in writes:
            if "|" in w or w.endswith("?"):
                raise ValueError(f"writes: {w!r} must be a plain field name")
        return Fields(reads, writes, owner)

    def required(self) -> List[Tuple[str, ...]]:
        """The reads that must be provided, each as its alternatives."""
        return [tuple(r.split("|")) for r in self.reads if not r.endswith("?")]


_NAME = re.compile(r"@?[A-Za-z_][A-Za-z0-9_]*")


def _names(names: Iterable[str], what: str) -> Tuple[str, ...]:
    if isinstance(names, str):
        names = [names]
    out = tuple(names)
    for n in out:
        if not isinstance(n, str) or not all(_NAME.fullmatch(a) for a in n.rstrip("?").split("|")):
            raise ValueError(f"{what}: {n!r} is not a context field name (or 'a|b', 'name?', '@resource')")
    return out


def field_text(name: str) -> str:
    """``ctx.name`` for a context field; for ``@name`` (data kept outside the context) just the name."""
    return f"the data in the {name[1:]}" if name.startswith("@") else f"ctx.{name}"


def fields_of(fn: object, roles: AbstractSet[object] = frozenset()) -> Optional[Fields]:
    """The fields ``fn`` declared (for a node with ``roles``), or None if it declared nothing."""
    declared = getattr(fn, "__fields__", None)
    if declared is None or isinstance(declared, Fields):
        return declared
    if callable(declared):
        return declared(set(roles))
    return None


def buffered(*buffers: object) -> Callable[[], Set[str]]:
    """For a middleware's ``__provided__``: ``{"@buffer"}`` when one of ``buffers`` (a buffer, a list of
    ``(buffer, weight)`` pairs or a dict of buffers) already holds data at run start (filled by hand or
    loaded), so reading it needs no ``data_pusher`` before it."""
    def provided() -> Set[str]:
        for b in buffers:
            parts: Iterable[object] = b.values() if isinstance(b, dict) else \
                [p[0] if isinstance(p, tuple) else p for p in b] if isinstance(b, (list, tuple)) else [b]
            if any(getattr(p, "count", lambda: 0)() > 0 for p in parts):
                return {"@buffer"}
        return set()
    return provided


def provided_by(fn: object) -> Set[str]:
    """Fields a middleware itself has available before the first step (its ``__provided__()``)."""
    provided = getattr(fn, "__provided__", None)
    return set(provided()) if provided is not None else set()


def branches_of(fn: object) -> Optional[Tuple[object, ...]]:
    """The middleware combined by ``task.serial``/``task.parallel`` (None for any other middleware)."""
    return getattr(fn, "__branches__", None)


def _label(fn: object, fields: Optional[Fields]) -> str:
    if fields is not None and fields.owner:
        return fields.owner
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def check_chain(chain: Sequence[object], provided: Iterable[str], roles: AbstractSet[object] = frozenset(),
                inactive: Sequence[object] = ()) -> List[str]:
    """Problems of ``chain`` (the middleware that run on this node, in order).

    ``provided``: fields there before the first middleware (the context's kept fields). ``inactive``: the
    registered middleware this node's roles skip, named in the message when one of them would write a
    missing field.
    """
    have = set(provided)
    problems: List[str] = []
    trusted: List[str] = []  # undeclared middleware met so far: they might write anything

    def visit(fn: object, also_have: Set[str]) -> Set[str]:
        branches = branches_of(fn)
        if branches is not None:
            parts = [p for p in branches if not roles or getattr(p, "__roles__", None) is None
                     or not set(roles).isdisjoint(getattr(p, "__roles__"))]  # the branches this node runs
            if getattr(fn, "__concurrent__", False):  # parallel: branches see only what came before
                written: Set[str] = set()
                for part in parts:
                    written |= visit(part, set())
                return written
            written = set()
            for part in parts:
                written |= visit(part, written)
            return written
        fields = fields_of(fn, roles)
        if fields is None:
            trusted.append(_label(fn, None))
            return set()
        own = provided_by(fn)
        for alternatives in fields.required():
            if any(a in have or a in also_have or a in own for a in alternatives):
                continue
            if trusted:
                continue  # an undeclared middleware before it may write it
            problems.append(_missing(_label(fn, fields), alternatives, roles, inactive, chain))
        return set(fields.writes)

    for fn in chain:
        have |= visit(fn, set())
    return problems


def _missing(name: str, alternatives: Tuple[str, ...], roles: AbstractSet[object], inactive: Sequence[object],
             chain: Sequence[object]) -> str:
    field = " or ".join(field_text(a) for a in alternatives)
    msg = f"{name} reads {field}, but no middleware before it writes it and it is not a kept context field"
    writers = [fn for fn in inactive if _writes_any(fn, alternatives)]
    if writers:
        gated = ", ".join(f"{_label(w, fields_of(w))} (roles {', '.join(sorted(map(str, getattr(w, '__roles__'))))})"
                          for w in writers)
        node = ", ".join(sorted(map(str, roles))) or "none"
        msg += (f"; this node (roles {node}) skips {gated}, which would write it: give this node that role, "
                "or bring the data over the bus (ContextExchanger)")
    else:
        later = [fn for fn in chain if _writes_any(fn, alternatives)]
        if later:
            msg += f"; {_label(later[0], fields_of(later[0]))} writes it but runs after it: register it earlier"
    return msg


def _writes_any(fn: object, names: Tuple[str, ...]) -> bool:
    parts = branches_of(fn)
    if parts is not None:
        return any(_writes_any(p, names) for p in parts)
    fields = fields_of(fn)
    return fields is not None and any(n in fields.writes for n in names)


MODES = ("warn", "error", "off")


def check_mode(mode: Optional[str]) -> str:
    """``mode``, or ``$RLPIPE_FIELDS_CHECK``, or ``"warn"``; a clear error for anything else."""
    mode = mode if mode is not None else os.environ.get("RLPIPE_FIELDS_CHECK", "warn")
    if mode not in MODES:
        raise ValueError(f"fields_check must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def report(problems: List[str], mode: str) -> None:
    """Warn about (``mode="warn"``) or raise (``"error"``) the problems; ``"off"`` ignores them."""
    if not problems or mode == "off":
        return
    text = "pipeline wiring: " + "\n  ".join([""] + problems) if len(problems) > 1 else \
        f"pipeline wiring: {problems[0]}"
    if mode == "error":
        raise WiringError(text)
    warnings.warn(text, WiringWarning, stacklevel=4)
