"""The consumer group records of `__consumer_offsets` (KIP-848, protocol/consumer_group_records.py): Kafka's byte
layout, hypothesis round trips of every record type, the offsets' reader and this one telling their records
apart, and malformed input refused (cut at every byte, trailing bytes, an unknown value version)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.protocol import consumer_group_records as cgr
from sparklog.protocol import consumer_offsets
from sparklog.protocol.consumer_group_records import RecordKey, decode_key, decode_value, encode_key, encode_value

names = st.text(max_size=20)
nullable = st.none() | names
int8 = st.integers(-128, 127)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
ids = st.builds(uuid.UUID, int=st.integers(0, 2**128 - 1))
indexes = st.lists(int32, max_size=5)


def partitions_of(struct_cls):
    return st.lists(st.builds(struct_cls, topic_id=ids, partitions=indexes), max_size=3)


V = cgr.VALUES
VALUE_STRATEGIES = {
    cgr.GROUP_METADATA: st.builds(V[cgr.GROUP_METADATA], epoch=int32, metadata_hash=int64),
    cgr.PARTITION_METADATA: st.builds(V[cgr.PARTITION_METADATA], topics=st.lists(st.builds(
        V[cgr.PARTITION_METADATA].TopicMetadata, topic_id=ids, topic_name=names, num_partitions=int32,
        partition_metadata=st.lists(st.builds(V[cgr.PARTITION_METADATA].TopicMetadata.PartitionMetadata,
                                              partition=int32, racks=st.lists(names, max_size=2)), max_size=2)),
        max_size=3)),
    cgr.MEMBER_METADATA: st.builds(
        V[cgr.MEMBER_METADATA], instance_id=nullable, rack_id=nullable, client_id=names, client_host=names,
        subscribed_topic_names=st.lists(names, max_size=3), subscribed_topic_regex=nullable,
        rebalance_timeout_ms=int32, server_assignor=nullable),
    cgr.TARGET_ASSIGNMENT_METADATA: st.builds(V[cgr.TARGET_ASSIGNMENT_METADATA], assignment_epoch=int32),
    cgr.TARGET_ASSIGNMENT_MEMBER: st.builds(
        V[cgr.TARGET_ASSIGNMENT_MEMBER], topic_partitions=partitions_of(V[cgr.TARGET_ASSIGNMENT_MEMBER].TopicPartitions)),
    cgr.CURRENT_MEMBER_ASSIGNMENT: st.builds(
        V[cgr.CURRENT_MEMBER_ASSIGNMENT], member_epoch=int32, previous_member_epoch=int32, state=int8,
        assigned_partitions=partitions_of(V[cgr.CURRENT_MEMBER_ASSIGNMENT].AssignedTopicPartitions),
        partitions_pending_revocation=partitions_of(V[cgr.CURRENT_MEMBER_ASSIGNMENT].PendingTopicPartitions)),
}


@st.composite
def records(draw):
    kind = draw(st.sampled_from(sorted(VALUE_STRATEGIES)))
    member = draw(names) if kind in cgr.MEMBER_RECORD_TYPES else None
    return RecordKey(kind, draw(names), member), draw(VALUE_STRATEGIES[kind])


def kafka_string(text: str) -> bytes:
    return struct.pack(">h", len(text.encode())) + text.encode()


def test_the_keys_and_a_value_are_kafkas_layout():
    """A key: int16 record type, then group id (and member id) as int16-length strings; a value: int16 version
    0, then its flexible fields (an empty tagged-field section closes it)."""
    assert encode_key(RecordKey(cgr.GROUP_METADATA, "grp")) == struct.pack(">h", 3) + kafka_string("grp")
    assert encode_key(RecordKey(cgr.CURRENT_MEMBER_ASSIGNMENT, "grp", "m1")) == (
        struct.pack(">h", 8) + kafka_string("grp") + kafka_string("m1"))
    value = encode_value(cgr.GROUP_METADATA, V[cgr.GROUP_METADATA](epoch=7))
    assert value == struct.pack(">hi", 0, 7) + b"\x00"


@given(records())
def test_records_round_trip(record):
    key, value = record
    assert decode_key(encode_key(key)) == key
    assert decode_value(key.type, encode_value(key.type, value)) == value


def test_the_offsets_reader_and_this_one_tell_their_records_apart():
    offset_key = consumer_offsets.encode_key(consumer_offsets.CommitKey("grp", "t", 0))
    group_metadata_key = struct.pack(">h", 2) + kafka_string("grp")  # a classic group's metadata
    assert decode_key(offset_key) is None and decode_key(group_metadata_key) is None
    for kind in cgr.RECORD_TYPES:
        member = "m" if kind in cgr.MEMBER_RECORD_TYPES else None
        assert consumer_offsets.decode_key(encode_key(RecordKey(kind, "grp", member))) is consumer_offsets.NOT_AN_OFFSET


def test_a_key_that_does_not_match_its_type_is_not_encoded():
    with pytest.raises(ValueError):
        encode_key(RecordKey(cgr.GROUP_METADATA, "grp", "m1"))
    with pytest.raises(ValueError):
        encode_key(RecordKey(cgr.MEMBER_METADATA, "grp"))


@given(records())
def test_cut_or_padded_records_are_refused(record):
    key, value = record
    key_bytes, value_bytes = encode_key(key), encode_value(key.type, value)
    for data, decode in ((key_bytes, decode_key), (value_bytes, lambda d: decode_value(key.type, d))):
        for cut in range(len(data)):
            with pytest.raises(ValueError):
                decode(data[:cut])
        with pytest.raises(ValueError):
            decode(data + b"\x00")


def test_an_unknown_value_version_is_refused():
    with pytest.raises(ValueError, match="version 1"):
        decode_value(cgr.GROUP_METADATA, struct.pack(">hi", 1, 7) + b"\x00")


def test_an_unknown_tag_is_skipped():
    """A newer Kafka's tagged field (ConsumerGroupMetadataValue's tag 1, CreationTimeMs) does not stop the read."""
    data = struct.pack(">hi", 0, 7) + bytes([1, 1, 8]) + struct.pack(">q", 1234)
    assert decode_value(cgr.GROUP_METADATA, data).epoch == 7


@given(st.sampled_from(sorted(VALUE_STRATEGIES)), st.binary(max_size=64))
def test_random_bytes_decode_or_are_refused_with_value_error(kind, data):
    """Fuzz: any bytes give a key, None (another record type) or ValueError, never another exception."""
    for decode in (decode_key, lambda d: decode_value(kind, d)):
        try:
            decode(data)
        except ValueError:
            pass


@given(records(), st.data())
def test_mutated_records_decode_or_are_refused_with_value_error(record, data):
    key, value = record
    for blob, decode in ((encode_key(key), decode_key), (encode_value(key.type, value),
                                                          lambda d: decode_value(key.type, d))):
        at = data.draw(st.integers(0, len(blob) - 1))
        mutated = blob[:at] + bytes([data.draw(st.integers(0, 255))]) + blob[at + 1:]
        try:
            decode(mutated)
        except ValueError:
            pass
