"""Telling a peer with another key from silence (``KeyCheck``, a part of ``ZmqRouter``).

Nodes whose ``RLPIPE_KEY`` differ cannot authenticate each other: the connection handshake fails
(``transport_auth``: the credential is derived from the key) before anything the other node sent is read.
Both sides say so, naming the peer, and a node that has no peer at all ``startup_timeout`` s after that
started ends with ``KeyMismatchError`` (its worker exits with code 2, which the launcher does not restart):

* the receiving side refuses the connection: "peer at ADDR signs with a different key" (ADDR is the
  connection's remote address as ZeroMQ reports it);
* the connecting side gets no answer to its HELLOs although the address accepts connections (a plain
  TCP/ipc connect succeeds): "peer at ADDR signs with a different key (or is not an rlpipe node)".
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Dict, Optional, Set, Tuple

if TYPE_CHECKING:
    from .node_state import NodeState
    from .peers import Peers
    from .probes import Probes

log = logging.getLogger("rlpipe.parallel")


class KeyMismatchError(RuntimeError):
    """No peer could be authenticated: they sign with a different key (``RLPIPE_KEY`` / ``--key-file``)."""


_ADVICE = "set the same RLPIPE_KEY (or --key-file) on every node of the job"


def _accepts_connections(address: str, timeout: float = 1.0) -> bool:
    try:
        if address.startswith("tcp://"):
            host, port = address[len("tcp://"):].rsplit(":", 1)
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                return True
        if address.startswith("ipc://"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(timeout)
                s.connect(address[len("ipc://"):])
                return True
    except (OSError, ValueError):
        return False
    return False


class KeyCheck:
    """Tells a peer with another key from silence (see the module docstring). Its ``refused``,
    ``cut_connection`` and ``closed_connection`` are the transport guard's callbacks; ``check`` is called by
    ``start`` and by the heartbeat thread (``ending``). Owns: when the first connection of each address was
    refused for its key (``_bad_key_from``), the refusals already logged (``_refused_seen``), whether the
    unanswered probes were checked (``_probes_checked``), its lock, and the verdict (``error``: None, or why
    no peer could be authenticated; ``stop`` raises ``KeyMismatchError`` with it). Reads the peer table, the
    probes (under the state lock) and ``node`` (``started_at``, ``stats``)."""

    def __init__(self, node: NodeState, peers: Peers, probes: Probes, bus_auth: str,
                 startup_timeout: float) -> None:
        self._node, self._peers, self._probes = node, peers, probes
        self.bus_auth, self.startup_timeout = bus_auth, startup_timeout
        self._lock = threading.Lock()  # one check of the keys at a time
        self._bad_key_from: Optional[Dict[str, float]] = None  # remote address -> its first refused connection
        self.error: Optional[str] = None
        self._probes_checked = False
        self._refused_seen: Optional[Set[Tuple[str, str]]] = None  # (address, reason) pairs already logged

    def refused(self, address: str, why: str, wrong_key: bool) -> None:
        """A connection failed the transport handshake (``transport_auth``, on its guard thread, which counts
        it in ``stats["refused_connections"]``): nothing it sent was read. Logged once per address and
        reason (at most 1000 of them)."""
        node_id = self._node.node_id
        if wrong_key:
            if self._bad_key_from is None:
                self._bad_key_from = {}
            if address in self._bad_key_from:
                return
            self._bad_key_from[address] = time.monotonic()
            log.error("node %d: peer at %s signs with a different key: refused its connection (%s; %s)",
                      node_id, address, why, _ADVICE)
            return
        seen = self._refused_seen if self._refused_seen is not None else set()
        self._refused_seen = seen
        if (address, why) not in seen and len(seen) < 1000:
            seen.add((address, why))
            log.warning("node %d: refused a connection from %s before reading anything from it: %s [%d refused "
                        "so far]", node_id, address, why, self._node.stats["refused_connections"])

    def cut_connection(self, address: str, why: str) -> None:
        """A connection that passed the handshake was shut down by the guard (``transport_auth``), which
        counts it in ``stats["cut_connections"]``. Logged for the first 5, then every 100th."""
        n = self._node.stats["cut_connections"]
        if n <= 5 or n % 100 == 0:
            log.warning("node %d: closed a connection from %s: %s [%d closed so far]", self._node.node_id,
                        address, why, n)

    def closed_connection(self, address: str, why: str) -> None:
        """ZeroMQ closed a connection that passed the handshake while its peer had not (``transport_guard``,
        which counts it in ``stats["closed_connections"]``). Logged for the first 5, then every 100th."""
        n = self._node.stats["closed_connections"]
        if n <= 5 or n % 100 == 0:
            log.warning("node %d: a connection from %s was closed: %s [%d closed so far]", self._node.node_id,
                        address, why, n)

    def _unanswered_probes(self) -> str:
        """The addresses we sent HELLOs to that accept connections but never answered (checked once)."""
        with self._peers.lock:
            addresses = sorted(set(self._probes.addresses()))
        silent = [a for a in addresses if _accepts_connections(a)]
        for a in silent:
            log.error("node %d: peer at %s signs with a different key (or is not an rlpipe node, or uses "
                      "another --bus-auth than %s): it accepts connections but answered none of our HELLOs in "
                      "%.0f s (%s)", self._node.node_id, a, self.bus_auth, self.startup_timeout, _ADVICE)
        return ", ".join(silent)

    def check(self, now: float) -> Optional[str]:
        """After the startup timeout, with no peer: the reason to end (a peer with another key), else None.
        Called by ``start`` and by the heartbeat thread: one at a time, so that neither returns before the
        other's check of the probes (it takes up to a second) is over."""
        if self.error is not None:
            return self.error
        if now < self._node.started_at + self.startup_timeout or self._peers.n_alive() or self._peers:
            return None
        with self._lock:
            if self.error is not None:
                return self.error
            silent = ""
            if not self._probes_checked and self._probes:
                self._probes_checked = True
                silent = self._unanswered_probes()
            bad = [a for a, t in (self._bad_key_from or {}).items() if now - t >= self.startup_timeout]
            # a refusal whose address was not seen adds nothing when a known address is named
            bad = [a for a in bad if a != "an unknown address"] or bad
            if silent or bad:
                self.error = (f"node {self._node.node_id}: no peer could be authenticated within "
                              f"{self.startup_timeout:.0f} s: peer at {silent or ', '.join(bad)} signs with a "
                              f"different key ({_ADVICE})")
            return self.error
