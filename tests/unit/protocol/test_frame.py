"""FrameDecoder: whole, byte by byte, many frames per chunk, trailing bytes, limits, end of stream."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.protocol import CLOSED, NEED_DATA, FrameDecoder, FrameTooLarge, LocalProtocolError, RemoteProtocolError


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def drain(decoder: FrameDecoder) -> list[bytes]:
    out = []
    while (frame := decoder.next_frame()) is not NEED_DATA and frame is not CLOSED:
        out.append(bytes(frame))
    return out


def feed(chunks, limit=1 << 20) -> list[bytes]:
    decoder = FrameDecoder(limit)
    out = []
    for chunk in chunks:
        decoder.receive_data(chunk)
        out += drain(decoder)
    return out


PAYLOADS = [b"abc", b"", b"x" * 300, bytes(range(256))]
STREAM = b"".join(map(framed, PAYLOADS))


def test_whole():
    assert feed([STREAM]) == PAYLOADS


def test_byte_by_byte():
    assert feed([STREAM[i:i + 1] for i in range(len(STREAM))]) == PAYLOADS


def test_trailing_partial_frame_stays_buffered():
    decoder = FrameDecoder(1000)
    decoder.receive_data(STREAM + framed(b"next")[:6])
    assert drain(decoder) == PAYLOADS
    assert decoder.next_frame() is NEED_DATA
    assert decoder.buffered_bytes == 6
    decoder.receive_data(framed(b"next")[6:])
    assert drain(decoder) == [b"next"]


@settings(max_examples=50, deadline=None)
@given(payloads=st.lists(st.binary(max_size=50), max_size=10), cuts=st.lists(st.integers(0, 600), max_size=8))
def test_any_chunking(payloads, cuts):
    stream = b"".join(map(framed, payloads))
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    assert feed([stream[a:b] for a, b in zip(bounds, bounds[1:])]) == payloads


def test_many_small_frames_in_one_chunk():
    payloads = [b"%d" % i for i in range(20_000)]
    assert feed([b"".join(map(framed, payloads))]) == payloads


def test_large_frame_in_many_chunks_is_not_copied_out():
    payload = bytes(1 << 20)
    stream = framed(payload)
    decoder = FrameDecoder(2 << 20)
    for i in range(0, len(stream), 4096):
        decoder.receive_data(stream[i:i + 4096])
    frame = decoder.next_frame()
    assert isinstance(frame, memoryview) and frame == payload
    assert decoder.next_frame() is NEED_DATA and decoder.buffered_bytes == 0


def test_over_limit_refused_as_soon_as_size_arrives():
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.receive_data(framed(b"ok"))
    decoder.receive_data(struct.pack(">i", 101)[:3])
    assert decoder.next_frame() == b"ok"
    assert decoder.next_frame() is NEED_DATA
    with pytest.raises(FrameTooLarge) as info:
        decoder.receive_data(struct.pack(">i", 101)[3:])  # the 4th size byte: refused, body never buffered
    assert info.value.size == 101 and info.value.limit == 100
    assert isinstance(info.value, RemoteProtocolError)
    assert decoder.buffered_bytes == 0
    with pytest.raises(FrameTooLarge):  # the decoder stays failed
        decoder.receive_data(b"x")
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_over_limit_after_a_frame_in_the_same_chunk():
    decoder = FrameDecoder(max_frame_bytes=100)
    decoder.receive_data(framed(b"ok") + struct.pack(">i", 1000))
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


def test_negative_size_refused():
    with pytest.raises(FrameTooLarge):
        FrameDecoder(100).receive_data(struct.pack(">i", -1))


def test_limit_is_inclusive():
    assert feed([framed(b"x" * 100)], limit=100) == [b"x" * 100]


def test_end_of_stream_between_frames():
    decoder = FrameDecoder(100)
    decoder.receive_data(framed(b"a"))
    decoder.receive_data(b"")
    assert decoder.next_frame() == b"a"
    assert decoder.next_frame() is CLOSED
    assert decoder.next_frame() is CLOSED
    with pytest.raises(LocalProtocolError):
        decoder.receive_data(b"more")


def test_end_of_stream_inside_a_frame():
    decoder = FrameDecoder(100)
    decoder.receive_data(framed(b"abc")[:5])
    decoder.receive_data(b"")
    with pytest.raises(RemoteProtocolError):
        decoder.next_frame()
