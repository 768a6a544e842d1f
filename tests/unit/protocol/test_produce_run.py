"""The per-read Produce scan and reply encoder (protocol/produce_run.py): the compiled twin (_cproduce) and
the pure-Python one give the same requests, positions and bytes, and both agree with the one-frame codec
(decode_single_partition, encode_single_partition_response) and the frame decoder, on streams of valid,
damaged, truncated and hostile frames (Rules 1-3); FrameDecoder.take_run hands them out without a copy."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.protocol import ApiKey, MalformedRequest, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol import _cproduce  # the compiled twin must be built (scripts/setup.sh): no skip
from sparklog.protocol import produce_run
from sparklog.protocol.errors import FrameTooLarge
from sparklog.protocol.frame import NEED_DATA, FrameDecoder
from sparklog.protocol.produce import (FAST_PATH_VERSIONS, FIRST_FLEXIBLE_VERSION, SinglePartitionProduce,
                                       decode_single_partition, encode_single_partition_response)
from sparklog.protocol.registry import decode_request, encode_request

from unit.protocol.strategies import struct_of
from unit.protocol.test_produce_fast import tagged_frame


_cproduce.bind(produce_run.SinglePartitionProduce)
TWINS = (produce_run.py_scan_produce_run, _cproduce.scan_produce_run)
MAX_FRAME = 400
INT16, INT32, INT64 = (st.integers(-(1 << b - 1), (1 << b - 1) - 1) for b in (16, 32, 64))


@st.composite
def produce_frame(draw) -> bytes:
    """A size-prefixed Produce frame: mostly one partition, sometimes any shape or (flexible versions) with a
    tagged field or a long count, of any version the fast path reads."""
    version = draw(st.integers(*FAST_PATH_VERSIONS))
    kind = draw(st.integers(0, 5))
    if kind == 5:
        _, frame = draw(tagged_frame())
        return len(frame).to_bytes(4, "big") + frame
    if kind:
        body = ProduceRequest(
            transactional_id=draw(st.none() | st.text(max_size=4)), acks=draw(st.sampled_from([1, -1, 0, 2])),
            timeout_ms=draw(INT32), topic_data=[TopicProduceData(name=draw(st.text(max_size=6)), partition_data=[
                PartitionProduceData(index=draw(st.integers(-1, 3)), records=draw(st.binary(max_size=40)))])])
    else:
        body = draw(struct_of(ProduceRequest, version))
    return encode_request(ApiKey.PRODUCE, version, draw(INT32), draw(st.none() | st.text(max_size=5)), body)


def damaged(draw, frame: bytes) -> bytes:
    frame = bytearray(frame)
    for position, value in draw(st.lists(st.tuples(st.integers(0, max(len(frame) - 1, 0)), st.integers(0, 255)),
                                         max_size=2)):
        if frame:
            frame[position] = value
    return bytes(frame[:draw(st.integers(0, len(frame)))]) if draw(st.booleans()) else bytes(frame)


@st.composite
def stream(draw) -> bytes:
    parts = []
    for frame in draw(st.lists(produce_frame(), max_size=6)):
        kind = draw(st.integers(0, 9))
        if kind == 0:
            frame = damaged(draw, frame)
        elif kind == 1:  # another api, or a hostile size prefix
            frame = draw(st.sampled_from([struct.pack(">ih", 2, 1), struct.pack(">i", -5), struct.pack(">i", 1 << 30),
                                          struct.pack(">i", MAX_FRAME + 1) + bytes(8)]))
        parts.append(frame)
    return b"".join(parts) + draw(st.binary(max_size=3))


def comparable(request):
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in request)


@settings(max_examples=300, deadline=None)
@given(stream(), st.integers(0, 8), st.integers(0, 7))
def test_both_twins_take_the_frames_the_frame_decoder_and_the_one_frame_decoder_take(data, limit, lead):
    buf = bytearray(bytes(lead) + data)  # a run may start anywhere in the buffer
    view = memoryview(buf)
    (pure, pure_end), (compiled, compiled_end) = (scan(view, lead, limit, MAX_FRAME) for scan in TWINS)
    assert pure_end == compiled_end and [comparable(r) for r in pure] == [comparable(r) for r in compiled]
    # the oracle: the frame decoder's frames, each decoded alone, up to the first it does not take
    decoder, expected, position = FrameDecoder(MAX_FRAME), [], lead
    try:
        if data:  # b"" would be the end of the stream
            decoder.receive_data(bytes(data))
        while len(expected) < limit and (frame := decoder.next_frame()) is not NEED_DATA:
            request = decode_single_partition(bytes(frame))
            if request is None:
                break
            expected.append(comparable(request))
            position += 4 + len(frame)
    except FrameTooLarge:
        pass
    assert [comparable(r) for r in pure] == expected and pure_end == position
    request = None
    for request in compiled:  # views of the buffer, no copies
        assert request.records.obj is buf and request.frame.obj is buf
        assert type(request) is SinglePartitionProduce
    del pure, compiled, request
    view.release()
    buf += b"x"  # nothing of the scan holds the buffer any more


@settings(max_examples=200, deadline=None)
@given(st.lists(produce_frame(), min_size=1, max_size=5), st.data())
def test_both_twins_encode_the_one_frame_replies(frames, data):
    view = memoryview(b"".join(frames))
    requests, _ = produce_run.py_scan_produce_run(view, 0, 99, 1 << 20)
    offsets = [data.draw(st.integers(0, (1 << 63) - 1)) for _ in requests]
    append_time, log_start = data.draw(INT64), data.draw(INT64)
    expected = b"".join(encode_single_partition_response(r, o, append_time, log_start)
                        for r, o in zip(requests, offsets))
    assert produce_run.py_encode_produce_replies(requests, offsets, append_time, log_start) == expected
    assert _cproduce.encode_produce_replies(requests, offsets, append_time, log_start) == expected


def test_the_environment_variable_selects_the_pure_twin(monkeypatch):
    monkeypatch.setenv("SPARKLOG_NO_EXTENSIONS", "1")
    assert produce_run._select()[2:] == ("python", "SPARKLOG_NO_EXTENSIONS is set")
    monkeypatch.setenv("SPARKLOG_NO_EXTENSIONS", "")
    assert produce_run._select()[2:] == ("cython", None)


def frames_of(n: int, acks: int = 1, version: int = 8) -> bytes:
    body = ProduceRequest(acks=acks, timeout_ms=1, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"r" * 20)])])
    return b"".join(encode_request(ApiKey.PRODUCE, version, i, "c", body) for i in range(n))


@pytest.mark.parametrize("scan", TWINS)
def test_take_run_hands_over_a_read_whole_and_keeps_only_the_bytes_after_the_run(scan):
    decoder = FrameDecoder(1 << 20)
    data = frames_of(3)
    decoder.receive_data(data)
    run = decoder.take_run(scan, 10)
    assert [r.correlation_id for r in run] == [0, 1, 2] and decoder.buffered_bytes == 0
    decoder.receive_data(data + data[:7])  # the next read: whole frames then a cut one
    run2 = decoder.take_run(scan, 2)  # the limit stops it after two
    assert [r.correlation_id for r in run2] == [0, 1] and decoder.buffered_bytes == len(data) // 3 + 7
    assert [r.correlation_id for r in decoder.take_run(scan, 10)] == [2]
    assert decoder.take_run(scan, 10) == [] and decoder.next_frame() is NEED_DATA
    decoder.receive_data(data[7:len(data) // 3])
    assert bytes(decoder.take_run(scan, 10)[0].frame) == data[4:len(data) // 3]
    assert bytes(run[1].records) == b"r" * 20  # the first read's buffer still backs its requests


@pytest.mark.parametrize("scan", TWINS)
def test_take_run_leaves_a_hostile_size_to_next_frame(scan):
    decoder = FrameDecoder(100)
    decoder.receive_data(frames_of(1) + struct.pack(">i", 101))
    assert len(decoder.take_run(scan, 10)) == 1
    assert decoder.take_run(scan, 10) == []
    with pytest.raises(FrameTooLarge):
        decoder.next_frame()


@pytest.mark.parametrize("scan", TWINS)
def test_a_run_of_every_version_is_taken_whole(scan):
    data = b"".join(frames_of(2, version=v) for v in range(FAST_PATH_VERSIONS[0], FAST_PATH_VERSIONS[1] + 1))
    requests, end = scan(memoryview(data), 0, 99, 1 << 20)
    versions = [r.api_version for r in requests]
    assert end == len(data) and versions == sorted(2 * list(range(FAST_PATH_VERSIONS[0], FAST_PATH_VERSIONS[1] + 1)))
    assert all(bytes(r.records) == b"r" * 20 for r in requests)


@settings(max_examples=300, deadline=None)
@given(st.integers(FIRST_FLEXIBLE_VERSION, FAST_PATH_VERSIONS[1]), st.binary(min_size=1, max_size=6),
       st.integers(0, 320))
def test_both_twins_read_no_byte_past_a_flexible_frame(version, tail, cut):
    """A flexible frame cut anywhere (its varints included) inside a buffer that goes on with bytes that would
    complete it: neither twin reads past the frame's size (the compiled one bounds every read by it)."""
    body = ProduceRequest(transactional_id="tx", acks=1, timeout_ms=1, topic_data=[TopicProduceData(
        name="t" * 130, partition_data=[PartitionProduceData(index=0, records=b"r" * 150)])])  # two-byte lengths
    frame = encode_request(ApiKey.PRODUCE, version, 1, "c", body)[4:]
    size = max(len(frame) - cut, 0)
    data = size.to_bytes(4, "big") + frame[:size] + frame[size:] + tail  # the size prefix says where it stops
    for scan in TWINS:
        requests, end = scan(memoryview(data), 0, 9, 1 << 20)
        assert (end, len(requests)) == ((4 + size, 1) if size == len(frame) else (0, 0))


def long_uvarint(value: int, width: int) -> bytes:
    """`value` as an unsigned varint of `width` bytes (zero groups after the first: not the shortest form)."""
    return bytes([(value >> 7 * i) & 0x7F | 0x80 for i in range(width - 1)] + [(value >> 7 * (width - 1)) & 0x7F])


@pytest.mark.parametrize("scan", TWINS)
@pytest.mark.parametrize("width", range(1, 7))
def test_a_length_is_read_in_up_to_five_bytes(scan, width):
    """Kafka's unsigned varints take at most 5 bytes: a records length written in 5 is read, in 6 refused."""
    body = ProduceRequest(acks=1, timeout_ms=1, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"r" * 20)])])
    frame = encode_request(ApiKey.PRODUCE, FAST_PATH_VERSIONS[1], 1, "c", body)[4:]
    assert frame.count(b"\x15" + b"r" * 20) == 1  # the records' length+1, then the records
    frame = frame.replace(b"\x15" + b"r" * 20, long_uvarint(21, width) + b"r" * 20)
    requests, _ = scan(memoryview(len(frame).to_bytes(4, "big") + frame), 0, 9, 1 << 20)
    if width <= 5:
        assert [bytes(r.records) for r in requests] == [b"r" * 20]
        assert bytes(decode_request(frame).body.topic_data[0].partition_data[0].records) == b"r" * 20
    else:
        assert requests == []
        with pytest.raises(MalformedRequest):
            decode_request(frame)
