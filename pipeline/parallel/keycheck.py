"""Telling a peer with another key from silence (a mixin of ``ZmqRouter``).

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
import time
from typing import Dict, Optional

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
    """Uses ``ZmqRouter``'s ``_probes``, ``_n_alive``, ``startup_timeout``, ``stats``, ``_end_run`` and
    ``_keycheck_lock``."""

    _bad_key_from: Optional[Dict[str, float]] = None  # remote address -> when its first refused connection came
    _key_error: Optional[str] = None
    _probes_checked = False
    _refused_seen = None  # (address, reason) pairs already logged

    def _refused(self, address: str, why: str, wrong_key: bool) -> None:
        """A connection failed the transport handshake (``transport_auth``, on its guard thread, which counts
        it in ``stats["refused_connections"]``): nothing it sent was read. Logged once per address and
        reason (at most 1000 of them)."""
        if wrong_key:
            if self._bad_key_from is None:
                self._bad_key_from = {}
            if address in self._bad_key_from:
                return
            self._bad_key_from[address] = time.monotonic()
            log.error("node %d: peer at %s signs with a different key: refused its connection (%s; %s)",
                      self.node_id, address, why, _ADVICE)
            return
        seen = self._refused_seen if self._refused_seen is not None else set()
        self._refused_seen = seen
        if (address, why) not in seen and len(seen) < 1000:
            seen.add((address, why))
            log.warning("node %d: refused a connection from %s before reading anything from it: %s [%d refused "
                        "so far]", self.node_id, address, why, self.stats["refused_connections"])

    def _cut_connection(self, address: str, why: str) -> None:
        """A connection that passed the handshake was shut down by the guard (``transport_auth``), which
        counts it in ``stats["cut_connections"]``. Logged for the first 5, then every 100th."""
        n = self.stats["cut_connections"]
        if n <= 5 or n % 100 == 0:
            log.warning("node %d: closed a connection from %s: %s [%d closed so far]", self.node_id, address, why,
                        n)

    def _closed_connection(self, address: str, why: str) -> None:
        """ZeroMQ closed a connection that passed the handshake while its peer had not (``transport_guard``,
        which counts it in ``stats["closed_connections"]``). Logged for the first 5, then every 100th."""
        n = self.stats["closed_connections"]
        if n <= 5 or n % 100 == 0:
            log.warning("node %d: a connection from %s was closed: %s [%d closed so far]", self.node_id, address,
                        why, n)

    def _unanswered_probes(self) -> str:
        """The addresses we sent HELLOs to that accept connections but never answered (checked once)."""
        with self._state_lock:
            addresses = sorted({p.address for p in self._probes.values()})
        silent = [a for a in addresses if _accepts_connections(a)]
        for a in silent:
            log.error("node %d: peer at %s signs with a different key (or is not an rlpipe node, or uses "
                      "another --bus-auth than %s): it accepts connections but answered none of our HELLOs in "
                      "%.0f s (%s)", self.node_id, a, self.bus_auth, self.startup_timeout, _ADVICE)
        return ", ".join(silent)

    def _check_keys(self, now: float) -> Optional[str]:
        """After the startup timeout, with no peer: the reason to end (a peer with another key), else None.
        Called by ``start`` and by the heartbeat thread: one at a time, so that neither returns before the
        other's check of the probes (it takes up to a second) is over."""
        if self._key_error is not None:
            return self._key_error
        if now < self._started_at + self.startup_timeout or self._n_alive() or self._peers:
            return None
        with self._keycheck_lock:
            if self._key_error is not None:
                return self._key_error
            silent = ""
            if not self._probes_checked and self._probes:
                self._probes_checked = True
                silent = self._unanswered_probes()
            bad = [a for a, t in (self._bad_key_from or {}).items() if now - t >= self.startup_timeout]
            # a refusal whose address was not seen adds nothing when a known address is named
            bad = [a for a in bad if a != "an unknown address"] or bad
            if silent or bad:
                self._key_error = (f"node {self.node_id}: no peer could be authenticated within "
                                   f"{self.startup_timeout:.0f} s: peer at {silent or ', '.join(bad)} signs with a "
                                   f"different key ({_ADVICE})")
            return self._key_error
