"""Decoding for the safe codec (see ``pipeline.parallel.codec``): checks everything, never calls constructors
named by the input, raises ``DecodeError`` on anything malformed."""
from __future__ import annotations

import struct
from typing import Any, List, Sequence, Tuple

from .codec_format import (Buffer, _dd, DecodeError, _EMPTY_DICT, _EVENT_STR_HEAD, MAX_DEPTH, _NP_DTYPES, _T_ARR,
    _T_BIGINT, _T_BYTES, _T_COMPLEX, _T_DICT, _T_FALSE, _T_FLOAT, _T_INT, _T_LIST, _T_NONE, _T_NPS, _T_OOB, _T_STR,
    _T_TENSOR, _T_TRUE, _T_TUPLE, _TORCH_DTYPES, _unpack_d, _unpack_I, _unpack_q)


class _Decoder:
    __slots__ = ("data", "pos", "end", "buffers", "used", "adopt")

    def __init__(self, meta: Buffer, buffers: Sequence[Buffer], adopt: bool = False) -> None:
        self.data = meta if isinstance(meta, bytes) else memoryview(meta).cast("B")
        self.pos = 0
        self.end = len(self.data)
        self.buffers = buffers
        self.used = 0  # bit i: buffer i was used
        self.adopt = adopt  # arrays and tensors may use writable buffers as their memory (see decode_event)

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
        if self.used >> i & 1:  # each buffer backs one value (so that none aliases another)
            raise DecodeError(f"out-of-band buffer {i} referenced twice")
        self.used |= 1 << i  # a bit per buffer used
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
            import numpy as np  # lazy: the codec loads numpy/torch only for messages that carry them
            name = self.name()
            if name not in _NP_DTYPES:
                raise DecodeError(f"numpy dtype {name!r} is not allowed")
            dt = np.dtype(name)
            return np.frombuffer(bytes(self.take(dt.itemsize)), dtype=dt)[0]
        raise DecodeError(f"unknown tag {bytes([tag])!r} at offset {p}")

    def seq(self, n: int, depth: int) -> List[object]:
        """``n`` values at ``depth``; ints, strings, small bytes and None inline (same checks as ``dec``)."""
        data = self.data
        end = self.end
        dec = self.dec
        items: List[object] = []
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

    def ndarray(self) -> object:
        import numpy as np  # lazy: the codec loads numpy/torch only for messages that carry them
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
        if self.adopt and type(data) is memoryview and not data.readonly and count:
            arr = np.frombuffer(data, dtype=dt)  # the received frame is the array's memory: no copy
            if arr.flags.aligned:
                return arr.reshape(shape)
        # A writable array that owns its memory, like any other array the user creates.
        return np.frombuffer(bytearray(data), dtype=dt).reshape(shape)

    def tensor(self) -> object:
        import torch  # lazy: the codec loads numpy/torch only for messages that carry them
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
        if self.adopt and type(data) is memoryview and not data.readonly:
            t = torch.frombuffer(data, dtype=dtype)  # the received frame is the tensor's memory: no copy
            if t.data_ptr() % itemsize == 0:
                return t.reshape(shape)
        return torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape)


def decode(meta: Buffer, buffers: Sequence[Buffer] = ()) -> object:
    """Decode what ``encode`` produced. Raises ``DecodeError`` for any malformed input."""
    d = _Decoder(meta, buffers)
    return _read_whole(d, d.dec, 0)


def _read_whole(d: _Decoder, read: Any, *args: object) -> Any:
    """``read(*args)``, which must consume all of ``d``; whatever a malformed message raises becomes a
    ``DecodeError``."""
    try:
        value = read(*args)
    except (DecodeError, RecursionError):
        raise
    except (struct.error, ValueError, TypeError, IndexError, OverflowError, MemoryError) as e:
        raise DecodeError(f"malformed message: {type(e).__name__}: {e}") from None
    _check_consumed(d)
    return value


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
        args: List[object] = []
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


def decode_event(meta: Buffer, buffers: Sequence[Buffer] = (), offset: int = 0,
                 try_small: bool = True, adopt: bool = False) -> Tuple[str, tuple, dict]:
    """Decode what ``encode_event`` (or ``encode((event, args, kwargs))``) produced, from ``meta[offset:]``: a
    str, a tuple and a dict with str keys. Raises ``DecodeError`` for malformed input and for any other value.
    ``try_small=False``: the caller already found that ``_decode_small_event`` does not apply. ``adopt``: the
    caller hands ``buffers`` over (the bus: received frames nobody else holds); a numpy array or a torch
    tensor then uses its writable, suitably aligned buffer as its memory instead of a copy of it."""
    if try_small and not buffers and type(meta) is bytes:
        small = _decode_small_event(meta, offset)
        if small is not None:
            return small
    if offset:
        meta = memoryview(meta)[offset:]
    d = _Decoder(meta, buffers, adopt)
    event, args, kwargs = _read_whole(d, _read_event, d)
    if kwargs:
        for k in kwargs:
            if type(k) is not str:
                raise DecodeError(f"not an (event, args, kwargs) message: keyword of type {type(k).__name__}")
    return event, args, kwargs


def _read_event(d: _Decoder) -> Tuple[str, tuple, dict]:
    """The (event, args, kwargs) triple at the start of ``d`` (a str event name, a tuple, a dict)."""
    data = d.data
    end = d.end
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
    return event, args, kwargs


def _check_consumed(d: _Decoder) -> None:
    if d.pos != d.end:
        raise DecodeError(f"{d.end - d.pos} trailing bytes after the value")
    n = len(d.buffers)
    if d.used != (1 << n) - 1:
        raise DecodeError(f"message has {n} out-of-band buffers but uses {bin(d.used).count('1')}")
