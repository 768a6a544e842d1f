"""The dispatcher's Fetch fast path (dispatch.py Rule 6, handlers.handle_single_partition_fetch) answers every
request byte for byte as the general path (decode_request -> handle_fetch -> encode_response) answers it, or
leaves it to that path; records arrive as the same FileSlice for the server's os.sendfile.

Real partition logs in temp dirs and a hand-made metadata snapshot, as in test_produce_fast_path.py."""

from __future__ import annotations

import tempfile

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparklog.broker import handlers
from sparklog.protocol.fetch import FetchResponse
from sparklog.broker.network.server import Parked
from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
from sparklog.protocol.registry import ALL_VERSIONS, decode_request, encode_request, encode_response
from sparklog.records.batch import build_batch

from sparklog.coordination import topic_ids

from unit.broker.handlers.test_produce_fast_path import T_ID, broker, identified_session

BATCHES = 30  # of 3 records each in t-0; t-1 stays empty
# a long poll the general path parks is closed unawaited here: its inner coroutine warns
LONG_POLL_CLOSED = pytest.mark.filterwarnings("ignore:coroutine '_fetch_long_poll' was never awaited")


def filled(log_dir: str):
    dispatcher = broker(log_dir)
    plog = dispatcher.state.partitions.snapshot.leading[("t", 0)]
    for i in range(BATCHES):
        plog.append(build_batch([(None, b"value %d" % i * 3, None, None)] * 3))
    return dispatcher


def fetch_frame(version: int, topic: str, partition: int, offset: int, *, max_bytes: int = 1 << 20,
                partition_max_bytes: int = 1 << 20, min_bytes: int = 1, max_wait_ms: int = 0, replica_id: int = -1,
                leader_epoch: int = -1, correlation_id: int = 7) -> memoryview:
    topic_id = topic_ids.to_uuid(T_ID) if topic == "t" else topic_ids.ZERO  # v13+ asks by id
    body = FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        topics=[FetchTopic(topic=topic, topic_id=topic_id, partitions=[FetchPartition(
                            partition=partition, current_leader_epoch=leader_epoch, fetch_offset=offset,
                            partition_max_bytes=partition_max_bytes)])])
    return memoryview(encode_request(ApiKey.FETCH, version, correlation_id, "c", body))[4:]


def materialised(chunks) -> bytes:
    return b"".join(bytes(c) if isinstance(c, (bytes, bytearray, memoryview)) else c.read_bytes() for c in chunks)


def general(dispatcher, frame):
    request = decode_request(frame)
    body = handlers.handle_fetch(request, dispatcher.state)
    if not isinstance(body, FetchResponse):
        body.close()  # a long poll (or a verification first): the fast path must have left it
        return None
    return materialised(encode_response(request.header, body))


FETCHES = st.tuples(
    st.integers(*ALL_VERSIONS[ApiKey.FETCH]), st.sampled_from(["t", "t", "t", "unknown"]),
    st.sampled_from([0, 0, 0, 1, 2, 9]), st.integers(-2, BATCHES * 3 + 2),
    st.sampled_from([1 << 20, 1 << 20, 100, 0, -1]),  # max_bytes
    st.sampled_from([1 << 20, 1 << 20, 250, 1, 0]),  # partition_max_bytes
    st.sampled_from([1, 1, 0, 1 << 30]),  # min_bytes
    st.sampled_from([0, 0, 500]),  # max_wait_ms
    st.sampled_from([-1, -1, -1, 0, 1]),  # current_leader_epoch (0 is the partitions' epoch)
)


@pytest.fixture(scope="module")
def shared():
    """One filled broker for the property test: a consumer's fetch changes nothing, so examples can share it."""
    with tempfile.TemporaryDirectory() as log_dir:
        dispatcher = filled(log_dir)
        try:
            yield dispatcher, identified_session(dispatcher)
        finally:
            dispatcher.state.logs.close()


@LONG_POLL_CLOSED
@settings(max_examples=100, deadline=None)
@given(st.lists(FETCHES, min_size=1, max_size=6))
def test_the_fast_path_answers_as_the_general_path(shared, fetches):
    dispatcher, session = shared
    for version, topic, partition, offset, max_bytes, part_max, min_bytes, wait, epoch in fetches:
        frame = fetch_frame(version, topic, partition, offset, max_bytes=max_bytes, partition_max_bytes=part_max,
                            min_bytes=min_bytes, max_wait_ms=wait, leader_epoch=epoch)
        before = dispatcher.fast_fetches
        reply = dispatcher.handle_frame(frame, session)
        expected = general(dispatcher, frame)
        if isinstance(reply, Parked):  # the general path's long poll
            reply.awaitable.close()
            assert expected is None and dispatcher.fast_fetches == before
            continue
        assert materialised(reply) == expected


def test_a_consumer_fetch_with_records_takes_the_fast_path_and_sends_a_file_slice():
    with tempfile.TemporaryDirectory() as log_dir:
        dispatcher = filled(log_dir)
        try:
            session = identified_session(dispatcher)
            for version in range(ALL_VERSIONS[ApiKey.FETCH][0], ALL_VERSIONS[ApiKey.FETCH][1] + 1):
                frame = fetch_frame(version, "t", 0, 5)
                reply = dispatcher.handle_frame(frame, session)
                # v12+: the tag counts after the records, a third chunk
                assert len(reply) == (2 if version < 12 else 3)
                assert not isinstance(reply[1], (bytes, bytearray, memoryview))  # a FileSlice
                assert materialised(reply) == general(dispatcher, frame)
            assert dispatcher.fast_fetches == ALL_VERSIONS[ApiKey.FETCH][1] - ALL_VERSIONS[ApiKey.FETCH][0] + 1
            # at the end of the log with max_wait_ms = 0: an empty answer, also fast
            assert materialised(dispatcher.handle_frame(fetch_frame(11, "t", 0, BATCHES * 3), session)) == general(
                dispatcher, fetch_frame(11, "t", 0, BATCHES * 3))
        finally:
            dispatcher.state.logs.close()


@LONG_POLL_CLOSED
def test_what_the_fast_path_leaves_is_answered_by_the_general_path():
    with tempfile.TemporaryDirectory() as log_dir:
        dispatcher = filled(log_dir)
        try:
            session = identified_session(dispatcher)
            left = [fetch_frame(11, "t", 0, 0, replica_id=2),  # a replica's fetch (moves the HW: general path)
                    fetch_frame(11, "t", 0, 10_000),  # OFFSET_OUT_OF_RANGE
                    fetch_frame(11, "t", 2, 0),  # led elsewhere: NOT_LEADER_OR_FOLLOWER
                    fetch_frame(11, "unknown", 0, 0),  # UNKNOWN_TOPIC_OR_PARTITION
                    fetch_frame(11, "t", 0, 0, leader_epoch=5),  # UNKNOWN_LEADER_EPOCH
                    fetch_frame(11, "t", 0, 0, max_bytes=0)]  # no budget
            for frame in left:
                assert materialised(dispatcher.handle_frame(frame, session)) == general(dispatcher, frame)
            assert dispatcher.fast_fetches == 0
            parked = dispatcher.handle_frame(fetch_frame(11, "t", 1, 0, max_wait_ms=500), session)  # long poll
            assert isinstance(parked, Parked) and dispatcher.fast_fetches == 0
            parked.awaitable.close()
        finally:
            dispatcher.state.logs.close()
