"""The generated decoders against lengths and counts a peer made up: each is checked against the bytes
left before anything is built for it (schema.py's contract), and the check never refuses a valid body."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparklog.protocol import ALL_VERSIONS, REQUESTS, ApiKey, MalformedRequest, decode_request
from unit.protocol.strategies import struct_of

CASES = [(key, v) for key, (lo, hi) in ALL_VERSIONS.items() for v in range(lo, hi + 1)]
CLAIMED_TOPICS = 1_000_000
# CreateTopics v4 (not flexible) topic: name(2) num_partitions(4) replication_factor(2) assignments(4) configs(4)
SMALLEST_TOPIC = 16


def create_topics_frame(count: int, body_bytes: int) -> bytes:
    header = struct.pack(">hhih", int(ApiKey.CREATE_TOPICS), 4, 1, -1)  # api, version, correlation, no client
    return header + struct.pack(">i", count) + bytes(body_bytes)


def min_wire_size(*args):
    from sparklog.protocol.schema import min_wire_size  # new in issue 14: imported here so the rest runs on old code

    return min_wire_size(*args)


def test_smallest_create_topics_topic():
    topic = REQUESTS[ApiKey.CREATE_TOPICS].CreatableTopic
    assert min_wire_size(topic._fields, 4, False) == SMALLEST_TOPIC


def test_a_claimed_count_is_refused_before_any_element_is_built():
    """A million topics claimed over 1 MiB of zeros (each 16 zero bytes is a valid, empty topic): refused
    from the count, not after building the 65,536 topics the bytes hold."""
    frame = create_topics_frame(CLAIMED_TOPICS, 1 << 20)
    decode_request(create_topics_frame(0, 5))  # compile the decoder first: its code is not the point
    tracemalloc.start()
    try:
        with pytest.raises(MalformedRequest, match="array count past the end"):
            decode_request(frame)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024


def test_a_count_the_bytes_can_hold_still_decodes():
    count = (1 << 12) // SMALLEST_TOPIC
    request = decode_request(create_topics_frame(count, count * SMALLEST_TOPIC + 5))  # + timeout, validate_only
    assert len(request.body.topics) == count


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_no_valid_body_is_shorter_than_its_smallest_encoding(data):
    key, version = data.draw(st.sampled_from(CASES))
    cls = REQUESTS[key]
    body = data.draw(struct_of(cls, version))
    chunks: list = []
    last = cls.encoder(version)(body, bytearray(), chunks)
    encoded = sum(len(c) for c in chunks) + len(last)
    assert encoded >= min_wire_size(cls._fields, version, cls.is_flexible(version))
