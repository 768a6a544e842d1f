"""A segment verified before its first read (storage Rule 5) is verified off the event loop: while one
partition's segment verifies, the broker answers everyone else (handlers.py `handle_fetch`)."""

from __future__ import annotations


from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import build_batch, iter_records

from unit.broker.test_handlers import logs, state  # noqa: F401 - fixtures
from unit.broker.test_server import recv_frame, served  # noqa: F401 - fixtures


def fetch_frame(partition: int, correlation_id: int) -> bytes:
    body = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])])
    return encode_request(ApiKey.FETCH, 11, correlation_id, "t", body)


def fetched_values(sock) -> list[bytes]:
    _, response = decode_response(ApiKey.FETCH, 11, recv_frame(sock))
    return [r.value for r in iter_records(bytes(response.responses[0].partitions[0].records))]


def test_a_fetch_of_another_partition_is_answered_while_a_segment_verifies(served, state):  # noqa: F811
    leading = state.partitions.snapshot.leading
    slow, other = leading[("t", 0)], leading[("t", 1)]
    slow.append(build_batch([(None, b"old", None, None)]))
    slow.roll()
    other.append(build_batch([(None, b"other", None, None)]))
    loaded = slow._segments[0]
    loaded.verified = False  # as a reopened log leaves its loaded segments (Rule 5)
    first, second = served.connect(), served.connect()
    try:
        with loaded._pin_lock:  # the verification of `loaded` cannot start its replay until released
            first.sendall(fetch_frame(0, 1))
            second.sendall(fetch_frame(1, 2))
            second.settimeout(5)
            assert fetched_values(second) == [b"other"]  # the event loop was not held by the verification
        first.settimeout(10)
        assert fetched_values(first) == [b"old"]
        assert loaded.verified
    finally:
        first.close()
        second.close()
