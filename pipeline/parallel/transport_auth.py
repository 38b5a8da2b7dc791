"""Connection-level authentication of the bus, and what a connection can make a node hold.

Every connection to a node's PULL socket must pass a ZeroMQ security handshake with credentials derived
from the shared key (``RLPIPE_KEY``) before ZeroMQ hands over any message. Two mechanisms, chosen with
``ZmqRouter(bus_auth=...)``, ``rlpipe run --bus-auth`` or ``RLPIPE_BUS_AUTH`` (the same on every node):

``"plain"`` (the default for a node whose addresses are all loopback or ipc)
    ZeroMQ PLAIN with a password derived from the key (HMAC-SHA256 of a fixed label: the key itself never
    travels), checked by this node's ZAP handler in constant time. It costs nothing per message. The
    password and all traffic travel in clear: someone who can sniff the network path can read the traffic
    and, with the password, open connections. Such a *password holder* cannot forge, replay or read past
    the per-message HMAC, the anti-replay window and the HELLO checks (``wire``, ``handshake``); what it can
    make the node hold is bounded as below. On loopback only root can sniff.
``"curve"`` (the default for a node with any other address: its traffic may cross a network)
    CurveZMQ (Curve25519 key exchange, every message encrypted and authenticated on the connection) with
    the server's and the clients' key pairs derived from the key; the ZAP handler accepts only the derived
    client public key. Nothing sniffed on the network lets anyone connect or read, so only holders of the
    key get past the handshake. It encrypts every byte: a 1 MiB round trip is ~4-5x slower than with
    ``"plain"``, a 1 KiB one about the same (``benchmarks/bench_bus.py --bus-auth curve``; docs/benchmarks.md).

What a connection can make a node hold (issue 28):

* before its handshake is over, at most one frame of ``wire.WIRE_MAX`` bytes (1 MiB + 64 KiB): the socket's
  ``ZMQ_MAXMSGSIZE`` closes a connection at the header of any longer frame, and ``handshake_timeout`` (5 s;
  ``ZMQ_HANDSHAKE_IVL``) closes one that does not finish; at most ``MAX_PENDING`` (64) connections are in
  their handshake at once (the newest beyond are shut down). Every connection that closes without passing
  the handshake is counted once in ``stats["refused_connections"]`` and logged once per address and reason.
* after it (a node, a password holder under ``"plain"``, a key holder under ``"curve"``): no frame over
  ``WIRE_MAX`` either (ZeroMQ closes the connection at its header; counted in ``stats["closed_connections"]``
  and logged, when the guard finds the peer had not closed it first: ``transport_guard``), and at most ``max_peer_bytes`` (64 MiB) read from the connection and not yet handed
  over (queued messages, an unfinished multipart message) plus what arrives before the guard's next look
  (every 20 ms): a connection past it is shut down, ZeroMQ drops what it held, and it is counted in
  ``stats["cut_connections"]`` and logged. This bound reads the kernel's byte counters of TCP connections
  (Linux); on ipc (local processes only) and other systems connections are not watched.

Not bounded: how many connections a password or key holder opens (each is bounded as above). The chunked
messages a key holder can make a node keep are bounded by the node (``wire``): only from incarnations that
joined it, at most ``max_assembly_bytes`` all together, none kept past ``assembly_timeout`` without a chunk.

``client(sock, key, bus_auth)`` configures any pyzmq socket to connect to a node (e.g. a hand-written tool
or test that talks to the bus directly).

The pieces: :mod:`~pipeline.parallel.bus_credentials` (what is derived from the key),
:mod:`~pipeline.parallel.transport_guard` (``TransportGuard``, the server side) and
:mod:`~pipeline.parallel.conn_watch` (the kernel's byte counters of a connection); ``TransportGuard`` and
``MAX_PENDING`` are importable from here too.
"""
from __future__ import annotations

import logging
import os
from typing import Optional

import zmq

from .bus_credentials import USER, keypair, plain_password
from .transport_guard import MAX_PENDING, ZAP_ENDPOINT, TransportGuard

__all__ = ['BUS_AUTH_ENV', 'MECHANISMS', 'MAX_PENDING', 'ZAP_ENDPOINT', 'TransportGuard', 'client',
           'resolve_bus_auth']

log = logging.getLogger("rlpipe.parallel")

BUS_AUTH_ENV = "RLPIPE_BUS_AUTH"
MECHANISMS = ("plain", "curve")


def resolve_bus_auth(bus_auth: Optional[str] = None, multi_machine: bool = False) -> str:
    """The mechanism to use: the argument, else ``RLPIPE_BUS_AUTH``, else ``"curve"`` for a node whose traffic
    may cross a network (``multi_machine``: an address that is not loopback or ipc) and ``"plain"`` for one
    whose addresses are all local; a ValueError naming the choices for anything else."""
    chosen = bus_auth or os.environ.get(BUS_AUTH_ENV)
    name = (chosen or ("curve" if multi_machine else "plain")).strip().lower()
    if name not in MECHANISMS:
        raise ValueError(f"bus authentication {name!r} is unknown: use one of {', '.join(MECHANISMS)} "
                         f"(ZmqRouter(bus_auth=...), rlpipe run --bus-auth, or ${BUS_AUTH_ENV})")
    if name == "curve" and not zmq.has("curve"):
        raise ValueError("bus authentication 'curve' needs a libzmq built with CURVE (libsodium); this pyzmq "
                         "has none: install pyzmq's wheel from PyPI, or choose 'plain' on purpose "
                         + ("(it is the default for nodes on a network because its password and traffic "
                            "could be sniffed there)" if not chosen else ""))
    return name


def client(sock: zmq.Socket, key: bytes, bus_auth: str = "plain") -> object:
    """Configure ``sock`` (before ``connect``) to pass a node's handshake: the credential derived from ``key``.
    A client only sends; what it reads (the server's handshake) is small, so it refuses any frame over 64 KiB
    and a handshake longer than 30 s: whatever answers at a peer's address cannot make it hold more."""
    sock.setsockopt(zmq.MAXMSGSIZE, 64 << 10)
    if bus_auth == "curve":
        server_public, _ = keypair(key, "curve server")
        public, secret = keypair(key, "curve client")
        sock.curve_serverkey = server_public
        sock.curve_publickey = public
        sock.curve_secretkey = secret
    else:
        sock.plain_username = USER
        sock.plain_password = plain_password(key)
    return sock
