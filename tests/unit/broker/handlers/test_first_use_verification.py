"""A segment verified before its first use (storage log.py Rule: verify-before-first-use) is verified off the event
loop: while one partition's segment verifies, the broker answers everyone else (handlers.py `handle_fetch`,
`handle_list_offsets`)."""

from __future__ import annotations

import time

import pytest

from sparklog.protocol import (ApiKey, FetchPartition, FetchRequest, FetchTopic, ListOffsetsPartition,
                               ListOffsetsRequest, ListOffsetsTopic)
from sparklog.protocol.registry import decode_response, encode_request
from sparklog.records.batch import build_batch, iter_records

from unit.broker.handlers.test_handlers import logs, state  # noqa: F401 - fixtures
from unit.broker.network.test_server import recv_frame, served  # noqa: F401 - fixtures


FIRST_GETS_STUCK_S = 0.3  # long enough for the first request to reach its verification

def fetch_frame(partition: int, correlation_id: int) -> bytes:
    body = FetchRequest(max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=partition, fetch_offset=0, partition_max_bytes=1 << 20)])])
    return encode_request(ApiKey.FETCH, 11, correlation_id, "t", body)


def fetched_values(sock) -> list[bytes]:
    _, response = decode_response(ApiKey.FETCH, 11, recv_frame(sock))
    return [r.value for r in iter_records(bytes(response.responses[0].partitions[0].records))]


def list_offsets_frame(partition: int, correlation_id: int) -> bytes:
    body = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(name="t", partitions=[
        ListOffsetsPartition(partition_index=partition, timestamp=0)])])
    return encode_request(ApiKey.LIST_OFFSETS, 2, correlation_id, "t", body)


def offset_found(sock) -> int:
    _, response = decode_response(ApiKey.LIST_OFFSETS, 2, recv_frame(sock))
    return response.topics[0].partitions[0].offset


@pytest.mark.parametrize("ask, answer", [(fetch_frame, fetched_values), (list_offsets_frame, offset_found)],
                         ids=["fetch", "list-offsets-by-time"])
def test_another_partition_is_answered_while_a_loaded_segment_verifies(served, state, ask, answer):  # noqa: F811
    leading = state.partitions.snapshot.leading
    slow, other = leading[("t", 0)], leading[("t", 1)]
    slow.append(build_batch([(None, b"old", None, 1000)]))
    slow.roll()
    other.append(build_batch([(None, b"other", None, 1000)]))
    loaded = slow._segments[0]
    loaded.verified = False  # as a reopened log leaves its loaded segments (Rule 5)
    first, second = served.connect(), served.connect()
    try:
        with loaded._pin_lock:  # the verification of `loaded` cannot start its replay until released
            first.sendall(ask(0, 1))
            time.sleep(FIRST_GETS_STUCK_S)  # the second comes after: it must not wait behind the first
            second.sendall(ask(1, 2))
            second.settimeout(5)
            assert answer(second) in ([b"other"], 0)  # the event loop was not held by the verification
        first.settimeout(10)
        assert answer(first) in ([b"old"], 0)
        assert loaded.verified
    finally:
        first.close()
        second.close()
