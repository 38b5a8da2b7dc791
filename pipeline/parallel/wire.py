"""Framing and authentication of bus messages (``Framer``: the wire format of ``ZmqRouter``).

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

Size of what ZeroMQ holds (issue 28). ZeroMQ reads a frame whole before anyone can check it, and a multipart
message whole before handing over its first frame; a connection may even declare a frame before its
handshake is over. So every ZeroMQ message of the bus is small: at most ``WIRE_MAX`` bytes, all its frames
together (1 MiB of payload plus room for the header), and a node's socket refuses any longer frame at its
header (``ZMQ_MAXMSGSIZE``, which closes the connection; past its handshake, such a close is counted,
``stats["closed_connections"]``, and logged on Linux TCP: ``transport_guard``). A message that would be
larger (a big tensor, weights) is *chunked*: a head (kind ``K_LARGE``: header, a 16-byte nonce and the sizes
of its parts, the codec's ``meta`` and each buffer; HMAC-SHA256 like any message, with a sequence number)
followed by chunks of at most ``CHUNK`` bytes of one part each (kind ``K_CHUNK``, two frames: MAC + header,
then the data without a copy). A chunk's MAC is the HMAC of its header (sender, receiver, the head's sequence
number and the chunk's index) and of the AES-GMAC tag of its data under the one-time key derived from the
head's nonce, GCM nonce = the chunk's index.

What a holder of the key can make a receiver keep of chunked messages (issue 45). A head is kept only from
a sender incarnation that joined the receiver (a peer entry of that session that did not leave: a genuine
node joins before it sends, ``handshake``); others are dropped (``stats["unjoined"]``). It keeps at most
one unfinished chunked message per such incarnation, and refuses a head that declares a part (the ``meta``
included) over ``max_frame_size`` or more than ``max_message_size`` in all (``oversize``). Nothing is
allocated at the head: a chunk is copied in only after its MAC check, a part grows as its chunks arrive (a
part that fits in one chunk is used in place), so a message holds the bytes received, not those declared.
All unfinished messages together hold at most ``max_assembly_bytes``: the one whose chunk would pass it is
dropped (``assembly_full``); one that gets no chunk for ``assembly_timeout`` s while the receiver reads is
dropped (``stalled``), and one whose sender starts another (``unfinished``) or leaves too. Each drop is
counted and logged (``NodeState.drop``).
"""
from __future__ import annotations

import hashlib
import hmac
import logging
import struct
import threading
import time
from os import urandom as _urandom
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

from .codec_format import Buffer

from .replay import ReplayWindow

if TYPE_CHECKING:
    from .peers import Peers
    from .node_state import NodeState

_AESGCM: Any
try:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM as _AESGCM_class
    _AESGCM = _AESGCM_class
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
_VERSION = 3  # 3: chunked large messages (K_LARGE, K_CHUNK); no ZeroMQ message above WIRE_MAX
_MAC_LEN = 32
K_DATA, K_HELLO, K_ACK, K_HEARTBEAT, K_BYE, K_LARGE, K_CHUNK = 1, 2, 3, 4, 5, 6, 7
_KIND_NAMES = {K_DATA: "data", K_HELLO: "hello", K_ACK: "ack", K_HEARTBEAT: "heartbeat", K_BYE: "bye",
               K_LARGE: "large message", K_CHUNK: "chunk"}
_KIND_AT = 32 + 3  # offset of the kind byte (after the MAC, the magic and the version)
_LEN = struct.Struct("<Q")
_NONCE = 16  # bytes of the per-message nonce after the header of a message with extra frames
CHUNK = 1 << 20  # payload bytes per chunk of a chunked message
WIRE_MAX = CHUNK + (64 << 10)  # the most one ZeroMQ message of the bus holds, all frames (ZMQ_MAXMSGSIZE)
MAX_PARTS = 1 << 16  # buffers of one chunked message, at most (its head lists their sizes)
_compare_digest = hmac.compare_digest
_INF = float("inf")


def keyed_hmac(key: bytes) -> Tuple[Callable[[object], bytes], Callable[[object, object], bytes]]:
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


def _payload_tag(otk_mac: Callable[[Buffer], bytes], nonce: bytes, buffers: Sequence[Buffer]) -> bytes:
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


# The header fields of a checked message: magic, version, kind, sender, session, dest, dest session, seq, nbufs.
Header = Tuple[bytes, int, int, int, int, int, int, int, int]
# A chunked message whose last chunk arrived: its meta part, its buffers, its sender and the sender's session.
Assembled = Tuple[bytes, List[Any], int, int]


def is_chunk(first: bytes, extra: Sequence[Buffer]) -> bool:
    """Whether a message is a chunk of a chunked message (recognised by its unauthenticated kind byte; it is
    checked against the head it claims to belong to: ``Framer.on_chunk``), rather than one for ``open``."""
    return len(first) >= _MIN_FRAME and first[_KIND_AT] == K_CHUNK and len(extra) == 1


class Framer:
    """The wire format of one node (see the module docstring): signs outgoing messages, checks incoming ones
    (MAC, header, receiver, sequence number) and reassembles chunked messages.

    Owns the MAC functions under the shared key (``mac``, ``mac2``, and ``otk_mac``, under the payload key
    the one-time keys of extra frames and chunks come from); per sender incarnation the anti-replay window
    (``_rx_seq``) and the header prefix of its data messages (``rx_known``, the reader's fast path); and the
    unfinished chunked messages (``assemblies``, shared with the membership, which discards a departed
    peer's). Reads this node's id and session and counts in its stats (``node``), and reads the peer entries
    (``peers``: a head is kept only from a joined incarnation; a chunk keeps its sender alive)."""

    def __init__(self, node: NodeState, key: bytes, peers: Peers, assemblies: _Assemblies, max_frame_size: int,
                 max_message_size: int, assembly_timeout: float) -> None:
        self._node, self._peers = node, peers
        # HMAC-SHA256 of one part / of two parts under the shared key (padded-key states prepared once).
        self.mac, self.mac2 = keyed_hmac(key)
        # One-time AES-GMAC keys of the extra frames come from HMAC(payload key, nonce); the payload key is
        # derived from the shared key, so that the first-frame MAC key is never used for anything else.
        require_payload_mac()
        self.otk_mac = keyed_hmac(hmac.new(key, b"rlpipe payload-mac key v2", "sha256").digest())[0]
        self._rx_seq: Dict[Tuple[int, int], ReplayWindow] = {}  # (sender, session) -> its ReplayWindow
        # header prefix of a data message -> (window, sender, session)
        self.rx_known: Dict[bytes, Tuple[ReplayWindow, int, int]] = {}
        # Per (sender, session): its unfinished chunked message; all of them hold at most max_assembly_bytes.
        self.assemblies = assemblies
        self.max_frame_size, self.max_message_size = max_frame_size, max_message_size
        self.assembly_timeout = assembly_timeout

    def frames(self, kind: int, peer_id: int, peer_session: int, seq: int, meta: bytes,
               buffers: Sequence[Buffer], digest: bytes) -> List[Buffer]:
        """The frames of one message. With ``buffers``, ``digest`` is ``nonce + tag`` (``seal``): the nonce
        travels after the header, the tag is covered by the MAC but not sent (the receiver recomputes it)."""
        node = self._node
        head = _HEADER.pack(_MAGIC, _VERSION, kind, node.node_id, node.session, peer_id, peer_session, seq,
                            len(buffers))
        if buffers:
            body = head + digest[:_NONCE] + meta
            return [self.mac2(body, digest[_NONCE:]) + body, *buffers]
        body = head + meta
        return [self.mac(body) + body]

    def seal_large(self, meta: bytes, buffers: Sequence[Buffer]) -> _Large:
        """Prepare a chunked message (see the module docstring): its nonce, the parts' sizes and each chunk's
        data and GMAC tag, computed once for every receiver (the MACs, which name the receiver, per send)."""
        nonce = _urandom(_NONCE)
        gmac = _AESGCM(self.otk_mac(nonce)).encrypt
        parts = [meta, *buffers]
        chunks: List[Tuple[object, bytes]] = []
        for part in parts:
            mv = memoryview(part).cast("B")  # slices of it are views, not copies
            for off in range(0, len(mv), CHUNK):
                data = mv[off:off + CHUNK] if len(mv) > CHUNK else mv
                chunks.append((data, gmac(_gcm_nonce(len(chunks)), b"", data)))
        return _Large(nonce + b"".join([_LEN.pack(len(p)) for p in parts]), len(buffers), chunks)

    def large_messages(self, large: _Large, peer_id: int, peer_session: int, seq: int) -> List[List[Buffer]]:
        """The ZeroMQ messages of a chunked message for one receiver: the head, then one per chunk."""
        node = self._node
        head = _HEADER.pack(_MAGIC, _VERSION, K_LARGE, node.node_id, node.session, peer_id, peer_session, seq,
                            large.nbufs) + large.body
        out: List[List[Buffer]] = [[self.mac(head) + head]]
        pack, mac2 = _HEADER.pack, self.mac2
        for i, (data, tag) in enumerate(large.chunks):
            h = pack(_MAGIC, _VERSION, K_CHUNK, node.node_id, node.session, peer_id, peer_session, seq, i)
            out.append([mac2(h, tag) + h, data])
        return out

    def seal(self, buffers: Sequence[Buffer]) -> bytes:
        """``nonce + tag`` for a message carrying ``buffers`` as extra frames (see ``_payload_tag``)."""
        nonce = _urandom(_NONCE)
        return nonce + _payload_tag(self.otk_mac, nonce, buffers)

    def open(self, first: bytes, extra: Sequence[Buffer]) -> Optional[Header]:
        """Check one message that is not a chunk (``is_chunk``: MAC, header, receiver, sequence number) and
        return its header fields; None when it was dropped (and counted). Nothing in the message is parsed
        before the MAC check passes."""
        if len(first) < _MIN_FRAME:
            self._node.drop("malformed", f"first frame of {len(first)} bytes is shorter than MAC + header")
            return None
        signed = memoryview(first)[_MAC_LEN:]  # no copy of the message
        if extra:  # the nonce after the header is only an input to the tag: nothing is parsed yet
            nonce = first[_BODY_AT:_BODY_AT + _NONCE]
            mac = self.mac2(signed, _payload_tag(self.otk_mac, nonce, extra))
        else:
            mac = self.mac(signed)
        if not _compare_digest(mac, first[:_MAC_LEN]):
            self._node.drop("auth_failed", "HMAC check failed (forged or corrupted)")
            return None
        return self.check_header(first, extra)

    def check_header(self, first: bytes, extra: Sequence[Buffer]) -> Optional[Header]:
        """``open`` after the MAC check passed: the header fields, or None when the message was dropped."""
        node = self._node
        magic, version, kind, sender, session, dest, dest_session, seq, nbufs = _unpack_header(first, _MAC_LEN)
        if magic != _MAGIC or version != _VERSION or kind not in _KIND_NAMES or kind == K_CHUNK \
                or (nbufs != len(extra) if kind != K_LARGE else (extra or nbufs >= MAX_PARTS)):
            node.drop("malformed", f"bad header (magic {magic!r}, version {version}, kind {kind})")
            return None
        if kind != K_HELLO:
            if dest != node.node_id or dest_session != node.session:
                node.drop("misrouted", f"{_KIND_NAMES[kind]} from node {sender} for node {dest} (session "
                          f"{dest_session:x}), this is node {node.node_id} (session {node.session:x})")
                return None
            window = self._rx_seq.get((sender, session))
            if window is None:
                window = self._rx_seq[(sender, session)] = ReplayWindow()
                # From now on a data message of this sender incarnation to this one is known by its header
                # prefix (magic, version, kind, sender, session, receiver, receiver session): one dict lookup
                # on the receiver's fast path (``Reader._read``) instead of unpacking and comparing fields.
                prefix = _PREFIX.pack(_MAGIC, _VERSION, K_DATA, sender, session, node.node_id, node.session)
                self.rx_known[prefix] = (window, sender, session)
            if seq == window.floor + 1 and not window.bits:  # in order: ReplayWindow.accept's fast path
                window.floor = window.top = seq
            else:
                lost = window.accept(seq)
                if lost < 0:
                    node.drop("duplicates", f"{_KIND_NAMES[kind]} #{seq} from node {sender} refused by the "
                              f"anti-replay window (seen before, or older than the window)")
                    return None
                if lost:
                    node.stats["gaps"] += lost
                    log.warning("node %d: %d message(s) from node %d never arrived (lost on the way)",
                                node.node_id, lost, sender)
        return magic, version, kind, sender, session, dest, dest_session, seq, nbufs

    def on_large_head(self, first: bytes, sender: int, session: int, seq: int, nbufs: int) -> None:
        """An authenticated head of a chunked message: start collecting its chunks (dropping an unfinished
        earlier one of the same sender incarnation: its chunks stopped coming). Only a joined peer's
        incarnation gets one (see the module docstring)."""
        drop = self._node.drop
        body = first[_BODY_AT:]
        if len(body) != _NONCE + 8 * (nbufs + 1):
            drop("malformed", f"head of a chunked message from node {sender} has {len(body)} bytes")
            return
        peer = self._peers.get(sender)
        if peer is None or peer.session != session or peer.left:
            drop("unjoined", f"head of a chunked message (#{seq}) from node {sender}, session {session:x}: "
                 "that incarnation has not joined this node (or left); its chunks are not kept")
            return
        key = (sender, session)
        if self.assemblies.discard(key) is not None:
            drop("unfinished", f"a chunked message from node {sender} stopped before its end")
        sizes = struct.unpack_from(f"<{nbufs + 1}Q", body, _NONCE)
        total = sum(sizes)
        if max(sizes) > self.max_frame_size or total > self.max_message_size:
            drop("oversize", f"a message of {total} bytes from node {sender}, the largest part "
                 f"{max(sizes)} bytes (max_frame_size {self.max_frame_size}, max_message_size "
                 f"{self.max_message_size}): its chunks are not kept (raise both on every node if genuine)")
            return
        self.assemblies.start(key, _Assembly(seq, _AESGCM(self.otk_mac(body[:_NONCE])).encrypt, sizes))

    def on_chunk(self, first: bytes, data: object) -> Optional[Assembled]:
        """One chunk (``is_chunk``): found by its (unauthenticated) header among the unfinished messages,
        then MAC-checked with that message's one-time key before a byte of it is kept. Returns the message
        when this chunk completed it (for the reader to deliver), else None."""
        node = self._node
        drop = node.drop
        if len(first) != _MIN_FRAME:
            drop("malformed", f"chunk header of {len(first)} bytes")
            return None
        magic, version, kind, sender, session, dest, dest_session, seq, index = _unpack_header(first, _MAC_LEN)
        key = (sender, session)
        asm = self.assemblies.get(key)
        if asm is None or asm.seq != seq or magic != _MAGIC or version != _VERSION:
            drop("malformed", f"a chunk (#{index} of message #{seq} from node {sender}) of no message "
                 "in progress (forged, replayed, or its head was dropped)")
            return None
        if index != asm.next_index:
            drop("duplicates" if index < asm.next_index else "malformed",
                 f"chunk #{index} of message #{seq} from node {sender} out of order (expected "
                 f"#{asm.next_index})")
            return None
        if not _compare_digest(self.mac2(memoryview(first)[_MAC_LEN:], asm.gmac(_gcm_nonce(index), b"", data)),
                               first[:_MAC_LEN]):
            drop("auth_failed", f"chunk #{index} of message #{seq} from node {sender}: MAC check failed")
            return None
        if dest != node.node_id or dest_session != node.session:  # authenticated, so a bug of the sender
            drop("misrouted", f"chunk from node {sender} for node {dest}")
            return None
        peer = self._peers.get(sender)
        if peer is not None and peer.session == session:
            peer.rx_count += 1  # a long transfer keeps the sender alive
        outcome = self.assemblies.add(key, asm, data)
        if outcome == _DONE:
            meta = asm.parts[0]
            return meta if isinstance(meta, bytes) else bytes(meta), asm.parts[1:], sender, session
        if outcome == _FULL:
            drop("assembly_full", f"chunk #{index} of message #{seq} from node {sender} would make the "
                 f"unfinished chunked messages of this node hold more than max_assembly_bytes "
                 f"({self.assemblies.limit}) together: the message is dropped ({asm.held} of its "
                 f"{sum(asm.sizes)} bytes had arrived)")
        elif outcome == _OVERRUN:
            drop("malformed", f"chunk #{index} of message #{seq} from node {sender} overruns its part")
        elif outcome == _GONE:
            drop("malformed", f"chunk #{index} of message #{seq} from node {sender}: the message was "
                 "dropped meanwhile (stalled, or its sender left)")
        return None

    def expire(self, now: float, reader_busy: bool, grace_from: float) -> None:
        """Drop the unfinished chunked messages that got no chunk for ``assembly_timeout`` s while this node
        was reading (the heartbeat thread calls it, with whether a listener runs now and since when silence
        counts: as for heartbeats, time this node spent in a listener or paused is not held against the
        sender)."""
        timeout = self.assembly_timeout
        if not len(self.assemblies) or reader_busy or now - grace_from <= timeout:
            return
        for (sender, _), asm in self.assemblies.expire(now - timeout):
            self._node.drop("stalled", f"a chunked message (#{asm.seq}) from node {sender} got no chunk for "
                            f"{now - asm.last:.1f} s (assembly_timeout {timeout:g} s): dropped, its {asm.held} "
                            f"bytes freed ({sum(asm.sizes)} declared)")


class _Large:
    """A chunked message prepared by ``Framer.seal_large``: the head's body after the header, the number of
    buffers and ``(data, gmac tag)`` per chunk."""
    __slots__ = ("body", "nbufs", "chunks")

    def __init__(self, body: bytes, nbufs: int, chunks: List[Tuple[Any, bytes]]) -> None:
        self.body, self.nbufs, self.chunks = body, nbufs, chunks


class _Assembly:
    """An unfinished chunked message: the parts' sizes from its head and what arrived so far. A part grows as
    its chunks arrive (``held``: the bytes received), whatever size its head declared."""
    __slots__ = ("seq", "gmac", "sizes", "parts", "part", "offset", "next_index", "held", "last")

    def __init__(self, seq: int, gmac: Callable[..., bytes], sizes: Sequence[int]) -> None:
        self.seq, self.gmac, self.sizes = seq, gmac, sizes
        self.parts: List[Any] = [b"" if n == 0 else None for n in sizes]
        self.part, self.offset, self.next_index = 0, 0, 0
        self.held = 0
        self.last = time.monotonic()  # when its head or its latest chunk came
        self._skip_empty()

    def _skip_empty(self) -> None:
        while self.part < len(self.sizes) and self.sizes[self.part] == 0:
            self.part += 1

    def add(self, data: Any) -> Optional[bool]:
        """Append an authenticated chunk: True when the message is complete, None if it does not fit."""
        n = len(data)
        if self.part >= len(self.sizes) or n == 0 or self.offset + n > self.sizes[self.part]:
            return None
        size = self.sizes[self.part]
        if n == size:
            self.parts[self.part] = data  # the whole part in one chunk: its frame's memory, no copy
        elif self.offset == 0:
            self.parts[self.part] = bytearray(data)
        else:
            self.parts[self.part] += data  # grows with what arrived (amortised, no second copy kept)
        self.held += n
        self.last = time.monotonic()
        self.offset += n
        self.next_index += 1
        if self.offset == size:
            self.part += 1
            self.offset = 0
            self._skip_empty()
        return self.part >= len(self.sizes)


# What ``_Assemblies.add`` did with a chunk.
_MORE, _DONE, _FULL, _OVERRUN, _GONE = "more", "done", "full", "overrun", "gone"


class _Assemblies:
    """A node's unfinished chunked messages, one per sender incarnation, and the bytes they hold together
    (``held``, kept at most ``limit``). The reader starts and fills them; the heartbeat thread expires
    stalled ones and a peer's departure discards its own: every change is made under one lock."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._by_sender: Dict[Tuple[int, int], _Assembly] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._by_sender)

    def get(self, key: Tuple[int, int]) -> Optional[_Assembly]:
        return self._by_sender.get(key)

    def start(self, key: Tuple[int, int], asm: _Assembly) -> None:
        """``asm`` (nothing received yet) is the unfinished message of ``key`` now (``discard`` the old one
        first)."""
        with self._lock:
            self._remove(key)
            self._by_sender[key] = asm

    def discard(self, key: Tuple[int, int]) -> Optional[_Assembly]:
        """Forget the unfinished message of ``key``; return it (None if there was none)."""
        with self._lock:
            return self._remove(key)

    def add(self, key: Tuple[int, int], asm: _Assembly, data: Any) -> str:
        """Keep an authenticated chunk of ``asm``, the message of ``key``: ``_MORE``; ``_DONE`` (complete, and
        forgotten); or it is not kept: ``_FULL`` (it would make all the messages hold more than ``limit``:
        ``asm`` is forgotten), ``_OVERRUN`` (it does not fit its part: forgotten too) or ``_GONE`` (``asm``
        was forgotten meanwhile, e.g. expired while the chunk's MAC was checked)."""
        with self._lock:
            if self._by_sender.get(key) is not asm:
                return _GONE
            if self.held + len(data) > self.limit:
                self._remove(key)
                return _FULL
            before = asm.held
            done = asm.add(data)
            self.held += asm.held - before
            if done is None:
                self._remove(key)
                return _OVERRUN
            if done:
                self._remove(key)
                return _DONE
            return _MORE

    def expire(self, before: float) -> List[Tuple[Tuple[int, int], _Assembly]]:
        """Forget and return the messages whose latest chunk (or head) came before ``before`` (monotonic)."""
        with self._lock:
            old = [(k, a) for k, a in self._by_sender.items() if a.last < before]
            for k, _ in old:
                self._remove(k)
            return old

    def _remove(self, key: Tuple[int, int]) -> Optional[_Assembly]:
        asm = self._by_sender.pop(key, None)
        if asm is not None:
            self.held -= asm.held
        return asm
