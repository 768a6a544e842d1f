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


def whole_frames(view, start, limit, max_frame_bytes):
    """A take_run scan that takes every whole frame (as broker's Produce scan takes its own): their views."""
    items, pos = [], start
    while len(items) < limit and len(view) - pos >= 4:
        (size,) = struct.unpack_from(">i", view, pos)
        if size < 0 or size > max_frame_bytes or len(view) - pos - 4 < size:
            break
        items.append(view[pos + 4:pos + 4 + size])
        pos += 4 + size
    return items, pos


def test_a_chunk_that_completes_a_buffered_frame_is_kept_after_it_not_copied():
    a, b, c, d = (framed(bytes([n]) * 300) for n in range(4))
    decoder = FrameDecoder(1000)
    decoder.receive_data(a + b[:100])
    assert drain(decoder) == [a[4:]]
    rest = b[100:] + c + d
    decoder.receive_data(rest)
    assert decoder.buffered_bytes == len(b) + len(c) + len(d)
    run = decoder.take_run(whole_frames, 10)  # one run: the frame assembled from two chunks, and those after it
    assert [bytes(f) for f in run] == [b[4:], c[4:], d[4:]] and all(f.obj is rest for f in run[1:])
    assert decoder.buffered_bytes == 0 and decoder.next_frame() is NEED_DATA


@settings(max_examples=100, deadline=None)
@given(payloads=st.lists(st.binary(max_size=40), max_size=12), cuts=st.lists(st.integers(0, 500), max_size=8),
       takes=st.lists(st.integers(0, 3), min_size=1, max_size=20))
def test_any_chunking_with_runs_taken_between_frames(payloads, cuts, takes):
    """next_frame and take_run (0: a frame, else a run of at most that many), any chunking: every frame
    once, in order, and buffered_bytes always what was received and not yet taken."""
    stream = b"".join(map(framed, payloads))
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    decoder, out, received, taken, step = FrameDecoder(1000), [], 0, 0, 0
    for lo, hi in zip(bounds, bounds[1:]):
        decoder.receive_data(stream[lo:hi])
        received += hi - lo
        while True:
            limit = takes[step % len(takes)]
            step += 1
            got = [decoder.next_frame()] if limit == 0 else decoder.take_run(whole_frames, limit)
            got = [bytes(f) for f in got if f is not NEED_DATA]
            if not got:
                break
            out += got
            taken += sum(4 + len(f) for f in got)
            assert decoder.buffered_bytes == received - taken
    assert out == payloads and decoder.buffered_bytes == 0


def test_a_chunk_arriving_while_whole_frames_wait_is_appended_after_them():
    """The broker may leave whole frames buffered (a connection's requests wait while one is served) when the
    next chunk arrives; the chunk goes behind them, whole (it was spliced into the first waiting frame, and
    the frames after it were lost: kcat's consumer reconnected over and over)."""
    decoder = FrameDecoder(1000)
    decoder.receive_data(framed(b"a" * 10) + framed(b"b" * 10))
    decoder.receive_data(framed(b"c" * 3) + framed(b"d" * 4))
    assert drain(decoder) == [b"a" * 10, b"b" * 10, b"c" * 3, b"d" * 4]


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=40), max_size=12), cuts=st.lists(st.integers(0, 500), max_size=8),
       takes=st.lists(st.integers(-1, 3), min_size=1, max_size=20))
def test_any_chunking_with_frames_left_waiting_between_chunks(payloads, cuts, takes):
    """Between two chunks the reader takes nothing (-1), one frame (0) or a run of at most that many: every
    frame once, in order, whatever waits in the buffer when the next chunk comes."""
    stream = b"".join(map(framed, payloads))
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    decoder, out, step = FrameDecoder(1000), [], 0
    for lo, hi in zip(bounds, bounds[1:]):
        decoder.receive_data(stream[lo:hi])
        limit = takes[step % len(takes)]
        step += 1
        if limit == 0:
            frame = decoder.next_frame()
            out += [] if frame is NEED_DATA else [bytes(frame)]
        elif limit > 0:
            out += [bytes(f) for f in decoder.take_run(whole_frames, limit)]
    out += drain(decoder)
    assert out == payloads and decoder.buffered_bytes == 0
