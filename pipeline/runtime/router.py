"""The small interface between the task runtime and whatever carries events between nodes.

The runtime talks to exactly one ``Router``. In a single process it is a ``LocalRouter`` (inactive: no
peers). The ZeroMQ message bus in ``pipeline.parallel`` is another implementation; a launcher installs a
factory with ``set_default_router_factory`` before it calls the user's main, so ``task.start()`` picks it
up without the pipeline script changing.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional, Set, Tuple

EventArgs = Tuple[object, ...]
"""An event's positional arguments (passed on to the listeners as they are)."""
EventKwargs = Dict[str, object]
"""An event's keyword arguments."""
OnMessage = Callable[[str, EventArgs, EventKwargs], None]


class Router:
    """Carries events between nodes. Subclasses implement ``start``, ``emit`` and ``stop``.

    ``on_message(event, args, kwargs)`` passed to ``start`` must be called once per incoming event (from
    any thread); the runtime then delivers it once to each local listener.
    """

    is_active: bool = False

    def __init__(self, node_id: int = 0, labels: Optional[Iterable[str]] = None) -> None:
        self.node_id = node_id
        self.labels: Set[str] = set(labels or ())

    def start(self, on_message: OnMessage) -> None:
        raise NotImplementedError

    def emit(self, event: str, args: EventArgs, kwargs: EventKwargs, to: Optional[int] = None) -> None:
        """Send an event to every peer (``to=None``) or to the node with id ``to``."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError


class LocalRouter(Router):
    """The router of a single-process run: no peers, nothing to send."""

    is_active = False

    def start(self, on_message: OnMessage) -> None:
        pass

    def emit(self, event: str, args: EventArgs, kwargs: EventKwargs, to: Optional[int] = None) -> None:
        pass

    def stop(self) -> None:
        pass


_default_factory: Optional[Callable[[], Router]] = None


def set_default_router_factory(factory: Optional[Callable[[], Router]]) -> None:
    """Make ``task.start()`` (without ``router=``) build its router with ``factory``; None resets."""
    global _default_factory
    _default_factory = factory


def default_router() -> Router:
    return _default_factory() if _default_factory is not None else LocalRouter()
