"""Encoding for the safe codec (see ``pipeline.parallel.codec``): values to ``(meta, out_of_band_buffers)``."""
from __future__ import annotations

import struct
import sys
from typing import Any, List, Sequence, Tuple

from .codec_format import (_BIGINT, Buffer, _BYTES, _cI, _COMPLEX, _dd, _DICT, _EMPTY_DICT, EncodeError, _EVENT_HEAD,
    _FALSE, _FLOAT, _I, _INT, _INT_MAX, _INT_MIN, _LIST, MAX_DEPTH, _NDARRAY, _NONE, _NPSCALAR, _OOB_BYTES,
    OOB_THRESHOLD, _pack_cd, _pack_cI, _pack_cq, _STR, _TENSOR, _TORCH_DTYPES, _TRUE, _TUPLE)


_PLAIN_BASES: Tuple[type, ...] = (bool, int, float, str, bytes, tuple, list, dict)


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

    def enc_other(self, obj: object, depth: int) -> None:
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
        for base in _PLAIN_BASES:
            if isinstance(obj, base):
                self.enc(base(obj), depth)
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
        torch = sys.modules["torch"]  # loaded: ``t`` is a tensor
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


def encode(obj: object) -> Tuple[bytes, List[Buffer]]:
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
