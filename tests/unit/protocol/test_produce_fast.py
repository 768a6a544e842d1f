"""The one-partition Produce codec (protocol/produce.py Rules 1 and 2) against the general codec: whatever it
decodes, decode_request decodes to the same values; whatever it leaves (None) is any other shape; and its
response bytes are encode_response's, for every Produce version served."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.protocol import ApiKey, MalformedRequest, PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.produce import (FAST_PATH_VERSIONS, FIRST_FLEXIBLE_VERSION, LeaderIdAndEpoch,
                                       PartitionProduceResponse, ProduceResponse, TopicProduceResponse,
                                       decode_single_partition, encode_single_partition_response)
from sparklog.protocol.registry import decode_request, encode_request, encode_response
from sparklog.protocol.types import write_uvarint

from unit.protocol.strategies import struct_of

VERSIONS = st.integers(*FAST_PATH_VERSIONS)  # v0-v2 (legacy message sets) take the general path
FLEXIBLE = st.integers(FIRST_FLEXIBLE_VERSION, FAST_PATH_VERSIONS[1])
INT16, INT32, INT64 = (st.integers(-(1 << b - 1), (1 << b - 1) - 1) for b in (16, 32, 64))
CLIENT_IDS = st.none() | st.text(max_size=8)


def frame_of(version, correlation_id, client_id, body) -> memoryview:
    return memoryview(encode_request(ApiKey.PRODUCE, version, correlation_id, client_id, body))[4:]


@st.composite
def single_partition(draw, versions=VERSIONS):
    """A valid one-topic, one-partition Produce request frame."""
    return draw(versions), draw(INT32), draw(CLIENT_IDS), ProduceRequest(
        transactional_id=draw(st.none() | st.text(max_size=6)), acks=draw(INT16), timeout_ms=draw(INT32),
        topic_data=[TopicProduceData(name=draw(st.text(max_size=10)), partition_data=[PartitionProduceData(
            index=draw(INT32), records=draw(st.binary(max_size=60)))])])


@settings(max_examples=150, deadline=None)
@given(single_partition())
def test_the_fast_decoder_reads_what_the_general_decoder_reads(case):
    version, correlation_id, client_id, body = case
    fast = decode_single_partition(frame_of(version, correlation_id, client_id, body))
    assert fast is not None
    general = decode_request(frame_of(version, correlation_id, client_id, body))
    topic = general.body.topic_data[0]
    assert (fast.api_version, fast.correlation_id, fast.acks, fast.timeout_ms, fast.topic, fast.index,
            bytes(fast.records)) == (version, correlation_id, general.body.acks, general.body.timeout_ms,
                                     topic.name, topic.partition_data[0].index,
                                     bytes(topic.partition_data[0].records))


@settings(max_examples=150, deadline=None)
@given(st.integers(*FAST_PATH_VERSIONS).flatmap(lambda v: st.tuples(st.just(v), struct_of(ProduceRequest, v))))
def test_any_other_shape_is_left_to_the_general_path(case):
    version, body = case
    fast = decode_single_partition(frame_of(version, 1, "c", body))
    one = (len(body.topic_data) == 1 and len(body.topic_data[0].partition_data) == 1
           and body.topic_data[0].partition_data[0].records is not None)
    assert (fast is not None) == one


@settings(max_examples=250, deadline=None)
@given(single_partition(), st.data())
def test_a_damaged_frame_is_read_alike_or_left_to_the_general_path(case, data):
    """Truncated or overwritten bytes: the fast decoder answers only where the general one agrees with it."""
    version, correlation_id, client_id, body = case
    frame = bytearray(frame_of(version, correlation_id, client_id, body))
    cut = data.draw(st.integers(0, len(frame)))
    for position, value in data.draw(st.lists(st.tuples(st.integers(0, len(frame) - 1), st.integers(0, 255)),
                                              max_size=3)):
        frame[position] = value
    frame = frame[:cut] if data.draw(st.booleans()) else frame
    fast = decode_single_partition(memoryview(frame))
    if fast is None:
        return
    general = decode_request(memoryview(frame))  # must not raise: the fast path would have answered garbage
    topic = general.body.topic_data
    assert len(topic) == 1 and len(topic[0].partition_data) == 1
    assert (general.header.api_key, general.header.api_version, general.header.correlation_id) == (
        0, fast.api_version, fast.correlation_id)
    assert (general.body.acks, general.body.timeout_ms, topic[0].name, topic[0].partition_data[0].index,
            bytes(topic[0].partition_data[0].records)) == (fast.acks, fast.timeout_ms, fast.topic, fast.index,
                                                           bytes(fast.records))


@settings(max_examples=150, deadline=None)
@given(single_partition(), INT64, INT64, INT64)
def test_the_fast_response_is_the_general_response(case, base_offset, append_time, log_start):
    version, correlation_id, client_id, body = case
    request = decode_single_partition(frame_of(version, correlation_id, client_id, body))
    general = encode_response(RequestHeader(ApiKey.PRODUCE, version, correlation_id, client_id), ProduceResponse(
        responses=[TopicProduceResponse(name=request.topic, partition_responses=[PartitionProduceResponse(
            index=request.index, error_code=0, base_offset=base_offset, log_append_time_ms=append_time,
            log_start_offset=log_start)])], throttle_time_ms=0))
    fast = encode_single_partition_response(request, base_offset, append_time, log_start)
    assert fast == b"".join(bytes(chunk) for chunk in general)


def test_other_apis_and_versions_are_left_alone():
    body = ProduceRequest(acks=1, timeout_ms=1, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"x")])])
    frame = bytearray(frame_of(8, 1, "c", body))
    assert decode_single_partition(memoryview(frame)) is not None
    for api_key, version in ((1, 8), (0, 2), (0, 9), (0, -1)):
        frame[0:4] = api_key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True)
        assert decode_single_partition(memoryview(frame)) is None
    assert decode_single_partition(b"") is None and decode_single_partition(b"\x00\x00") is None


def test_flexible_versions_are_read():
    body = ProduceRequest(transactional_id="tx", acks=-1, timeout_ms=30, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(index=3, records=b"x" * 200)])])  # a two-byte length
    for version in range(FIRST_FLEXIBLE_VERSION, 12):
        fast = decode_single_partition(frame_of(version, 5, "c", body))
        assert fast is not None and (fast.api_version, fast.correlation_id, fast.acks, fast.timeout_ms, fast.topic,
                                     fast.index, bytes(fast.records)) == (version, 5, -1, 30, "t", 3, b"x" * 200)


@st.composite
def tagged_frame(draw):
    """(a valid one-partition flexible frame, the same with a tagged field in its header, partition, topic or
    body, or with its topic or partition count written in two bytes)."""
    version, correlation_id, client_id, body = draw(single_partition(FLEXIBLE))
    frame = bytes(frame_of(version, correlation_id, client_id, body))
    header_tags = 10 + (0 if client_id is None else len(client_id.encode()))
    where = draw(st.sampled_from([header_tags, len(frame) - 3, len(frame) - 2, len(frame) - 1, "topics",
                                  "partitions"]))
    if where == "topics":  # after the transactional_id, acks and timeout_ms
        txn = body.transactional_id
        at = header_tags + 1 + len(write_uvarint(0 if txn is None else len(txn.encode()) + 1))
        at += (0 if txn is None else len(txn.encode())) + 6
        return frame, frame[:at] + b"\x82\x00" + frame[at + 1:]
    if where == "partitions":
        name = body.topic_data[0].name.encode()
        at = len(frame) - 3 - len(body.topic_data[0].partition_data[0].records)
        at -= len(write_uvarint(len(body.topic_data[0].partition_data[0].records) + 1)) + 5
        assert frame[at - len(name):at] == name
        return frame, frame[:at] + b"\x82\x00" + frame[at + 1:]
    data = draw(st.binary(max_size=5))
    field = write_uvarint(draw(st.integers(0, 300))) + write_uvarint(len(data)) + data
    return frame, frame[:where] + b"\x01" + field + frame[where + 1:]


@settings(max_examples=150, deadline=None)
@given(tagged_frame())
def test_tagged_fields_and_long_counts_are_left_to_the_general_path(case):
    plain, tagged = case
    assert decode_single_partition(plain) is not None and decode_single_partition(tagged) is None
    assert decode_request(tagged).body == decode_request(plain).body  # the general path reads them alike


@settings(max_examples=100, deadline=None)
@given(single_partition(FLEXIBLE), INT64, INT64, INT64)
def test_the_fast_response_sends_no_default_leader_hints(case, base_offset, append_time, log_start):
    """v10+: the general encoder given Kafka's defaults of current_leader and node_endpoints (not sent) writes the
    fast path's bytes."""
    version, correlation_id, client_id, body = case
    request = decode_single_partition(frame_of(version, correlation_id, client_id, body))
    general = encode_response(RequestHeader(ApiKey.PRODUCE, version, correlation_id, client_id), ProduceResponse(
        responses=[TopicProduceResponse(name=request.topic, partition_responses=[PartitionProduceResponse(
            index=request.index, error_code=0, base_offset=base_offset, log_append_time_ms=append_time,
            log_start_offset=log_start, current_leader=LeaderIdAndEpoch())])], throttle_time_ms=0,
        node_endpoints=[]))
    fast = encode_single_partition_response(request, base_offset, append_time, log_start)
    assert fast == b"".join(bytes(chunk) for chunk in general)


def test_versions_past_the_fast_path_are_left_alone():
    body = ProduceRequest(acks=1, timeout_ms=1, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"x")])])
    frame = bytearray(frame_of(FAST_PATH_VERSIONS[1], 1, "c", body))
    assert decode_single_partition(memoryview(frame)) is not None
    frame[2:4] = (FAST_PATH_VERSIONS[1] + 1).to_bytes(2, "big")
    assert decode_single_partition(memoryview(frame)) is None


def test_a_null_name_or_null_records_is_left_to_the_general_path():
    """Compact length 0 is null: the general decoder refuses a null topic name and the fast path takes no null
    record set."""
    body = ProduceRequest(acks=1, timeout_ms=1, topic_data=[TopicProduceData(name="t", partition_data=[
        PartitionProduceData(index=0, records=b"r")])])
    for version in range(FIRST_FLEXIBLE_VERSION, FAST_PATH_VERSIONS[1] + 1):
        frame = bytes(frame_of(version, 1, "c", body))
        null_name = frame.replace(b"\x02t\x02", b"\x00\x02")  # the name's length+1 then the partitions' count
        null_records = frame.replace(b"\x02r\x00\x00\x00", b"\x00\x00\x00\x00")
        assert len(null_name) == len(frame) - 1 and len(null_records) == len(frame) - 1
        assert decode_single_partition(null_name) is None and decode_single_partition(null_records) is None
        with pytest.raises(MalformedRequest):
            decode_request(null_name)
        assert decode_request(null_records).body.topic_data[0].partition_data[0].records is None
