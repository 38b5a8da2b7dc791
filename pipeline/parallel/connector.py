"""The outgoing connections of a ``ZmqRouter`` node: ``Connector``."""
from __future__ import annotations

from typing import Optional

import zmq

from . import transport_auth


class Connector:
    """Opens this node's outgoing connections, each with the transport credentials derived from the key
    (``transport_auth.client``): the PUSH socket of a peer or of a probe (``push``), and the one-off socket
    that carries "__finish__" to a peer believed dead (``push_once``). Owns nothing but its settings and,
    once the router started, the router's ZeroMQ context (``ctx``; None before ``start``)."""

    def __init__(self, key: bytes, bus_auth: str, hwm: int, linger: float) -> None:
        self.key, self.bus_auth = key, bus_auth
        self.hwm, self.linger = hwm, linger
        self.ctx: Optional[zmq.Context] = None

    def _context(self) -> zmq.Context:
        if self.ctx is None:
            raise RuntimeError('Connector: the router has not started (it has no ZeroMQ context yet)')
        return self.ctx

    def push(self, address: str) -> zmq.Socket:
        """A PUSH socket to the node at ``address``: queues at most ``hwm`` messages, only on a live
        connection (a dead peer pushes back), reconnects by itself."""
        s = self._context().socket(zmq.PUSH)
        transport_auth.client(s, self.key, self.bus_auth)
        if "[" in address:
            s.setsockopt(zmq.IPV6, 1)
        s.setsockopt(zmq.SNDHWM, self.hwm)
        s.setsockopt(zmq.IMMEDIATE, 1)  # queue only on a live connection: a dead peer pushes back
        s.setsockopt(zmq.LINGER, int(self.linger * 1000))
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)
        s.connect(address)
        return s

    def push_once(self, address: str) -> zmq.Socket:
        """A PUSH socket for one message to a node that may be paused or gone: it is queued until the node
        accepts the connection, for at most ``linger`` s after the socket is closed."""
        sock = self._context().socket(zmq.PUSH)
        transport_auth.client(sock, self.key, self.bus_auth)
        sock.setsockopt(zmq.LINGER, int(self.linger * 1000))
        sock.setsockopt(zmq.SNDHWM, 4)
        sock.connect(address)
        return sock
