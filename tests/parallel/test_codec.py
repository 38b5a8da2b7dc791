"""The pickle-free codec: round trips, refusals, and malformed input raising DecodeError only."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.parallel.codec import (OOB_THRESHOLD, DecodeError, EncodeError, decode, decode_event, dumps, encode,
                                     encode_event, loads)

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(),
                    st.binary(max_size=64))
values = st.recursive(scalars, lambda c: st.one_of(st.lists(c, max_size=5), st.tuples(c, c),
                                                   st.dictionaries(st.text(max_size=5), c, max_size=5)),
                      max_leaves=20)


@settings(max_examples=100, deadline=None)
@given(values)
def test_round_trip_plain_values(v):
    assert loads(dumps(v)) == v


@pytest.mark.parametrize("arr", [np.arange(12, dtype=np.int64).reshape(3, 4), np.zeros((2, 0), np.float32),
                                 np.array(2.5), np.arange(10)[::3], np.arange(5, dtype=">f4"),
                                 np.array([True, False]), np.ones(OOB_THRESHOLD, np.uint8)])
def test_numpy_arrays(arr):
    out = loads(dumps(arr))
    assert out.shape == arr.shape and out.dtype == arr.dtype.newbyteorder("=") and (out == arr).all()
    assert out.flags.writeable


@pytest.mark.parametrize("t", [torch.randn(3, 4), torch.arange(6).reshape(2, 3), torch.zeros(0, 2),
                               torch.ones(4, dtype=torch.bfloat16), torch.tensor([True, False]),
                               torch.randn(300, 300, dtype=torch.float64), torch.randn(4, 4).t()])
def test_torch_tensors(t):
    out = loads(dumps(t))
    assert out.dtype == t.dtype and out.shape == t.shape and torch.equal(out, t)


def test_large_payloads_travel_out_of_band_without_a_copy_in_meta():
    big = np.ones(1 << 20, np.uint8)
    meta, buffers = encode({"w": big, "b": b"x" * (1 << 20)})
    assert len(meta) < 200 and len(buffers) == 2
    out = decode(meta, buffers)
    assert (out["w"] == big).all() and out["b"] == b"x" * (1 << 20)


def test_numpy_scalars_and_subclasses():
    import collections
    P = collections.namedtuple("P", "x y")
    assert loads(dumps(np.float32(1.5))) == np.float32(1.5)
    assert type(loads(dumps(np.int64(3)))) is np.int64
    assert loads(dumps(P(1, 2))) == (1, 2)
    assert loads(dumps({1: complex(1, 2), 2 ** 80: -2 ** 70})) == {1: 1 + 2j, 2 ** 80: -2 ** 70}


@pytest.mark.parametrize("bad", [object(), {1, 2}, np.array(["a"]), np.array([object()]), lambda: 0,
                                 torch.randn(2).to_sparse()])
def test_refuses_what_it_cannot_carry_safely(bad):
    with pytest.raises(EncodeError):
        encode(bad)


def test_refuses_too_deep_nesting():
    v = []
    for _ in range(200):
        v = [v]
    with pytest.raises(EncodeError):
        encode(v)


@pytest.mark.parametrize("data", [b"", b"Q", b"s\xff\xff\xff\xff", b"l\x05\x00\x00\x00N",
                                  b"a\x03|O8\x00b\x00\x00\x00\x00",
                                  b"NN", b"B\x00\x00\x00\x00", b"x\x05floop\x00b\x00\x00\x00\x00",
                                  b"d\x01\x00\x00\x00l\x00\x00\x00\x00N", b"s\x02\x00\x00\x00\xff\xfe"])
def test_malformed_meta_raises_decode_error(data):
    with pytest.raises(DecodeError):
        decode(data, [])


def test_deep_nesting_bomb_is_refused():
    with pytest.raises(DecodeError):
        decode(b"l\x01\x00\x00\x00" * 10000 + b"N")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_only_ever_raise_decode_error(data):
    try:
        decode(data, [b"x" * 8])
    except DecodeError:
        pass


@settings(max_examples=100, deadline=None)
@given(values, st.data())
def test_truncations_and_bit_flips_raise_decode_error_or_decode(v, data):
    meta, _ = encode(v)
    cut = data.draw(st.integers(0, max(0, len(meta) - 1)))
    with pytest.raises(DecodeError):
        decode(meta[:cut])
    if meta:
        i = data.draw(st.integers(0, len(meta) - 1))
        flipped = meta[:i] + bytes([meta[i] ^ 0x5A]) + meta[i + 1:]
        try:
            decode(flipped)
        except DecodeError:
            pass


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=10), st.lists(values, max_size=4).map(tuple),
       st.dictionaries(st.text(max_size=5), values, max_size=3))
def test_event_fast_path_writes_the_generic_bytes_and_reads_them_back(event, args, kwargs):
    meta, buffers = encode_event(event, args, kwargs)
    assert (meta, buffers) == encode((event, args, kwargs))
    assert decode_event(meta, buffers) == (event, args, kwargs) == decode(meta, buffers)


def test_event_fast_path_with_out_of_band_buffers_and_leaves():
    big = b"y" * OOB_THRESHOLD
    v = ("e", (big, 1, -2 ** 63, 2 ** 63, 2.5, None, True, "s\u00e9", b"", [1, (2,)], {"k": 1}),
         {"a": np.arange(3), "b": big})
    meta, buffers = encode_event(*v)
    assert len(buffers) == 2 and (meta, buffers) == encode(v)
    event, args, kwargs = decode_event(meta, buffers)
    assert (event, args) == v[:2] and kwargs["b"] == big and (kwargs["a"] == np.arange(3)).all()


@pytest.mark.parametrize("value", [[1, 2], ("e", [1], {}), ("e", (), {1: 2}), (1, (), {}), ("e", (), {}, 1),
                                   ("e", (), []), ("e", ()), "e", None])
def test_decode_event_refuses_other_shapes(value):
    with pytest.raises(DecodeError):
        decode_event(*encode(value))


def test_decode_event_refuses_trailing_bytes_and_unused_buffers():
    meta, _ = encode(("e", (1,), {}))
    with pytest.raises(DecodeError):
        decode_event(meta + b"N")
    with pytest.raises(DecodeError):
        decode_event(meta, [b"x"])


def test_adopted_buffers_become_the_arrays_memory_and_are_used_once():
    """``adopt=True`` (the bus hands over its received frames): a numpy array or torch tensor is the frame's
    memory, writable, without a copy; without it, or from a read-only buffer, a copy. A buffer named twice
    (two values over one memory) is refused."""
    arr = np.arange(OOB_THRESHOLD, dtype=np.float64)
    ten = torch.arange(OOB_THRESHOLD, dtype=torch.float32)
    meta, buffers = encode_event("w", (arr, ten), {})
    frames = [memoryview(bytearray(b)) for b in buffers]  # writable, like ZeroMQ's received frames
    _, (a, t), _ = decode_event(meta, frames, adopt=True)
    assert (a == arr).all() and torch.equal(t, ten)
    assert np.shares_memory(a, np.frombuffer(frames[0], np.uint8)) and a.flags.writeable
    assert t.data_ptr() == np.frombuffer(frames[1], np.uint8).ctypes.data
    t[0] = 7.0  # the tensor's own memory: writable
    assert np.frombuffer(frames[1], np.float32)[0] == 7.0
    _, (a2, t2), _ = decode_event(meta, frames)  # not adopted: copies
    assert not np.shares_memory(a2, np.frombuffer(frames[0], np.uint8))
    assert t2.data_ptr() != np.frombuffer(frames[1], np.uint8).ctypes.data
    _, (a3, _), _ = decode_event(meta, buffers, adopt=True)  # read-only bytes: copied, still writable
    assert a3.flags.writeable and (a3 == arr).all()
    twice = encode_event("w", (b"z" * OOB_THRESHOLD, b"z" * OOB_THRESHOLD), {})[0].replace(
        b"B\x01\x00\x00\x00", b"B\x00\x00\x00\x00")  # both values name buffer 0
    with pytest.raises(DecodeError, match="referenced twice"):
        decode_event(twice, [b"z" * OOB_THRESHOLD, b"z" * OOB_THRESHOLD])


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60), st.data())
def test_decode_event_on_random_input_only_ever_raises_decode_error(tail, data):
    prefix = data.draw(st.sampled_from([b"", b"t\x03\x00\x00\x00", b"t\x03\x00\x00\x00s\x01\x00\x00\x00e"]))
    for meta, buffers, offset in ((prefix + tail, [b"x" * 8], 0), (prefix + tail, (), 0),
                                  (b"junk" + prefix + tail, (), 4)):  # with and without the small-event path
        try:
            decode_event(meta, buffers, offset)
        except DecodeError:
            pass


_leaves = st.one_of(st.binary(max_size=40), st.text(max_size=10), st.integers(-2 ** 63, 2 ** 63 - 1),
                    st.floats(allow_nan=False), st.none())


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=10), st.lists(_leaves, max_size=5).map(tuple), st.binary(max_size=8), st.data())
def test_small_event_path_matches_the_general_codec(event, args, junk, data):
    meta, buffers = encode_event(event, args, {})
    assert buffers == [] and meta == encode((event, args, {}))[0]
    assert decode_event(meta) == (event, args, {}) == decode(meta)
    assert decode_event(junk + meta, (), len(junk)) == (event, args, {})  # read in place after a header
    cut = data.draw(st.integers(0, len(meta) - 1))
    with pytest.raises(DecodeError):
        decode_event(meta[:cut])
