"""The wire format of the safe codec (``pipeline.parallel.codec``): tags, layouts and limits shared by the
encoder (``encoder``) and the decoder (``decoder``), and the two errors."""
from __future__ import annotations

import struct
from typing import Union

OOB_THRESHOLD = 16 * 1024
MAX_DEPTH = 100

Buffer = Union[bytes, bytearray, memoryview]


class EncodeError(TypeError):
    """A value that the safe codec cannot carry."""


class DecodeError(ValueError):
    """Malformed input for the safe codec."""


# Tags (one byte each).
_NONE, _TRUE, _FALSE = b"N", b"T", b"F"
_INT, _BIGINT, _FLOAT, _COMPLEX = b"i", b"I", b"f", b"c"
_STR, _BYTES, _OOB_BYTES = b"s", b"b", b"B"
_LIST, _TUPLE, _DICT = b"l", b"t", b"d"
_NDARRAY, _NPSCALAR, _TENSOR = b"a", b"g", b"x"

_q = struct.Struct("<q")
_d = struct.Struct("<d")
_dd = struct.Struct("<dd")
_I = struct.Struct("<I")
_cI = struct.Struct("<cI")
_cq = struct.Struct("<cq")
_cd = struct.Struct("<cd")
_pack_cI, _pack_cq, _pack_cd = _cI.pack, _cq.pack, _cd.pack

# numpy dtype strings accepted on decode (byte order is normalized to little endian on encode).
_NP_DTYPES = frozenset(
    ["|b1", "|i1", "|u1", "<i2", "<u2", "<i4", "<u4", "<i8", "<u8", "<f2", "<f4", "<f8", "<c8", "<c16"]
)
# torch dtypes by wire name; resolved lazily so that torch is imported only when a tensor arrives.
_TORCH_DTYPES = (
    "float32", "float64", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8", "bool",
    "complex64", "complex128",
)
_EVENT_HEAD = _cI.pack(_TUPLE, 3)
_EMPTY_DICT = _cI.pack(_DICT, 0)
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_EVENT_STR_HEAD = _EVENT_HEAD + _STR
_unpack_q = _q.unpack_from
_unpack_d = _d.unpack_from
_unpack_I = _I.unpack_from
_T_NONE, _T_TRUE, _T_FALSE, _T_INT, _T_BIGINT, _T_FLOAT, _T_COMPLEX = b"NTFiIfc"
_T_STR, _T_BYTES, _T_OOB, _T_LIST, _T_TUPLE, _T_DICT, _T_ARR, _T_NPS, _T_TENSOR = b"sbBltdagx"
