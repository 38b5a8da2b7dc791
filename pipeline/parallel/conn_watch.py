"""What the transport guard reads about one accepted TCP connection: the kernel's byte counters of its socket
(Linux), through a duplicate of the descriptor ZeroMQ accepted it on (:class:`Conn`)."""
from __future__ import annotations

import socket as _socket
import struct
import sys
import time
from typing import Optional, Tuple

try:  # the bound on what a connection can make ZeroMQ hold reads kernel counters (Linux TCP)
    import fcntl
    import termios
except ImportError:  # not POSIX: connections are not watched (``TransportGuard.delivered`` is None)
    fcntl = termios = None  # type: ignore[assignment]  # the modules' names stand for "not available"

__all__ = ['Conn', 'counters', 'peer_still_there', 'watchable']

_TCP_ESTABLISHED = 1  # tcpi_state (the first byte of struct tcp_info)


def watchable() -> bool:
    """Whether this platform lets the guard read connections' byte counters (Linux TCP)."""
    return sys.platform.startswith("linux") and fcntl is not None and hasattr(_socket, "TCP_INFO")


class Conn:
    """One accepted connection, watched through a duplicate of its descriptor (the kernel socket's counters)."""
    __slots__ = ("sock", "ino", "zfd", "address", "since", "uid", "base", "authed_at", "cut")

    def __init__(self, sock: _socket.socket, ino: int, zfd: int, address: str) -> None:
        self.sock, self.ino, self.zfd, self.address = sock, ino, zfd, address
        self.since = time.monotonic()
        self.uid: Optional[str] = None  # its ZAP user id (every message read from it carries it)
        self.base = 0  # bytes it had sent when it was linked to uid, minus those read from it by then
        self.authed_at = 0.0  # when it was seen past the handshake (0: not yet)
        self.cut = False


def counters(sock: _socket.socket) -> Optional[Tuple[int, int]]:
    """(bytes this node sent, bytes it received and ZeroMQ read) of a TCP connection; None if not readable."""
    try:
        info = sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_INFO, 232)
        unread = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except (OSError, AttributeError, ValueError):
        return None
    if len(info) < 208:  # tcpi_bytes_sent: Linux >= 4.19
        return None
    return struct.unpack_from("<Q", info, 200)[0], struct.unpack_from("<Q", info, 128)[0] - unread


def peer_still_there(sock: _socket.socket) -> Optional[bool]:
    """Whether the peer of a TCP connection that ZeroMQ closed had not ended it: the connection is still
    established (no FIN or reset came), or it holds bytes nobody read (ZeroMQ reads a connection its peer
    closes to its end). ZeroMQ's ``close`` leaves the connection open while the guard's duplicate of the
    descriptor is; so True means ZeroMQ dropped it (a frame over ``ZMQ_MAXMSGSIZE``, a protocol error).
    None if not readable."""
    try:
        state = sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_INFO, 8)[0]
        unread = struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0]
    except (OSError, AttributeError, ValueError, IndexError):
        return None
    return state == _TCP_ESTABLISHED or unread > 0
