"""The records of `__transaction_state`: Kafka's own key and value schemas, so Kafka's tools can read the topic.
Transcribed from Kafka's TransactionLogKey.json and TransactionLogValue.json (transaction coordinator).

A record's key and value each start with an int16 version, then the fields of that version:

    key   (version 0)
        transactional_id  string
    value (version 0-1; we write 0, which every Kafka release reads; 1 is flexible, its extra fields tagged)
        producer_id                     int64
        producer_epoch                  int16
        transaction_timeout_ms          int32
        transaction_status              int8    Kafka's TransactionState ids (STATUS_IDS)
        transaction_partitions          []{topic string, partition_ids []int32}, nullable
        transaction_last_update_timestamp_ms  int64
        transaction_start_timestamp_ms  int64   -1 when no transaction is open

Rule 1: the record (key, value) is a transactional id's state after a transition; a tombstone (null value)
removes an expired id. Compaction keeps the last record of each key: the topic's compacted state is the set
of transactional ids and where each one's transaction stands.
Rule 2: bytes that do not decode, or a version outside the ones above, raise `ValueError`.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from sparklog.protocol.consumer_offsets import decode_versioned
from sparklog.protocol.schema import F, message

__all__ = ["TOPIC", "TransactionLogKey", "TransactionLogValue", "TxnLogEntry", "encode_key", "encode_value",
           "decode_key", "decode_value", "KEY_VERSION", "VALUE_VERSION"]

TOPIC = "__transaction_state"  # Kafka's TRANSACTION_STATE_TOPIC_NAME
KEY_VERSION = 0
VALUE_VERSION = 0
_VERSION = struct.Struct(">h")  # the int16 version that opens every key and value

TransactionLogKey = message("TransactionLogKey", api_key=-1, versions="0", module=__name__, fields=[
    F("transactional_id", "string", "0+"),
])

# Version 1's extra fields are tagged: a v1 value decodes here with its tags skipped.
TransactionLogValue = message("TransactionLogValue", api_key=-1, versions="0-1", flexible="1+", module=__name__,
                              fields=[
    F("producer_id", "int64", "0+"),
    F("producer_epoch", "int16", "0+"),
    F("transaction_timeout_ms", "int32", "0+"),
    F("transaction_status", "int8", "0+"),
    F("transaction_partitions", "[]PartitionsSchema", "0+", nullable="0+", fields=[
        F("topic", "string", "0+"),
        F("partition_ids", "[]int32", "0+"),
    ]),
    F("transaction_last_update_timestamp_ms", "int64", "0+"),
    F("transaction_start_timestamp_ms", "int64", "0+"),
])

_Partitions = TransactionLogValue.PartitionsSchema


@dataclass(frozen=True)
class TxnLogEntry:
    """One value, decoded: `partitions` is a sorted tuple of (topic, partition)."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: int
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    body = TransactionLogKey(transactional_id=transactional_id)
    return bytes(TransactionLogKey.encoder(KEY_VERSION)(body, bytearray(_VERSION.pack(KEY_VERSION)), []))


def encode_value(entry: TxnLogEntry) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(entry.partitions):
        by_topic.setdefault(topic, []).append(partition)
    body = TransactionLogValue(
        producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
        transaction_timeout_ms=entry.timeout_ms, transaction_status=entry.status,
        transaction_partitions=[_Partitions(topic=t, partition_ids=ps) for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=entry.last_update_ms, transaction_start_timestamp_ms=entry.start_ms)
    return bytes(TransactionLogValue.encoder(VALUE_VERSION)(body, bytearray(_VERSION.pack(VALUE_VERSION)), []))


def decode_key(data: bytes) -> str:
    """The transactional id in `data`; ValueError if malformed or of another version (Rule 2)."""
    return _decode(TransactionLogKey, data, range(0, 1)).transactional_id


def decode_value(data: bytes) -> TxnLogEntry:
    """The value in `data` (version 0 or 1); ValueError if malformed or of another version (Rule 2)."""
    body = _decode(TransactionLogValue, data, range(0, 2))
    partitions = tuple(sorted((p.topic, i) for p in body.transaction_partitions or () for i in p.partition_ids))
    return TxnLogEntry(body.producer_id, body.producer_epoch, body.transaction_timeout_ms, body.transaction_status,
                       partitions, body.transaction_last_update_timestamp_ms, body.transaction_start_timestamp_ms)


def _decode(cls, data: bytes, accept: range):
    version, body = decode_versioned(cls, data, accept)
    if body is None:
        raise ValueError(f"{cls.__name__} version {version} is not one of {accept.start}-{accept.stop - 1}")
    return body
