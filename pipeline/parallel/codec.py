"""A small, safe binary codec for the message bus (no pickle, nothing executable on the wire).

Supported values: ``None``, ``bool``, ``int`` (any size), ``float``, ``complex``, ``str``, ``bytes``
(``bytearray``/``memoryview`` decode as ``bytes``), ``list``, ``tuple``, ``dict`` (keys of any supported
hashable type), numpy arrays and scalars of numeric/bool dtypes, and torch tensors (sent as raw bytes
with a dtype/shape header; they arrive on the CPU, contiguous, without grad).

``encode(obj)`` returns ``(meta, buffers)``: ``meta`` is a compact byte string describing the structure
with small payloads inline; large payloads (>= ``OOB_THRESHOLD`` bytes) are listed in ``buffers`` and
referenced by index, so the transport can send them as separate frames without copying.
``decode(meta, buffers)`` rebuilds the value and raises ``DecodeError`` on anything malformed: unknown
tags, lengths past the end, too deep nesting, bad dtypes. It never calls constructors named by the input.
"""
from __future__ import annotations

import struct
from typing import Any

from .codec_format import OOB_THRESHOLD, Buffer, DecodeError, EncodeError, _I
from .decoder import decode, decode_event
from .encoder import encode, encode_event

__all__ = ["encode", "decode", "encode_event", "decode_event", "dumps", "loads", "DecodeError", "EncodeError",
           "OOB_THRESHOLD"]


def dumps(obj: object) -> bytes:
    """One self-contained byte string (buffers inlined). Convenient for files and tests."""
    meta, buffers = encode(obj)
    parts = [_I.pack(len(buffers)), _I.pack(len(meta)), meta]
    for b in buffers:
        n = b.nbytes if isinstance(b, memoryview) else len(b)
        parts.append(struct.pack("<Q", n))
        parts.append(bytes(b))
    return b"".join(parts)


def loads(data: Buffer) -> Any:
    """Inverse of ``dumps``; raises ``DecodeError`` on malformed input."""
    mv = memoryview(data).cast("B")
    try:
        nbuf, nmeta = struct.unpack_from("<II", mv, 0)
        pos = 8
        if pos + nmeta > len(mv):
            raise DecodeError("truncated data")
        meta = mv[pos:pos + nmeta]
        pos += nmeta
        buffers = []
        for _ in range(nbuf):
            (n,) = struct.unpack_from("<Q", mv, pos)
            pos += 8
            if pos + n > len(mv):
                raise DecodeError("truncated data")
            buffers.append(mv[pos:pos + n])
            pos += n
    except struct.error as e:
        raise DecodeError(f"truncated data: {e}") from None
    if pos != len(mv):
        raise DecodeError(f"{len(mv) - pos} trailing bytes")
    return decode(meta, buffers)
