"""Running a pipeline as several nodes: the ZeroMQ message bus, its safe codec and the launcher.

``import pipeline.parallel`` is light: zmq is imported when a router starts. Main names:

* ``ZmqRouter``: the ``pipeline.runtime.router.Router`` that carries events between nodes.
* ``configure(**router_kwargs)``: make ``task.start()`` in this process use a ``ZmqRouter``.
* ``codec.encode/decode``: the pickle-free wire format.
* ``rlpipe run ...`` (``pipeline.run.cli``): start nodes as local processes.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .keycheck import KeyMismatchError
from .keys import MissingKeyError
from .launch import configure

if TYPE_CHECKING:  # loaded on first use (__getattr__ below): zmq is the dist extra
    from .zmq_router import PEER_DEAD, PEER_JOINED, PEER_LEFT, BackpressureTimeout, ZmqRouter

__all__ = ["ZmqRouter", "BackpressureTimeout", "configure", "MissingKeyError", "KeyMismatchError",
           "PEER_DEAD", "PEER_LEFT", "PEER_JOINED"]


def __getattr__(name: str) -> object:
    if name in ("ZmqRouter", "BackpressureTimeout", "PEER_DEAD", "PEER_LEFT", "PEER_JOINED"):
        from . import zmq_router  # lazy: zmq (the dist extra) loads when a router is asked for
        return getattr(zmq_router, name)
    raise AttributeError(f"module 'pipeline.parallel' has no attribute {name!r}")
