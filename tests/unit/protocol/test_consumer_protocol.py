"""The consumer protocol's Subscription and Assignment against bytes written out by hand from Kafka's specs:
decoded whole, refused when cut at any byte or followed by garbage, newer versions read by their known
prefix (Rule 1), and round trips of any value (hypothesis)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.protocol.consumer_protocol import (HIGHEST_VERSION, ConsumerProtocolAssignment,
                                                 ConsumerProtocolSubscription, MalformedConsumerProtocol,
                                                 TopicPartitions, assigned_partitions, decode_assignment,
                                                 decode_subscription, encode_assignment, encode_subscription)


def s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)


# Assignment v1: topic "t" partitions [0, 3], topic "u" partition [7], user data b"ud".
ASSIGNMENT_V1 = i16(1) + i32(2) + s("t") + i32(2) + i32(0) + i32(3) + s("u") + i32(1) + i32(7) + i32(2) + b"ud"
ASSIGNMENT = ConsumerProtocolAssignment(assigned_partitions=[TopicPartitions(topic="t", partitions=[0, 3]),
                                                             TopicPartitions(topic="u", partitions=[7])],
                                        user_data=b"ud")
# Subscription v3: topics [t], null user data, owned t-[1], generation 5, rack "r1".
SUBSCRIPTION_V3 = i16(3) + i32(1) + s("t") + i32(-1) + i32(1) + s("t") + i32(1) + i32(1) + i32(5) + s("r1")
SUBSCRIPTION = ConsumerProtocolSubscription(
    topics=["t"], user_data=None, generation_id=5, rack_id="r1",
    owned_partitions=[ConsumerProtocolSubscription.TopicPartitions(topic="t", partitions=[1])])
CASES = [(decode_assignment, ASSIGNMENT_V1, ASSIGNMENT), (decode_subscription, SUBSCRIPTION_V3, SUBSCRIPTION)]


@pytest.mark.parametrize("decode,data,body", CASES, ids=["assignment", "subscription"])
def test_decodes_whole(decode, data, body):
    assert decode(data) == body


@pytest.mark.parametrize("decode,data,body", CASES, ids=["assignment", "subscription"])
def test_cut_at_any_byte_is_refused(decode, data, body):
    for end in range(len(data)):
        with pytest.raises(MalformedConsumerProtocol):
            decode(data[:end])


@pytest.mark.parametrize("decode,data,body", CASES, ids=["assignment", "subscription"])
def test_trailing_bytes_after_a_known_version_are_refused(decode, data, body):
    with pytest.raises(MalformedConsumerProtocol, match="1 bytes after the message"):
        decode(data + b"\x00")


def test_a_newer_version_is_read_by_its_known_prefix():
    newer = i16(HIGHEST_VERSION + 1) + ASSIGNMENT_V1[2:] + b"new fields"
    assert decode_assignment(newer) == ASSIGNMENT


def test_a_count_larger_than_the_bytes_is_refused_before_building_anything():
    with pytest.raises(MalformedConsumerProtocol):
        decode_assignment(i16(0) + i32(2_000_000_000) + s("t"))


def test_negative_version_is_refused():
    with pytest.raises(MalformedConsumerProtocol, match="negative version"):
        decode_assignment(i16(-1) + ASSIGNMENT_V1[2:])


def test_assigned_partitions_pairs_sorted_and_empty_for_a_member_not_yet_synced():
    assert assigned_partitions(ASSIGNMENT_V1) == (("t", 0), ("t", 3), ("u", 7))
    assert assigned_partitions(b"") == ()


names = st.text(min_size=1, max_size=20)
partitions = st.lists(st.integers(0, 2**31 - 1), max_size=5)
user_data = st.none() | st.binary(max_size=20)


@given(st.lists(st.builds(TopicPartitions, topic=names, partitions=partitions), max_size=4), user_data,
       st.integers(0, HIGHEST_VERSION))
def test_assignment_round_trips(assigned, data, version):
    body = ConsumerProtocolAssignment(assigned_partitions=assigned, user_data=data)
    assert decode_assignment(encode_assignment(body, version)) == body


@given(st.lists(names, max_size=4), user_data, st.integers(-1, 100), st.none() | names)
def test_subscription_round_trips_at_the_highest_version(topics, data, generation, rack):
    owned = [ConsumerProtocolSubscription.TopicPartitions(topic=t, partitions=[0]) for t in topics]
    body = ConsumerProtocolSubscription(topics=topics, user_data=data, owned_partitions=owned,
                                        generation_id=generation, rack_id=rack)
    assert decode_subscription(encode_subscription(body)) == body
