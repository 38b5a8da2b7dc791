"""The credentials a connection shows in the bus's security handshake, all derived from the shared key
(``RLPIPE_KEY``): the PLAIN user and password, the CURVE key pairs of the server and the clients. The key itself
never travels (see :mod:`pipeline.parallel.transport_auth`)."""
from __future__ import annotations

import hmac
from typing import Tuple

import zmq
from zmq.utils import z85

__all__ = ['USER', 'derive', 'keypair', 'plain_password']

#: the PLAIN user name every node uses
USER = b"rlpipe"


def derive(key: bytes, label: str) -> bytes:
    """32 bytes derived from ``key`` for ``label`` (HMAC-SHA256 of a fixed text)."""
    return hmac.new(key, f"rlpipe bus {label} v1".encode(), "sha256").digest()


def keypair(key: bytes, label: str) -> Tuple[bytes, bytes]:
    """A CURVE ``(public, secret)`` key pair (z85) derived from ``key`` for ``label``."""
    secret = z85.encode(derive(key, label))
    return zmq.curve_public(secret), secret


def plain_password(key: bytes) -> bytes:
    """The PLAIN password derived from ``key``."""
    return derive(key, "plain credential").hex().encode()
