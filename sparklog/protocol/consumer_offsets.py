"""The records of `__consumer_offsets`: Kafka's own key and value schemas, so Kafka's tools can read the topic.
Transcribed from Kafka's OffsetCommitKey.json and OffsetCommitValue.json (group coordinator).

A record's key and value each start with an int16 version, then the fields of that version:

    key   (version 0 or 1: an offset commit; 2 is a group's metadata, 3+ newer coordinator records)
        group      string   the consumer group id
        topic      string
        partition  int32
    value (version 0-4; we write 3)
        offset           int64
        leader_epoch     int32   v3+ (-1: unknown)
        metadata         string  the committer's metadata
        commit_timestamp int64   ms, the broker's wall clock at the commit
        expire_timestamp int64   v1 only (-1: by offsets.retention.minutes)
        (v4+ is flexible: tagged fields after the last one)

Rule 1: a commit is the record (key, value); a tombstone (null value) deletes the key: compaction keeps the
last record of each key, so the topic's compacted state is the set of committed offsets.
Rule 2: a record whose key is not an offset commit (group metadata, a newer record type) is `NOT_AN_OFFSET`
to the reader, which skips it; bytes that do not decode raise `ValueError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sparklog.protocol.schema import F, message

__all__ = ["OffsetCommitKey", "OffsetCommitValue", "CommitKey", "CommitValue", "encode_key", "encode_value",
           "decode_key", "decode_value", "NOT_AN_OFFSET", "KEY_VERSION", "VALUE_VERSION", "decode_versioned"]

TOPIC = "__consumer_offsets"  # Kafka's GROUP_METADATA_TOPIC_NAME
FIXED_PARTITIONS = "the number of partitions for the offsets topic cannot be changed"  # Kafka's TopicCommand
KEY_VERSION = 1  # what Kafka writes for an offset commit key (0 is the same layout)
VALUE_VERSION = 3  # the last non-flexible value version: with leader_epoch, without expire_timestamp
NO_LEADER_EPOCH = -1
NO_EXPIRE_TIMESTAMP = -1
_VERSION = struct.Struct(">h")  # the int16 version that opens every key and value

OffsetCommitKey = message("OffsetCommitKey", api_key=-1, versions="0-1", module=__name__, fields=[
    F("group", "string", "0+"),
    F("topic", "string", "0+"),
    F("partition", "int32", "0+"),
])

OffsetCommitValue = message("OffsetCommitValue", api_key=-1, versions="0-4", flexible="4+", module=__name__,
                            fields=[
    F("offset", "int64", "0+"),
    F("leader_epoch", "int32", "3+", default=NO_LEADER_EPOCH),
    F("metadata", "string", "0+"),
    F("commit_timestamp", "int64", "0+"),
    F("expire_timestamp", "int64", "1", default=NO_EXPIRE_TIMESTAMP),
])


@dataclass(frozen=True)
class CommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class CommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH


NOT_AN_OFFSET = None  # decode_key's answer for a record of another type (Rule 2)


def encode_key(key: CommitKey) -> bytes:
    body = OffsetCommitKey(group=key.group, topic=key.topic, partition=key.partition)
    return bytes(OffsetCommitKey.encoder(KEY_VERSION)(body, bytearray(_VERSION.pack(KEY_VERSION)), []))


def encode_value(value: CommitValue) -> bytes:
    body = OffsetCommitValue(offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
                             commit_timestamp=value.commit_timestamp)
    return bytes(OffsetCommitValue.encoder(VALUE_VERSION)(body, bytearray(_VERSION.pack(VALUE_VERSION)), []))


def decode_key(data: bytes) -> CommitKey | None:
    """The offset commit key in `data`, or NOT_AN_OFFSET for another record type; ValueError if malformed."""
    version, body = decode_versioned(OffsetCommitKey, data, accept=range(0, 2))
    if body is None:
        return NOT_AN_OFFSET
    return CommitKey(body.group, body.topic, body.partition)


def decode_value(data: bytes) -> CommitValue:
    """The offset commit value in `data` (any version 0-4); ValueError if malformed or of another version."""
    version, body = decode_versioned(OffsetCommitValue, data, accept=range(0, 5))
    if body is None:
        raise ValueError(f"offset commit value version {version} is not one of 0-4")
    return CommitValue(body.offset, body.metadata, body.commit_timestamp, body.leader_epoch)


def decode_versioned(cls, data: bytes, accept: range):
    """(version, body) of `data`, body None for a version outside `accept`; ValueError when truncated, too
    long or malformed (the generated decoders raise struct.error, IndexError or DecodeError). Shared by
    transaction_log.py, whose records open with the same int16 version."""
    view = memoryview(data)
    if len(view) < _VERSION.size:
        raise ValueError(f"{cls.__name__}: {len(view)} bytes, too short for a version")
    (version,) = _VERSION.unpack_from(view, 0)
    if version not in accept:
        return version, None
    try:
        body, end = cls.decoder(version)(view, _VERSION.size, len(view))
    except (struct.error, IndexError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{cls.__name__} v{version} does not decode: {exc}") from None
    if end != len(view):
        raise ValueError(f"{cls.__name__} v{version}: {len(view) - end} bytes after the last field")
    return version, body
