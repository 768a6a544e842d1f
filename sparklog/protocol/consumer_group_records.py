"""The records of a consumer group of the consumer group protocol (KIP-848) in `__consumer_offsets`: Kafka's
group coordinator's own key and value schemas, so Kafka's tools read them and a group's state outlives its
coordinator. Transcribed from Kafka's ConsumerGroup*Key.json and ConsumerGroup*Value.json (group-coordinator).

A key opens with an int16 version that names the record type (consumer_offsets.py's keys are 0-2); a value
opens with an int16 version, 0 for every type here, and is flexible (compact strings, tagged fields after the
last field; tags this module does not name are skipped):

    type  key                     value (v0)
    3     group_id                ConsumerGroupMetadata: epoch (the group epoch); tag 0 metadata_hash
    4     group_id                ConsumerGroupPartitionMetadata: the subscribed topics at the last target
                                  assignment, each (topic_id, topic_name, num_partitions, partition_metadata)
    5     group_id, member_id     ConsumerGroupMemberMetadata: instance_id, rack_id, client_id, client_host,
                                  subscribed_topic_names, subscribed_topic_regex, rebalance_timeout_ms,
                                  server_assignor
    6     group_id                ConsumerGroupTargetAssignmentMetadata: assignment_epoch
    7     group_id, member_id     ConsumerGroupTargetAssignmentMember: the member's target, (topic_id, partitions)
    8     group_id, member_id     ConsumerGroupCurrentMemberAssignment: member_epoch, previous_member_epoch,
                                  state (Kafka's MemberState byte), assigned_partitions,
                                  partitions_pending_revocation

Rule 1: compaction keeps the last record of each key; a tombstone (null value) deletes the key. A group's
state is the last record of each of its keys.
Rule 2: `decode_key` answers None for a record of another type (an offset commit, a classic group's metadata),
so the offsets' reader and this one share the topic; bytes that do not decode raise `ValueError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from sparklog.protocol.consumer_offsets import decode_versioned
from sparklog.protocol.schema import F, Message, message

__all__ = ["GROUP_METADATA", "PARTITION_METADATA", "MEMBER_METADATA", "TARGET_ASSIGNMENT_METADATA",
           "TARGET_ASSIGNMENT_MEMBER", "CURRENT_MEMBER_ASSIGNMENT", "RECORD_TYPES", "MEMBER_RECORD_TYPES",
           "RecordKey", "VALUES", "encode_key", "decode_key", "encode_value", "decode_value",
           "STABLE", "UNRELEASED_PARTITIONS", "UNREVOKED_PARTITIONS"]

(GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_ASSIGNMENT_METADATA, TARGET_ASSIGNMENT_MEMBER,
 CURRENT_MEMBER_ASSIGNMENT) = range(3, 9)
RECORD_TYPES = range(GROUP_METADATA, CURRENT_MEMBER_ASSIGNMENT + 1)
MEMBER_RECORD_TYPES = frozenset({MEMBER_METADATA, TARGET_ASSIGNMENT_MEMBER, CURRENT_MEMBER_ASSIGNMENT})
VALUE_VERSION = 0
STABLE, UNRELEASED_PARTITIONS, UNREVOKED_PARTITIONS = 0, 1, 2  # Kafka's MemberState bytes
_VERSION = struct.Struct(">h")

# One layout serves every type of its kind: the key's "version" is the record type.
_GroupKey = message("ConsumerGroupKey", api_key=-1, versions="3-8", module=__name__, fields=[
    F("group_id", "string", "0+"),
])
_MemberKey = message("ConsumerGroupMemberKey", api_key=-1, versions="3-8", module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("member_id", "string", "0+"),
])


def _topic_partitions(name: str, struct: str) -> F:
    """Kafka's TopicPartitions (topic id, partition indexes), under a struct name of its own per field."""
    return F(name, f"[]{struct}", "0+", fields=[
        F("topic_id", "uuid", "0+"),
        F("partitions", "[]int32", "0+"),
    ])


ConsumerGroupMetadataValue = message(
    "ConsumerGroupMetadataValue", api_key=-1, versions="0", flexible="0+", module=__name__, fields=[
        F("epoch", "int32", "0+"),
        F("metadata_hash", "int64", "0+", default=0, tag=0, tagged="0+"),
    ])

ConsumerGroupPartitionMetadataValue = message(
    "ConsumerGroupPartitionMetadataValue", api_key=-1, versions="0", flexible="0+", module=__name__, fields=[
        F("topics", "[]TopicMetadata", "0+", fields=[
            F("topic_id", "uuid", "0+"),
            F("topic_name", "string", "0+"),
            F("num_partitions", "int32", "0+"),
            F("partition_metadata", "[]PartitionMetadata", "0+", fields=[
                F("partition", "int32", "0+"),
                F("racks", "[]string", "0+"),
            ]),
        ]),
    ])

ConsumerGroupMemberMetadataValue = message(
    "ConsumerGroupMemberMetadataValue", api_key=-1, versions="0", flexible="0+", module=__name__, fields=[
        F("instance_id", "string", "0+", nullable="0+", default=None),
        F("rack_id", "string", "0+", nullable="0+", default=None),
        F("client_id", "string", "0+"),
        F("client_host", "string", "0+"),
        F("subscribed_topic_names", "[]string", "0+"),
        F("subscribed_topic_regex", "string", "0+", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", "0+", default=-1),
        F("server_assignor", "string", "0+", nullable="0+", default=None),
    ])

ConsumerGroupTargetAssignmentMetadataValue = message(
    "ConsumerGroupTargetAssignmentMetadataValue", api_key=-1, versions="0", flexible="0+", module=__name__,
    fields=[
        F("assignment_epoch", "int32", "0+"),
    ])

ConsumerGroupTargetAssignmentMemberValue = message(
    "ConsumerGroupTargetAssignmentMemberValue", api_key=-1, versions="0", flexible="0+", module=__name__,
    fields=[_topic_partitions("topic_partitions", "TopicPartitions")])

ConsumerGroupCurrentMemberAssignmentValue = message(
    "ConsumerGroupCurrentMemberAssignmentValue", api_key=-1, versions="0", flexible="0+", module=__name__,
    fields=[
        F("member_epoch", "int32", "0+"),
        F("previous_member_epoch", "int32", "0+"),
        F("state", "int8", "0+"),
        _topic_partitions("assigned_partitions", "AssignedTopicPartitions"),
        _topic_partitions("partitions_pending_revocation", "PendingTopicPartitions"),
    ])

VALUES: dict[int, type[Message]] = {
    GROUP_METADATA: ConsumerGroupMetadataValue,
    PARTITION_METADATA: ConsumerGroupPartitionMetadataValue,
    MEMBER_METADATA: ConsumerGroupMemberMetadataValue,
    TARGET_ASSIGNMENT_METADATA: ConsumerGroupTargetAssignmentMetadataValue,
    TARGET_ASSIGNMENT_MEMBER: ConsumerGroupTargetAssignmentMemberValue,
    CURRENT_MEMBER_ASSIGNMENT: ConsumerGroupCurrentMemberAssignmentValue,
}


@dataclass(frozen=True, order=True)
class RecordKey:
    """A record's key: its type, the group, and the member for the member types (None otherwise)."""

    type: int
    group_id: str
    member_id: str | None = None


def encode_key(key: RecordKey) -> bytes:
    if key.type not in RECORD_TYPES or (key.member_id is not None) != (key.type in MEMBER_RECORD_TYPES):
        raise ValueError(f"{key}: not a consumer group record key")
    if key.member_id is None:
        body: Any = _GroupKey(group_id=key.group_id)
        cls: type[Message] = _GroupKey
    else:
        body, cls = _MemberKey(group_id=key.group_id, member_id=key.member_id), _MemberKey
    return bytes(cls.encoder(key.type)(body, bytearray(_VERSION.pack(key.type)), []))


def decode_key(data: bytes) -> RecordKey | None:
    """The key in `data`, or None for a record of another type (Rule 2); ValueError if malformed."""
    if len(data) < _VERSION.size:
        raise ValueError(f"a key of {len(data)} bytes is too short for a version")
    (kind,) = _VERSION.unpack_from(data, 0)
    if kind not in RECORD_TYPES:
        return None
    cls = _MemberKey if kind in MEMBER_RECORD_TYPES else _GroupKey
    _, body = decode_versioned(cls, data, accept=RECORD_TYPES)
    return RecordKey(kind, body.group_id, body.member_id if kind in MEMBER_RECORD_TYPES else None)


def encode_value(kind: int, body: Any) -> bytes:
    cls = VALUES[kind]
    return bytes(cls.encoder(VALUE_VERSION)(body, bytearray(_VERSION.pack(VALUE_VERSION)), []))


def decode_value(kind: int, data: bytes) -> Any:
    """The value of a record of type `kind`; ValueError if malformed or of a version other than 0."""
    version, body = decode_versioned(VALUES[kind], data, accept=range(VALUE_VERSION, VALUE_VERSION + 1))
    if body is None:
        raise ValueError(f"{VALUES[kind].__name__} version {version} is not 0")
    return body
