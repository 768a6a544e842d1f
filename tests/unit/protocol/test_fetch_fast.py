"""The one-partition Fetch codec (protocol/fetch.py Rules 1 and 2) against the general codec: whatever it
decodes, decode_request decodes to the same values; whatever it leaves (None) is any other shape; and its
response bytes, records appended, are encode_response's, for every Fetch version served."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
from sparklog.protocol.fetch import (FetchableTopicResponse, FetchResponse, ForgottenTopic, PartitionData, ReplicaState,
                                     decode_single_partition, encode_single_partition_head, single_partition_end)
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.registry import ALL_VERSIONS, decode_request, encode_request, encode_response

from unit.protocol.strategies import struct_of

VERSIONS = st.integers(*ALL_VERSIONS[ApiKey.FETCH])
INT8, INT32, INT64 = (st.integers(-(1 << b - 1), (1 << b - 1) - 1) for b in (8, 32, 64))
CLIENT_IDS = st.none() | st.text(max_size=8)


def frame_of(version, correlation_id, client_id, body) -> memoryview:
    return memoryview(encode_request(ApiKey.FETCH, version, correlation_id, client_id, body))[4:]


@st.composite
def single_partition(draw):
    """A valid one-topic, one-partition Fetch request frame outside any fetch session (Rule 1)."""
    return draw(VERSIONS), draw(INT32), draw(CLIENT_IDS), FetchRequest(
        replica_id=draw(INT32), max_wait_ms=draw(INT32), min_bytes=draw(INT32), max_bytes=draw(INT32),
        isolation_level=draw(INT8), session_id=0, session_epoch=draw(st.sampled_from((0, -1))),
        topics=[FetchTopic(topic=draw(st.text(max_size=10)), topic_id=draw(st.uuids()), partitions=[FetchPartition(
            partition=draw(INT32), current_leader_epoch=draw(INT32), fetch_offset=draw(INT64),
            last_fetched_epoch=draw(INT32), log_start_offset=draw(INT64), partition_max_bytes=draw(INT32))])],
        forgotten_topics_data=[], rack_id=draw(st.text(max_size=6)),
        cluster_id=draw(st.none() | st.text(max_size=6)),  # v12+ tagged fields of the body
        replica_state=draw(st.none() | st.builds(ReplicaState, replica_id=INT32, replica_epoch=INT64)))


def general_values(request) -> tuple:
    body = request.body
    version = request.header.api_version
    part = body.topics[0].partitions[0]
    epoch = part.current_leader_epoch if version >= 9 else -1
    replica_id = body.replica_id if body.replica_state is None else body.replica_state.replica_id  # v15+
    topic_id = body.topics[0].topic_id if version >= 13 else None
    return (version, request.header.correlation_id, replica_id, body.max_wait_ms,
            body.min_bytes, body.max_bytes, body.topics[0].topic, part.partition, epoch, part.fetch_offset,
            part.partition_max_bytes, body.isolation_level, topic_id, part.last_fetched_epoch)


@settings(max_examples=150, deadline=None)
@given(single_partition())
def test_the_fast_decoder_reads_what_the_general_decoder_reads(case):
    version, correlation_id, client_id, body = case
    fast = decode_single_partition(frame_of(version, correlation_id, client_id, body))
    assert fast is not None
    assert tuple(fast) == general_values(decode_request(frame_of(version, correlation_id, client_id, body)))


@settings(max_examples=150, deadline=None)
@given(VERSIONS.flatmap(lambda v: st.tuples(st.just(v), struct_of(FetchRequest, v))))
def test_any_other_shape_is_left_to_the_general_path(case):
    version, body = case
    fast = decode_single_partition(frame_of(version, 1, "c", body))
    one = (len(body.topics) == 1 and len(body.topics[0].partitions) == 1
           and (version < 7 or not body.forgotten_topics_data)
           and (version < 7 or (body.session_id == 0 and body.session_epoch in (0, -1))))
    assert (fast is not None) == one


def test_the_isolation_level_is_read():
    """read_committed is served fast only when nothing is unstable: the handler needs to know it was asked."""
    body = FetchRequest(max_wait_ms=0, min_bytes=1, isolation_level=1, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)])])
    assert decode_single_partition(frame_of(11, 1, "c", body)).isolation_level == 1
    body.isolation_level = 0
    assert decode_single_partition(frame_of(11, 1, "c", body)).isolation_level == 0


@settings(max_examples=150, deadline=None)
@given(single_partition(), INT32, INT32)
def test_a_fetch_in_a_session_is_left_to_the_general_path(case, session_id, epoch):
    """An incremental fetch or one naming a session: the fetch session cache decides what it reads and answers."""
    version, correlation_id, client_id, body = case
    body.session_id, body.session_epoch = session_id, epoch
    fast = decode_single_partition(frame_of(version, correlation_id, client_id, body))
    assert (fast is not None) == (version < 7 or (session_id == 0 and epoch in (0, -1)))


def test_forgotten_topics_are_left_to_the_general_path():
    body = FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)])],
        forgotten_topics_data=[ForgottenTopic(topic="u", partitions=[0])])
    assert decode_single_partition(frame_of(7, 1, "c", body)) is None
    assert decode_single_partition(frame_of(6, 1, "c", body)) is not None  # v6 has no forgotten topics


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
    assert general.header.api_key == ApiKey.FETCH
    assert len(general.body.topics) == 1 and len(general.body.topics[0].partitions) == 1
    assert tuple(fast) == general_values(general)


@settings(max_examples=150, deadline=None)
@given(single_partition(), INT64, INT64, st.binary(max_size=300))
def test_the_fast_response_is_the_general_response(case, high_watermark, log_start, records):
    version, correlation_id, client_id, body = case
    request = decode_single_partition(frame_of(version, correlation_id, client_id, body))
    general = encode_response(RequestHeader(ApiKey.FETCH, version, correlation_id, client_id), FetchResponse(
        throttle_time_ms=0, error_code=0, session_id=0, responses=[FetchableTopicResponse(
            topic=request.topic, topic_id=request.topic_id, partitions=[PartitionData(
                partition_index=request.partition, error_code=0, high_watermark=high_watermark,
                last_stable_offset=high_watermark, log_start_offset=log_start, aborted_transactions=None,
                preferred_read_replica=-1, records=records)])]))
    fast = (encode_single_partition_head(request, high_watermark, log_start, len(records)) + records
            + single_partition_end(version))
    assert fast == b"".join(bytes(chunk) for chunk in general)


def test_other_apis_and_versions_are_left_alone():
    body = FetchRequest(max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1)])])
    frame = bytearray(frame_of(11, 1, "c", body))
    assert decode_single_partition(memoryview(frame)) is not None
    for api_key, version in ((0, 8), (1, 3), (1, 12), (1, -1)):
        frame[0:4] = api_key.to_bytes(2, "big") + version.to_bytes(2, "big", signed=True)
        assert decode_single_partition(memoryview(frame)) is None
    assert decode_single_partition(b"") is None and decode_single_partition(b"\x00\x01") is None
