"""Framing and authentication of bus messages (the wire format of ``ZmqRouter``).

A message is one or more ZeroMQ frames. The first frame is a 32-byte HMAC-SHA256 under the shared key over
a fixed header (``_HEADER``: magic, version, kind, sender id and session, receiver id and session, sequence
number, number of extra frames) and the body (the codec's ``meta``). Large binary payloads (tensors, arrays,
bytes) travel as extra frames, sent without copying or joining them: a message with extra frames carries a
16-byte random nonce after the header, and the MAC of the first frame also covers the AES-GMAC tags of the
extra frames (AES-GCM with no plaintext, frame ``i`` under GCM nonce ``i``) under a one-time key derived from
that nonce with HMAC-SHA256 (a key never used twice; the tags are recomputed by the receiver, not sent).
AES-GMAC reads large frames several times faster than SHA-256 or keyed BLAKE2b, which is what makes
large messages cheap; HMAC-SHA256 stays for the first frame, where it beats keyed BLAKE2b except on the
smallest messages (``benchmarks/bench_mac.py``; figures: docs/benchmarks.md). The HMAC is computed from the two padded-key SHA-256 states prepared once (``keyed_hmac``): the
same RFC 2104 value as ``hmac``, a little cheaper than copying a keyed HMAC object. A message that fails
the check or is malformed is dropped and counted (``stats``) before anything in it is decoded. Each message
names the receiver's id and incarnation and carries a per-pair sequence number, so duplicates and replays
are dropped too (a HELLO, sent before the pair has sequence numbers, is checked by ``handshake`` instead).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import struct
from os import urandom as _urandom
from typing import Any, Callable, List, Optional, Sequence, Tuple

from .replay import ReplayWindow

try:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM as _AESGCM
except ImportError:  # checked when a router is built (see require_payload_mac)
    _AESGCM = None

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
_SEQ_AT = 32 + _PREFIX.size  # where the sequence number starts; first[32:_SEQ_AT] is the header prefix
_BODY_AT = 32 + _HEADER_SIZE  # where the body of a single-frame message starts
_unpack_header = _HEADER.unpack_from
_unpack_seq = _SEQ.unpack_from
_pack_seq = _SEQ.pack
_MAGIC = b"RP"
_VERSION = 2
_MAC_LEN = 32
K_DATA, K_HELLO, K_ACK, K_HEARTBEAT, K_BYE = 1, 2, 3, 4, 5
_KIND_NAMES = {K_DATA: "data", K_HELLO: "hello", K_ACK: "ack", K_HEARTBEAT: "heartbeat", K_BYE: "bye"}
_LEN = struct.Struct("<Q")
_NONCE = 16  # bytes of the per-message nonce after the header of a message with extra frames
_compare_digest = hmac.compare_digest
_INF = float("inf")


def keyed_hmac(key: bytes) -> Tuple[Callable[[Any], bytes], Callable[[Any, Any], bytes]]:
    """HMAC-SHA256 under ``key`` (RFC 2104, the value ``hmac.digest(key, msg, "sha256")`` gives) as two
    functions, of one part and of two parts (hashed one after the other, not joined). The inner and outer
    padded-key states are hashed once here; a message then costs two copies of a SHA-256 state."""
    if len(key) > 64:
        key = hashlib.sha256(key).digest()
    key = key.ljust(64, b"\0")
    inner = hashlib.sha256(bytes(b ^ 0x36 for b in key)).copy
    outer = hashlib.sha256(bytes(b ^ 0x5C for b in key)).copy

    def mac(data: Any) -> bytes:
        h = inner()
        h.update(data)
        o = outer()
        o.update(h.digest())
        return o.digest()

    def mac2(a: Any, b: Any) -> bytes:
        h = inner()
        h.update(a)
        h.update(b)
        o = outer()
        o.update(h.digest())
        return o.digest()

    return mac, mac2


def _payload_tag(otk_mac: Callable[[Any], bytes], nonce: bytes, buffers: Sequence[Any]) -> bytes:
    """The tags of the extra frames, bound into the MAC of the first frame: AES-GMAC (AES-GCM with no
    plaintext) of each frame under a one-time key derived from the message's random ``nonce`` with
    ``otk_mac`` (HMAC-SHA256 under the payload key), frame ``i`` under GCM nonce ``i``. The frames are read
    in place, one after the other, never joined or copied."""
    gmac = _AESGCM(otk_mac(nonce)).encrypt
    if len(buffers) == 1:
        return gmac(_GCM_NONCES[0], b"", buffers[0])
    return b"".join([gmac(_gcm_nonce(i), b"", b) for i, b in enumerate(buffers)])


_GCM_NONCES = [i.to_bytes(12, "little") for i in range(64)]


def _gcm_nonce(i: int) -> bytes:
    return _GCM_NONCES[i] if i < 64 else i.to_bytes(12, "little")


def is_local_address(address: str) -> bool:
    """True for ipc/inproc addresses and tcp addresses on the loopback interface."""
    if address.startswith(("ipc://", "inproc://")):
        return True
    if not address.startswith("tcp://"):
        return False
    host = address[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def require_payload_mac() -> None:
    if _AESGCM is None:
        raise ImportError("the message bus needs the 'cryptography' package (AES-GMAC for large payloads): "
                          "pip install cryptography, or install rlpipe with the [dist] extra")


class Framing:
    """Signing and checking messages; a mixin of ``ZmqRouter`` (uses its ``node_id``, ``session``, ``_mac``,
    ``_mac2``, ``_otk_mac``, ``_rx_seq``, ``_rx_known`` and ``stats``)."""

    def _frames(self, kind: int, peer_id: int, peer_session: int, seq: int, meta: bytes,
                buffers: Sequence[Any], digest: bytes) -> List[Any]:
        """The frames of one message. With ``buffers``, ``digest`` is ``nonce + tag`` (``_seal``): the nonce
        travels after the header, the tag is covered by the MAC but not sent (the receiver recomputes it)."""
        head = _HEADER.pack(_MAGIC, _VERSION, kind, self.node_id, self.session, peer_id, peer_session, seq,
                            len(buffers))
        if buffers:
            body = head + digest[:_NONCE] + meta
            return [self._mac2(body, digest[_NONCE:]) + body, *buffers]
        body = head + meta
        return [self._mac(body) + body]

    def _seal(self, buffers: Sequence[Any]) -> bytes:
        """``nonce + tag`` for a message carrying ``buffers`` as extra frames (see ``_payload_tag``)."""
        nonce = _urandom(_NONCE)
        return nonce + _payload_tag(self._otk_mac, nonce, buffers)

    def _open(self, first: bytes, extra: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
        """Check one message (MAC, header, receiver, sequence number) and return its header fields; None when
        it was dropped (and counted). Nothing in the message is parsed before the MAC check passes."""
        if len(first) < _MIN_FRAME:
            self._drop("malformed", f"first frame of {len(first)} bytes is shorter than MAC + header")
            return None
        signed = memoryview(first)[_MAC_LEN:]  # no copy of the message
        if extra:  # the nonce after the header is only an input to the tag: nothing is parsed yet
            nonce = first[_BODY_AT:_BODY_AT + _NONCE]
            mac = self._mac2(signed, _payload_tag(self._otk_mac, nonce, extra))
        else:
            mac = self._mac(signed)
        if not _compare_digest(mac, first[:_MAC_LEN]):
            self._drop("auth_failed", "HMAC check failed (forged or corrupted)")
            return None
        return self._check_header(first, extra)

    def _check_header(self, first: bytes, extra: Sequence[Any]) -> Optional[Tuple[Any, ...]]:
        """``_open`` after the MAC check passed: the header fields, or None when the message was dropped."""
        magic, version, kind, sender, session, dest, dest_session, seq, nbufs = _unpack_header(first, _MAC_LEN)
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
                # From now on a data message of this sender incarnation to this one is known by its header
                # prefix (magic, version, kind, sender, session, receiver, receiver session): one dict lookup
                # on the receiver's fast path (``Reader._handle``) instead of unpacking and comparing fields.
                prefix = _PREFIX.pack(_MAGIC, _VERSION, K_DATA, sender, session, self.node_id, self.session)
                self._rx_known[prefix] = (window, sender, session)
            if seq == window.floor + 1 and not window.bits:  # in order: ReplayWindow.accept's fast path
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
