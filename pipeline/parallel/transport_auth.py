"""Connection-level authentication of the bus: a peer without the key gets no byte of a message buffered.

The per-message HMAC (``wire``) is checked only once ZeroMQ hands over a whole message, and ZeroMQ buffers a
multipart message until its last frame arrived: without a check on the connection, a peer that does not know
the key could make a node hold an unfinished message of any size. So every connection to a node's PULL
socket must first pass a ZeroMQ security handshake with credentials derived from the shared key
(``RLPIPE_KEY``); ZeroMQ reads no message before the handshake succeeded. Two mechanisms, chosen with
``ZmqRouter(bus_auth=...)``, ``rlpipe run --bus-auth`` or ``RLPIPE_BUS_AUTH`` (the same on every node):

``"plain"`` (the default)
    ZeroMQ PLAIN with a password derived from the key (HMAC-SHA256 of a fixed label: the key itself never
    travels), checked by this node's ZAP handler in constant time. It costs nothing per message. It keeps out
    every peer that does not know the key; the password travels in clear text, so an eavesdropper on the
    network path could replay it and open a connection (it still cannot forge, replay or read past the
    per-message HMAC and anti-replay checks, but it could make the node hold up to ``max_frame_size`` per
    unfinished message).
``"curve"``
    CurveZMQ (Curve25519 key exchange, every message encrypted and authenticated on the connection) with
    the server's and the clients' key pairs derived from the key; the ZAP handler accepts only the derived
    client public key. Nothing sniffed on the network lets anyone connect, and the traffic is confidential.
    It encrypts every byte, so large messages cost more than with ``"plain"`` (``benchmarks/bench_bus.py
    --bus-auth curve``; figures: docs/benchmarks.md). Use it on networks you do not trust.

Refused connections are counted (``stats["refused_connections"]``) and logged once per remote address; a
peer whose credential is wrong is "a peer that signs with a different key" (``keycheck``).

``client(sock, key, bus_auth)`` configures any pyzmq socket to connect to a node (e.g. a hand-written tool
or test that talks to the bus directly).
"""
from __future__ import annotations

import hmac
import logging
import os
import socket as _socket
import threading
from typing import Any, Callable, Optional

import zmq
from zmq.utils import z85

log = logging.getLogger("rlpipe.parallel")

BUS_AUTH_ENV = "RLPIPE_BUS_AUTH"
MECHANISMS = ("plain", "curve")
ZAP_ENDPOINT = "inproc://zeromq.zap.01"
_USER = b"rlpipe"


def resolve_bus_auth(bus_auth: Optional[str] = None) -> str:
    """The mechanism to use: the argument, else ``RLPIPE_BUS_AUTH``, else ``"plain"``; a ValueError naming
    the choices for anything else."""
    name = (bus_auth or os.environ.get(BUS_AUTH_ENV) or "plain").strip().lower()
    if name not in MECHANISMS:
        raise ValueError(f"bus authentication {name!r} is unknown: use one of {', '.join(MECHANISMS)} "
                         f"(ZmqRouter(bus_auth=...), rlpipe run --bus-auth, or ${BUS_AUTH_ENV})")
    if name == "curve" and not zmq.has("curve"):
        raise ValueError("bus authentication 'curve' needs a libzmq built with CURVE (libsodium); this pyzmq "
                         "has none: use 'plain' or install pyzmq's wheel from PyPI")
    return name


def _derive(key: bytes, label: str) -> bytes:
    return hmac.new(key, f"rlpipe bus {label} v1".encode(), "sha256").digest()


def _keypair(key: bytes, label: str):
    secret = z85.encode(_derive(key, label))
    return zmq.curve_public(secret), secret


def client(sock: Any, key: bytes, bus_auth: str = "plain") -> Any:
    """Configure ``sock`` (before ``connect``) to pass a node's handshake: the credential derived from ``key``."""
    if bus_auth == "curve":
        server_public, _ = _keypair(key, "curve server")
        public, secret = _keypair(key, "curve client")
        sock.curve_serverkey = server_public
        sock.curve_publickey = public
        sock.curve_secretkey = secret
    else:
        sock.plain_username = _USER
        sock.plain_password = _derive(key, "plain credential").hex().encode()
    return sock


class TransportGuard:
    """The server side: configures the PULL socket, answers ZAP requests and watches failed handshakes.

    Runs on its own thread (``run``), which owns the ZAP and monitor sockets; ``on_refused(address, why,
    wrong_key)`` is called on that thread for every refused connection."""

    def __init__(self, ctx: Any, key: bytes, bus_auth: str, on_refused: Callable[[str, str, bool], None]) -> None:
        self.bus_auth = bus_auth
        self._on_refused = on_refused
        if bus_auth == "curve":
            self._server_public, self._server_secret = _keypair(key, "curve server")
            self._expected = z85.decode(_keypair(key, "curve client")[0])
        else:
            self._expected = _derive(key, "plain credential").hex().encode()
        # Bound before the PULL socket accepts anything: without a ZAP handler PLAIN/CURVE refuse everyone.
        self._zap = ctx.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ENDPOINT)
        self._monitor: Any = None
        self._last_address = "an unknown address"  # remote address of the connection accepted last

    def server(self, pull: Any) -> None:
        """Configure the PULL socket (before ``bind``) and watch its handshakes."""
        pull.setsockopt(zmq.ZAP_DOMAIN, b"rlpipe")
        if self.bus_auth == "curve":
            pull.curve_server = True
            pull.curve_publickey = self._server_public
            pull.curve_secretkey = self._server_secret
        else:
            pull.plain_server = True
        self._monitor = pull.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL)

    def close(self) -> None:
        """Close the sockets without running (``run`` closes them when it ends)."""
        self._zap.close(0)
        if self._monitor is not None:
            self._monitor.close(0)

    def run(self, stopping: threading.Event) -> None:
        from zmq.utils.monitor import parse_monitor_message
        poller = zmq.Poller()
        poller.register(self._zap, zmq.POLLIN)
        if self._monitor is not None:
            poller.register(self._monitor, zmq.POLLIN)
        try:
            while not stopping.is_set():
                for sock, _ in poller.poll(100):
                    if sock is self._zap:
                        self._answer(self._zap.recv_multipart())
                    else:
                        self._watch(parse_monitor_message(sock.recv_multipart()))
        except zmq.ContextTerminated:
            pass
        finally:
            self.close()

    def _answer(self, request: list) -> None:
        """One ZAP request: [version, id, domain, address, routing id, mechanism, credentials...]."""
        ok = False
        address = request[3].decode(errors="replace") if len(request) > 3 else ""
        if len(request) >= 7 and request[0] == b"1.0":
            mechanism, creds = request[5], request[6:]
            if mechanism == b"PLAIN" and self.bus_auth == "plain" and len(creds) == 2:
                ok = creds[0] == _USER and hmac.compare_digest(creds[1], self._expected)
            elif mechanism == b"CURVE" and self.bus_auth == "curve" and len(creds) == 1:
                ok = hmac.compare_digest(creds[0], self._expected)
        rid = request[1] if len(request) > 1 else b""
        self._zap.send_multipart([b"1.0", rid, b"200" if ok else b"400", b"OK" if ok else b"wrong credential",
                                  b"rlpipe" if ok else b"", b""])
        if not ok:
            self._on_refused(address or "an ipc peer", "its credential is not derived from this key", True)

    def _watch(self, event: dict) -> None:
        kind, value = event["event"], event["value"]
        if kind == zmq.EVENT_ACCEPTED:
            address = _remote_address(value)
            if address:
                self._last_address = address
        elif kind == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
            # The event carries no fd: name the connection accepted most recently (usually the one; the fd of
            # a connection refused at once may be closed before we look, then the one before it).
            address = self._last_address
            if value == zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC:
                self._on_refused(address, "its CURVE keys are not derived from this key", True)
            elif value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
                self._on_refused(address, f"it does not authenticate with {self.bus_auth.upper()} (a client "
                                 "without the key, or a node with another --bus-auth)", False)
            else:
                self._on_refused(address, f"ZeroMQ protocol error {value:#x} in the handshake", False)


def _remote_address(fd: int) -> str:
    try:
        with _socket.socket(fileno=os.dup(fd)) as s:  # a duplicate (family detected): closing it is safe
            name = s.getpeername()
        return str(name[0]) if isinstance(name, tuple) else (name or "an ipc peer")
    except OSError:  # closed already (a refused peer does not linger)
        return ""
