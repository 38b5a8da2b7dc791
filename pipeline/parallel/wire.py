"""Framing and authentication of bus messages (the wire format of ``ZmqRouter``).

A message is one or more ZeroMQ frames. The first frame is a 32-byte HMAC-SHA256 under the shared key over
a fixed header (``_HEADER``: magic, version, kind, sender id and session, receiver id and session, sequence
number, number of extra frames) and the body (the codec's ``meta``). Large binary payloads travel as the
extra frames, covered by the MAC through a SHA-256 digest of them (length-prefixed). A message that fails
the check or is malformed is dropped and counted (``stats``) before anything in it is decoded. Each message
names the receiver's id and incarnation and carries a per-pair sequence number, so duplicates and replays
are dropped too (a HELLO, sent before the pair has sequence numbers, is checked by ``handshake`` instead).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import struct
from typing import Any, List, Optional, Sequence, Tuple

from .replay import ReplayWindow

log = logging.getLogger("rlpipe.parallel")

# Event names the bus itself delivers or sends.
PEER_DEAD = "__peer_dead__"
PEER_LEFT = "__peer_left__"
PEER_JOINED = "__peer_joined__"
FINISH = "__finish__"

# Wire header (after the 32-byte MAC): magic, version, kind, sender id, sender session, dest id,
# dest session, seq, number of extra frames.
_HEADER = struct.Struct("<2sBBiQiQQI")
_PREFIX = struct.Struct("<2sBBiQiQ")  # the header up to the sequence number
_SEQ = struct.Struct("<QI")  # the header's sequence number and number of extra frames
_HEADER_SIZE = _HEADER.size
_MIN_FRAME = 32 + _HEADER_SIZE
_unpack_header = _HEADER.unpack_from
_pack_seq = _SEQ.pack
_MAGIC = b"RP"
_VERSION = 1
_MAC_LEN = 32
K_DATA, K_HELLO, K_ACK, K_HEARTBEAT, K_BYE = 1, 2, 3, 4, 5
_KIND_NAMES = {K_DATA: "data", K_HELLO: "hello", K_ACK: "ack", K_HEARTBEAT: "heartbeat", K_BYE: "bye"}
_LEN = struct.Struct("<Q")
_compare_digest = hmac.compare_digest
_INF = float("inf")


def _digest(buffers: Sequence[Any]) -> bytes:
    """SHA-256 over the out-of-band frames (length-prefixed), bound into the MAC of the first frame."""
    h = hashlib.sha256()
    for b in buffers:
        n = b.nbytes if isinstance(b, memoryview) else len(b)
        h.update(_LEN.pack(n))
        h.update(b)
    return h.digest()


def is_local_address(address: str) -> bool:
    """True for ipc/inproc addresses and tcp addresses on the loopback interface."""
    if address.startswith(("ipc://", "inproc://")):
        return True
    if not address.startswith("tcp://"):
        return False
    host = address[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


class Framing:
    """Signing and checking messages; a mixin of ``ZmqRouter`` (uses its ``node_id``, ``session``, ``_hmac``,
    ``_rx_seq`` and ``stats``)."""

    def _frames(self, kind: int, peer_id: int, peer_session: int, seq: int, meta: bytes,
                buffers: Sequence[Any], digest: bytes) -> List[Any]:
        head = _HEADER.pack(_MAGIC, _VERSION, kind, self.node_id, self.session, peer_id, peer_session, seq,
                            len(buffers))
        body = head + meta
        h = self._hmac.copy()
        h.update(body)
        if digest:
            h.update(digest)
        return [h.digest() + body, *buffers] if buffers else [h.digest() + body]

    def _open(self, first: bytes, extra: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
        """Check one message (MAC, header, receiver, sequence number) and return its header fields; None when
        it was dropped (and counted). Nothing in the message is parsed before the MAC check passes."""
        if len(first) < _MIN_FRAME:
            self._drop("malformed", f"first frame of {len(first)} bytes is shorter than MAC + header")
            return None
        body = first[_MAC_LEN:]
        h = self._hmac.copy()
        h.update(body)
        if extra:
            h.update(_digest(extra))
        if not _compare_digest(h.digest(), first[:_MAC_LEN]):
            self._drop("auth_failed", "HMAC check failed (wrong key, forged or corrupted)")
            return None
        # Authenticated: only now is anything in the message parsed.
        magic, version, kind, sender, session, dest, dest_session, seq, nbufs = _unpack_header(body)
        if magic != _MAGIC or version != _VERSION or kind not in _KIND_NAMES or nbufs != len(extra):
            self._drop("malformed", f"bad header (magic {magic!r}, version {version}, kind {kind})")
            return None
        if kind != K_HELLO:
            if dest != self.node_id or dest_session != self.session:
                self._drop("misrouted", f"{_KIND_NAMES[kind]} from node {sender} for node {dest} (session "
                           f"{dest_session:x}), this is node {self.node_id} (session {self.session:x})")
                return None
            window = self._rx_seq.get((sender, session))
            if window is None:
                window = self._rx_seq[(sender, session)] = ReplayWindow()
            if seq == window.floor + 1 and not window.above:  # in order: ReplayWindow.accept's fast path
                window.floor = window.top = seq
            else:
                lost = window.accept(seq)
                if lost < 0:
                    self._drop("duplicates", f"{_KIND_NAMES[kind]} #{seq} from node {sender} refused by the "
                               f"anti-replay window (seen before, or older than the window)")
                    return None
                if lost:
                    self.stats["gaps"] += lost
                    log.warning("node %d: %d message(s) from node %d never arrived (lost on the way)",
                                self.node_id, lost, sender)
        return magic, version, kind, sender, session, dest, dest_session, seq, nbufs

    def _drop(self, counter: str, why: str) -> None:
        self.stats[counter] += 1
        n = self.stats[counter]
        if n <= 5 or n % 1000 == 0:
            log.warning("node %d: dropped a message (%s): %s [%d so far]", self.node_id, counter, why, n)
