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
import sys
from typing import Any, List, Sequence, Tuple, Union

__all__ = ["encode", "decode", "encode_event", "decode_event", "dumps", "loads", "DecodeError", "EncodeError", "OOB_THRESHOLD"]

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


def _len_prefixed(out: List[bytes], tag: bytes, data: bytes) -> None:
    out.append(tag)
    out.append(_I.pack(len(data)))
    out.append(data)


class _Encoder:
    __slots__ = ("out", "buffers", "np", "torch")

    def __init__(self) -> None:
        self.out: List[bytes] = []
        self.buffers: List[Buffer] = []
        self.np = sys.modules.get("numpy")
        self.torch = sys.modules.get("torch")

    def raw(self, data: Buffer) -> None:
        """A bytes payload: ``b`` + length + bytes inline if small, else ``B`` + index of a buffer."""
        n = data.nbytes if isinstance(data, memoryview) else len(data)
        if n >= OOB_THRESHOLD:
            self.out.append(_cI.pack(_OOB_BYTES, len(self.buffers)))
            self.buffers.append(data)
        else:
            self.out.append(_cI.pack(_BYTES, n))
            self.out.append(data if type(data) is bytes else bytes(data))

    def enc(self, obj: Any, depth: int) -> None:
        out = self.out
        t = type(obj)
        if t is str:
            data = obj.encode("utf-8", "surrogatepass")
            out.append(_pack_cI(_STR, len(data)))
            out.append(data)
        elif t is int:
            if -(1 << 63) <= obj < (1 << 63):
                out.append(_pack_cq(_INT, obj))
            else:
                _len_prefixed(out, _BIGINT, obj.to_bytes((obj.bit_length() + 8) // 8, "little", signed=True))
        elif t is tuple or t is list:
            if depth >= MAX_DEPTH:
                raise EncodeError(f"value nested deeper than {MAX_DEPTH} levels")
            out.append(_pack_cI(_TUPLE if t is tuple else _LIST, len(obj)))
            self.items(obj, depth + 1)
        elif t is dict:
            if depth >= MAX_DEPTH:
                raise EncodeError(f"value nested deeper than {MAX_DEPTH} levels")
            out.append(_pack_cI(_DICT, len(obj)))
            self.pairs(obj, depth + 1)
        elif t is float:
            out.append(_pack_cd(_FLOAT, obj))
        elif obj is None:
            out.append(_NONE)
        elif t is bool:
            out.append(_TRUE if obj else _FALSE)
        elif t is bytes or t is bytearray or t is memoryview:
            self.raw(obj if t is not memoryview else obj.cast("B") if obj.c_contiguous else obj.tobytes())
        elif t is complex:
            out.append(_COMPLEX)
            out.append(_dd.pack(obj.real, obj.imag))
        else:
            self.enc_other(obj, depth)

    def items(self, seq: Any, depth: int) -> None:
        """The items of a list or tuple; the common leaves inline (same bytes as ``enc`` writes)."""
        out = self.out
        append = out.append
        for x in seq:
            t = type(x)
            if t is str:
                data = x.encode("utf-8", "surrogatepass")
                append(_pack_cI(_STR, len(data)))
                append(data)
            elif t is int and -(1 << 63) <= x < (1 << 63):
                append(_pack_cq(_INT, x))
            elif t is float:
                append(_pack_cd(_FLOAT, x))
            elif t is bytes and len(x) < OOB_THRESHOLD:
                append(_pack_cI(_BYTES, len(x)))
                append(x)
            elif x is None:
                append(_NONE)
            else:
                self.enc(x, depth)

    def pairs(self, d: dict, depth: int) -> None:
        """The items of a dict; string keys inline."""
        out = self.out
        enc = self.enc
        for k, v in d.items():
            if type(k) is str:
                data = k.encode("utf-8", "surrogatepass")
                out.append(_pack_cI(_STR, len(data)))
                out.append(data)
            else:
                enc(k, depth)
            enc(v, depth)

    def enc_other(self, obj: Any, depth: int) -> None:
        np, torch = self.np, self.torch
        if np is not None and isinstance(obj, np.ndarray):
            arr = self._np_checked(obj)
            self.out.append(_NDARRAY)
            self._dtype_shape(arr.dtype.str, arr.shape)
            self.raw(memoryview(arr).cast("B") if arr.size else b"")
            return
        if np is not None and isinstance(obj, np.generic):
            arr = self._np_checked(np.asarray(obj))
            self.out.append(_NPSCALAR)
            dt = arr.dtype.str.encode()
            self.out.append(bytes([len(dt)]) + dt)
            self.out.append(arr.tobytes())
            return
        if torch is not None and isinstance(obj, torch.Tensor):
            self.enc_tensor(obj)
            return
        # Subclasses of the plain containers and scalars (namedtuple, IntEnum, OrderedDict, ...) travel as
        # their plain base type.
        for base in (bool, int, float, str, bytes, tuple, list, dict):
            if isinstance(obj, base):
                self.enc(base(obj) if base is not tuple else tuple(obj), depth)
                return
        raise EncodeError(
            f"cannot send a value of type {type(obj).__module__}.{type(obj).__qualname__} over the message "
            "bus: use None/bool/int/float/complex/str/bytes/list/tuple/dict, numpy arrays or torch tensors "
            "(convert objects to dicts of these; pickle is never used)"
        )

    def _np_checked(self, arr: Any) -> Any:
        if arr.dtype.kind not in "biufc":
            raise EncodeError(f"numpy dtype {arr.dtype} cannot be sent: only bool, integer, float and complex")
        if arr.dtype.byteorder == ">":
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        return arr if arr.flags.c_contiguous else arr.copy(order="C")

    def _dtype_shape(self, dtype_name: str, shape: Sequence[int]) -> None:
        dt = dtype_name.encode()
        self.out.append(bytes([len(dt)]) + dt)
        self.out.append(bytes([len(shape)]))
        self.out.append(struct.pack(f"<{len(shape)}q", *shape))

    def enc_tensor(self, t: Any) -> None:
        torch = self.torch
        if t.layout != torch.strided:
            raise EncodeError(f"torch tensor with layout {t.layout} cannot be sent: convert it to dense")
        name = str(t.dtype).replace("torch.", "")
        if name not in _TORCH_DTYPES:
            raise EncodeError(f"torch dtype {t.dtype} cannot be sent: use one of {', '.join(_TORCH_DTYPES)}")
        t = t.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        self.out.append(_TENSOR)
        self._dtype_shape(name, tuple(t.shape))
        if t.numel() == 0:
            self.raw(b"")
            return
        flat = t.reshape(-1)
        if name == "bfloat16":
            flat = flat.view(torch.int16)
        elif name == "bool":
            flat = flat.view(torch.uint8)
        # numpy() shares memory with the tensor; the bytes are read when the frame is sent.
        self.raw(memoryview(flat.numpy()).cast("B"))


def encode(obj: Any) -> Tuple[bytes, List[Buffer]]:
    """Encode ``obj``; return ``(meta, out_of_band_buffers)``. Raises ``EncodeError`` for unsupported types."""
    e = _Encoder()
    e.enc(obj, 0)
    return b"".join(e.out), e.buffers


def encode_event(event: str, args: tuple, kwargs: dict) -> Tuple[bytes, List[Buffer]]:
    """``encode((event, args, kwargs))`` for a str, a tuple and a dict, without the generic dispatch."""
    data = event.encode("utf-8", "surrogatepass")
    if not kwargs:
        # The common small event: leaves only, no keywords (same bytes as the general path below).
        out = [_EVENT_HEAD, _pack_cI(_STR, len(data)), data, _pack_cI(_TUPLE, len(args))]
        append = out.append
        for x in args:
            t = type(x)
            if t is bytes:
                if len(x) >= OOB_THRESHOLD:
                    break
                append(_pack_cI(_BYTES, len(x)))
                append(x)
            elif t is str:
                b = x.encode("utf-8", "surrogatepass")
                append(_pack_cI(_STR, len(b)))
                append(b)
            elif t is int and _INT_MIN <= x <= _INT_MAX:
                append(_pack_cq(_INT, x))
            elif t is float:
                append(_pack_cd(_FLOAT, x))
            elif x is None:
                append(_NONE)
            else:
                break
        else:
            append(_EMPTY_DICT)
            return b"".join(out), []
    e = _Encoder()
    out = e.out
    out.append(_EVENT_HEAD)
    out.append(_pack_cI(_STR, len(data)))
    out.append(data)
    out.append(_pack_cI(_TUPLE, len(args)))
    e.items(args, 2)
    out.append(_pack_cI(_DICT, len(kwargs)))
    if kwargs:
        e.pairs(kwargs, 2)
    return b"".join(out), e.buffers


_EVENT_HEAD = _cI.pack(_TUPLE, 3)
_EMPTY_DICT = _cI.pack(_DICT, 0)
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_EVENT_STR_HEAD = _EVENT_HEAD + _STR
_unpack_q = _q.unpack_from
_unpack_d = _d.unpack_from
_unpack_I = _I.unpack_from
_T_NONE, _T_TRUE, _T_FALSE, _T_INT, _T_BIGINT, _T_FLOAT, _T_COMPLEX = b"NTFiIfc"
_T_STR, _T_BYTES, _T_OOB, _T_LIST, _T_TUPLE, _T_DICT, _T_ARR, _T_NPS, _T_TENSOR = b"sbBltdagx"


class _Decoder:
    __slots__ = ("data", "pos", "end", "buffers", "used")

    def __init__(self, meta: Buffer, buffers: Sequence[Buffer]) -> None:
        self.data = meta if isinstance(meta, bytes) else memoryview(meta).cast("B")
        self.pos = 0
        self.end = len(self.data)
        self.buffers = buffers
        self.used = 0

    def need(self, n: int) -> int:
        """Reserve ``n`` bytes; return their start offset."""
        p = self.pos
        if p + n > self.end:
            raise DecodeError(f"truncated message: wanted {n} bytes at offset {p}, only {self.end - p} left")
        self.pos = p + n
        return p

    def u32(self) -> int:
        return _unpack_I(self.data, self.need(4))[0]

    def take(self, n: int) -> Buffer:
        p = self.need(n)
        return self.data[p:p + n]

    def raw(self) -> Buffer:
        """A bytes payload written by ``_Encoder.raw``."""
        tag = self.data[self.need(1)]
        if tag == _T_BYTES:
            return self.take(self.u32())
        if tag == _T_OOB:
            return self.oob()
        raise DecodeError(f"expected a bytes payload at offset {self.pos - 1}, got tag {tag!r}")

    def oob(self) -> Buffer:
        i = self.u32()
        if i >= len(self.buffers):
            raise DecodeError(f"reference to out-of-band buffer {i}, but the message has {len(self.buffers)}")
        self.used += 1
        b = self.buffers[i]
        return b if isinstance(b, bytes) else memoryview(b).cast("B")

    def name(self) -> str:
        n = self.data[self.need(1)]
        return bytes(self.take(n)).decode("ascii", "replace")

    def dtype_shape(self) -> Tuple[str, Tuple[int, ...]]:
        name = self.name()
        ndim = self.data[self.need(1)]
        if ndim > 32:
            raise DecodeError(f"array with {ndim} dimensions (at most 32)")
        shape = struct.unpack_from(f"<{ndim}q", self.data, self.need(8 * ndim))
        if any(s < 0 for s in shape):
            raise DecodeError(f"negative array dimension in shape {shape}")
        return name, shape

    def dec(self, depth: int) -> Any:
        data = self.data
        p = self.pos
        end = self.end
        if p >= end:
            raise DecodeError(f"truncated message: value expected at offset {p}")
        tag = data[p]
        p += 1
        if tag == _T_INT:
            if p + 8 > end:
                raise DecodeError(f"truncated integer at offset {p}")
            self.pos = p + 8
            return _unpack_q(data, p)[0]
        if tag == _T_STR or tag == _T_BYTES:
            if p + 4 > end:
                raise DecodeError(f"truncated length at offset {p}")
            q = p + 4 + _unpack_I(data, p)[0]
            p += 4
            if q > end:
                raise DecodeError(f"truncated message: wanted {q - p} bytes at offset {p}, only {end - p} left")
            self.pos = q
            if tag == _T_BYTES:
                return bytes(data[p:q])
            try:
                return str(data[p:q], "utf-8", "surrogatepass")
            except UnicodeDecodeError as e:
                raise DecodeError(f"bad utf-8 in string: {e}") from None
        self.pos = p
        if tag == _T_NONE:
            return None
        if tag == _T_TRUE:
            return True
        if tag == _T_FALSE:
            return False
        if tag == _T_FLOAT:
            return _unpack_d(data, self.need(8))[0]
        if tag == _T_TUPLE or tag == _T_LIST or tag == _T_DICT:
            if depth >= MAX_DEPTH:
                raise DecodeError(f"value nested deeper than {MAX_DEPTH} levels")
            if p + 4 > end:
                raise DecodeError(f"truncated length at offset {p}")
            n = _unpack_I(data, p)[0]
            self.pos = p + 4
            if tag == _T_DICT:
                if 2 * n > self.end - self.pos:  # every value takes at least one byte
                    raise DecodeError(f"dict claims {n} items but only {self.end - self.pos} bytes remain")
                d = {}
                for _ in range(n):
                    k = self.dec(depth + 1)
                    try:
                        d[k] = self.dec(depth + 1)
                    except TypeError:
                        raise DecodeError(f"unhashable dict key of type {type(k).__name__}") from None
                return d
            if n > self.end - self.pos:
                raise DecodeError(f"sequence claims {n} items but only {self.end - self.pos} bytes remain")
            items = self.seq(n, depth + 1)
            return items if tag == _T_LIST else tuple(items)
        if tag == _T_OOB:
            return bytes(self.oob())
        if tag == _T_ARR:
            return self.ndarray()
        if tag == _T_TENSOR:
            return self.tensor()
        if tag == _T_BIGINT:
            n = self.u32()
            if n > 4096:
                raise DecodeError(f"integer of {n} bytes (at most 4096)")
            return int.from_bytes(self.take(n), "little", signed=True)
        if tag == _T_COMPLEX:
            re, im = _dd.unpack_from(data, self.need(16))
            return complex(re, im)
        if tag == _T_NPS:
            import numpy as np
            name = self.name()
            if name not in _NP_DTYPES:
                raise DecodeError(f"numpy dtype {name!r} is not allowed")
            dt = np.dtype(name)
            return np.frombuffer(bytes(self.take(dt.itemsize)), dtype=dt)[0]
        raise DecodeError(f"unknown tag {bytes([tag])!r} at offset {p}")

    def seq(self, n: int, depth: int) -> List[Any]:
        """``n`` values at ``depth``; ints, strings, small bytes and None inline (same checks as ``dec``)."""
        data = self.data
        end = self.end
        dec = self.dec
        items: List[Any] = []
        append = items.append
        for _ in range(n):
            p = self.pos
            if p >= end:
                raise DecodeError(f"truncated message: value expected at offset {p}")
            tag = data[p]
            if tag == _T_BYTES or tag == _T_STR:
                if p + 5 > end:
                    raise DecodeError(f"truncated length at offset {p + 1}")
                q = p + 5 + _unpack_I(data, p + 1)[0]
                if q > end:
                    raise DecodeError(f"truncated message: wanted {q - p - 5} bytes at offset {p + 5}, only "
                                      f"{end - p - 5} left")
                self.pos = q
                if tag == _T_BYTES:
                    append(bytes(data[p + 5:q]))
                else:
                    try:
                        append(str(data[p + 5:q], "utf-8", "surrogatepass"))
                    except UnicodeDecodeError as e:
                        raise DecodeError(f"bad utf-8 in string: {e}") from None
            elif tag == _T_INT:
                if p + 9 > end:
                    raise DecodeError(f"truncated integer at offset {p + 1}")
                self.pos = p + 9
                append(_unpack_q(data, p + 1)[0])
            elif tag == _T_NONE:
                self.pos = p + 1
                append(None)
            else:
                append(dec(depth))
        return items

    def ndarray(self) -> Any:
        import numpy as np
        name, shape = self.dtype_shape()
        if name not in _NP_DTYPES:
            raise DecodeError(f"numpy dtype {name!r} is not allowed")
        dt = np.dtype(name)
        data = self.raw()
        count = 1
        for s in shape:
            count *= s
        if count * dt.itemsize != len(data):
            raise DecodeError(
                f"array of shape {shape} and dtype {name} needs {count * dt.itemsize} bytes, got {len(data)}")
        # A writable array that owns its memory, like any other array the user creates.
        return np.frombuffer(bytearray(data), dtype=dt).reshape(shape)

    def tensor(self) -> Any:
        import torch
        name, shape = self.dtype_shape()
        if name not in _TORCH_DTYPES:
            raise DecodeError(f"torch dtype {name!r} is not allowed")
        dtype = getattr(torch, name)
        data = self.raw()
        count = 1
        for s in shape:
            count *= s
        itemsize = dtype.itemsize
        if count * itemsize != len(data):
            raise DecodeError(
                f"tensor of shape {shape} and dtype {name} needs {count * itemsize} bytes, got {len(data)}")
        if count == 0:
            return torch.empty(shape, dtype=dtype)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def decode(meta: Buffer, buffers: Sequence[Buffer] = ()) -> Any:
    """Decode what ``encode`` produced. Raises ``DecodeError`` for any malformed input."""
    d = _Decoder(meta, buffers)
    try:
        obj = d.dec(0)
    except (DecodeError, RecursionError):
        raise
    except (struct.error, ValueError, TypeError, IndexError, OverflowError, MemoryError) as e:
        raise DecodeError(f"malformed message: {type(e).__name__}: {e}") from None
    _check_consumed(d)
    return obj


def _decode_small_event(meta: bytes, p: int) -> Any:
    """The common small event (leaves only, no keywords) read straight from ``meta[p:]``; None when the
    message is anything else (the general path then decodes it or says what is wrong)."""
    end = len(meta)
    try:
        if end - p < 20 or meta[p:p + 6] != _EVENT_STR_HEAD:
            return None
        q = p + 10 + _unpack_I(meta, p + 6)[0]
        if q + 10 > end or meta[q] != _T_TUPLE:
            return None
        event = str(meta[p + 10:q], "utf-8", "surrogatepass")
        n = _unpack_I(meta, q + 1)[0]
        q += 5
        args = []
        append = args.append
        for _ in range(n):
            if q >= end:
                return None
            tag = meta[q]
            if tag == _T_BYTES or tag == _T_STR:
                r = q + 5 + _unpack_I(meta, q + 1)[0]
                if r > end:
                    return None
                append(meta[q + 5:r] if tag == _T_BYTES else str(meta[q + 5:r], "utf-8", "surrogatepass"))
                q = r
            elif tag == _T_INT:
                if q + 9 > end:
                    return None
                append(_unpack_q(meta, q + 1)[0])
                q += 9
            elif tag == _T_FLOAT:
                if q + 9 > end:
                    return None
                append(_unpack_d(meta, q + 1)[0])
                q += 9
            elif tag == _T_NONE:
                append(None)
                q += 1
            else:
                return None
        if q + 5 != end or meta[q:] != _EMPTY_DICT:
            return None
        return event, tuple(args), {}
    except (struct.error, ValueError):  # truncated header, bad utf-8: the general path reports it
        return None


def decode_event(meta: Buffer, buffers: Sequence[Buffer] = (), offset: int = 0) -> Tuple[str, tuple, dict]:
    """Decode what ``encode_event`` (or ``encode((event, args, kwargs))``) produced, from ``meta[offset:]``: a
    str, a tuple and a dict with str keys. Raises ``DecodeError`` for malformed input and for any other value."""
    if not buffers and type(meta) is bytes:
        small = _decode_small_event(meta, offset)
        if small is not None:
            return small
    if offset:
        meta = memoryview(meta)[offset:]
    d = _Decoder(meta, buffers)
    data = d.data
    end = d.end
    try:
        if end < 20 or data[:6] != _EVENT_STR_HEAD:
            raise DecodeError("not an (event, args, kwargs) message")
        p = 10 + _unpack_I(data, 6)[0]
        if p + 10 > end:
            raise DecodeError("truncated (event, args, kwargs) message")
        try:
            event = str(data[10:p], "utf-8", "surrogatepass")
        except UnicodeDecodeError as e:
            raise DecodeError(f"bad utf-8 in event name: {e}") from None
        if data[p] != _T_TUPLE:
            raise DecodeError("not an (event, args, kwargs) message: args is not a tuple")
        n = _unpack_I(data, p + 1)[0]
        d.pos = p + 5
        if n > end - d.pos:
            raise DecodeError(f"sequence claims {n} items but only {end - d.pos} bytes remain")
        args = tuple(d.seq(n, 2))
        p = d.pos
        if p + 5 > end or data[p] != _T_DICT:
            raise DecodeError("not an (event, args, kwargs) message: kwargs is not a dict")
        if _unpack_I(data, p + 1)[0] == 0:
            d.pos = p + 5
            kwargs: dict = {}
        else:
            kwargs = d.dec(1)
    except (DecodeError, RecursionError):
        raise
    except (struct.error, ValueError, TypeError, IndexError, OverflowError, MemoryError) as e:
        raise DecodeError(f"malformed message: {type(e).__name__}: {e}") from None
    _check_consumed(d)
    if kwargs:
        for k in kwargs:
            if type(k) is not str:
                raise DecodeError(f"not an (event, args, kwargs) message: keyword of type {type(k).__name__}")
    return event, args, kwargs


def _check_consumed(d: _Decoder) -> None:
    if d.pos != d.end:
        raise DecodeError(f"{d.end - d.pos} trailing bytes after the value")
    if d.used != len(d.buffers):
        raise DecodeError(f"message has {len(d.buffers)} out-of-band buffers but uses {d.used}")


def dumps(obj: Any) -> bytes:
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
