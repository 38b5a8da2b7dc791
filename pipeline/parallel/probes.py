"""The addresses a node sends HELLOs to that have not answered yet (``Probes``, used by the handshake).

A *probe* is one such address: its PUSH socket (``connector``), the token its HELLOs carry and when it last
sent one. The handshake (``handshake``) repeats HELLOs on the probes and settles them when an ACK answers,
``keycheck`` reads the addresses of those never answered, and the router closes what is left when it stops.
"""
from __future__ import annotations

import itertools
import secrets
from typing import TYPE_CHECKING, Dict, List

if TYPE_CHECKING:
    import zmq

    from .connector import Connector


class _Probe:
    __slots__ = ("address", "sock", "token", "last_sent")

    def __init__(self, address: str, sock: zmq.Socket, token: int) -> None:
        self.address = address
        self.sock = sock
        self.token = token
        self.last_sent = 0.0


class Probes(Dict[int, _Probe]):
    """The addresses this node sends HELLOs to and that have not answered yet: token -> probe (its socket,
    its token, when it last sent). Used only under the state lock (``Peers.lock``); the handshake adds them
    and settles them, the router closes what is left when it stops, ``keycheck`` reads their addresses."""

    def __init__(self, connector: Connector) -> None:
        super().__init__()
        self._connector = connector
        self._tokens = itertools.count(secrets.randbits(32) << 20)

    def add(self, address: str) -> None:
        token = next(self._tokens)
        self[token] = _Probe(address, self._connector.push(address), token)

    def addresses(self) -> List[str]:
        return [p.address for p in self.values()]

    def close_all(self) -> None:
        for probe in self.values():
            probe.sock.close(0)
        self.clear()
