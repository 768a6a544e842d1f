"""Produce (key 0), versions 0-11, flexible from v9 (KIP-482). Transcribed from Kafka's ProduceRequest.json and
ProduceResponse.json.

By version: v0-v2 carry legacy message sets (magic 0 and 1, records/legacy.py; the handler up-converts them);
v1 throttle_time_ms; v2 log_append_time_ms; v3 transactional_id (and RecordBatch v2 only); v5
log_start_offset; v8 record_errors and error_message; v9 flexible; v10 the response's current_leader and
node_endpoints tagged fields (KIP-951); v11 the same (the TRANSACTION_ABORTABLE error, KIP-890). ``records`` is passed through untouched: decoded as a
memoryview of the request frame.

The one-partition fast path (the common Produce: one topic, one partition, a record set) is hand-written
beside the declarations, for the broker's hot path:
Rule 1: ``decode_single_partition(frame)`` returns a ``SinglePartitionProduce`` only for a Produce request
of a version in FAST_PATH_VERSIONS (v3-v11) whose body is exactly one topic with one partition and a non-null record set, and
which the general decoder (registry.decode_request) would decode without error to the same values; for
anything else it returns None and the caller uses the general path (which raises or answers as before). In
the flexible versions (v9+) a tagged field in the header, the partition, the topic or the body leaves the
request to the general path, as does a topic or partition count not written in its one byte (2: one element).
Rule 2: ``encode_single_partition_response`` gives the bytes ``registry.encode_response`` gives for a
ProduceResponse of that one partition with error_code 0, no record errors, no error message,
throttle_time_ms 0 and (v10+) no current_leader nor node_endpoints (their defaults, not sent) (the property test in
tests/unit/protocol/test_produce_fast.py holds both rules).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message
from sparklog.protocol.types import read_uvarint, write_uvarint
from sparklog.records import BytesLike

__all__ = ["FAST_PATH_VERSIONS", "SinglePartitionProduce", "decode_single_partition", "encode_single_partition_response",
           "ProduceRequest", "ProduceResponse", "TopicProduceData", "PartitionProduceData",
           "TopicProduceResponse", "PartitionProduceResponse", "BatchIndexAndErrorMessage", "LeaderIdAndEpoch",
           "NodeEndpoint"]

ProduceRequest = message("ProduceRequest", api_key=ApiKey.PRODUCE, versions="0-11", flexible="9+", module=__name__,
                         fields=[
    F("transactional_id", "string", "3+", nullable="3+", default=None),
    F("acks", "int16", "0+"),
    F("timeout_ms", "int32", "0+"),
    F("topic_data", "[]TopicProduceData", "0+", fields=[
        F("name", "string", "0-12"),
        F("partition_data", "[]PartitionProduceData", "0+", fields=[
            F("index", "int32", "0+"),
            F("records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

ProduceResponse = message("ProduceResponse", api_key=ApiKey.PRODUCE, versions="0-11", flexible="9+", module=__name__,
                          fields=[
    F("responses", "[]TopicProduceResponse", "0+", fields=[
        F("name", "string", "0-12"),
        F("partition_responses", "[]PartitionProduceResponse", "0+", fields=[
            F("index", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("base_offset", "int64", "0+"),
            F("log_append_time_ms", "int64", "2+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("record_errors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                F("batch_index", "int32", "8+"),
                F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
            ]),
            F("error_message", "string", "8+", nullable="8+", default=None),
            F("current_leader", "LeaderIdAndEpoch", "10+", tag=0, tagged="10+", fields=[
                F("leader_id", "int32", "10+", default=-1),
                F("leader_epoch", "int32", "10+", default=-1),
            ]),
        ]),
    ]),
    F("throttle_time_ms", "int32", "1+", default=0),
    F("node_endpoints", "[]NodeEndpoint", "10+", tag=0, tagged="10+", fields=[
        F("node_id", "int32", "10+"),
        F("host", "string", "10+"),
        F("port", "int32", "10+"),
        F("rack", "string", "10+", nullable="10+", default=None),
    ]),
])

TopicProduceData = ProduceRequest.TopicProduceData
PartitionProduceData = TopicProduceData.PartitionProduceData
TopicProduceResponse = ProduceResponse.TopicProduceResponse
PartitionProduceResponse = TopicProduceResponse.PartitionProduceResponse
BatchIndexAndErrorMessage = PartitionProduceResponse.BatchIndexAndErrorMessage
LeaderIdAndEpoch = PartitionProduceResponse.LeaderIdAndEpoch
NodeEndpoint = ProduceResponse.NodeEndpoint


# ---- the one-partition fast path (Rules 1 and 2)

_PRODUCE = int(ApiKey.PRODUCE)
_REQUEST_PREFIX = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I16 = struct.Struct(">h")
_ACKS_TIMEOUT_TOPICS = struct.Struct(">hii")  # acks, timeout_ms, topic_data count
_PARTITIONS_INDEX_SIZE = struct.Struct(">iii")  # partition_data count, index, records length
# size, correlation_id, responses count (1), topic name length; the name; then per version the tail:
_RESPONSE_PREFIX = struct.Struct(">iiih")
_RESPONSE_TAIL = {  # partition_responses count (1), index, error_code, base_offset, log_append_time_ms, ...
    3: struct.Struct(">iihqqi"),  # ... throttle_time_ms
    4: struct.Struct(">iihqqi"),
    5: struct.Struct(">iihqqqi"),  # ... log_start_offset, throttle_time_ms
    6: struct.Struct(">iihqqqi"),
    7: struct.Struct(">iihqqqi"),
    8: struct.Struct(">iihqqqihi"),  # ... log_start_offset, record_errors count (0), error_message (null), throttle
}
_NULL_STRING = -1
FIRST_FLEXIBLE_VERSION = 9  # compact strings and arrays, tagged fields (KIP-482)
# Flexible versions, after the compact transactional_id: acks, timeout_ms, topic_data's compact count (2: one),
# the first byte of the name's length (its varint)
_FLEXIBLE_ACKS_TIMEOUT_TOPICS_NAME = struct.Struct(">hiBB")
# after the compact topic name: partition_data's compact count (2: one), index, the first byte of the records' length
_FLEXIBLE_PARTITIONS_INDEX_RECORDS = struct.Struct(">BiB")
_NO_TAGS = 3  # after the records: the partition's, the topic's and the body's tag counts (0 each)
# size, correlation_id, header tags (0), responses' compact count (2); the compact topic name; then the tail
_FLEXIBLE_RESPONSE_HEAD = struct.Struct(">iiBB")
# partition_responses' compact count (2), index, error_code, base_offset, log_append_time_ms, log_start_offset,
# record_errors' compact count (1: none), error_message (0: null), the partition's and the topic's tag counts
# (0: v10+ current_leader at its default), throttle_time_ms, the body's tag count (0: v10+ no node_endpoints)
_FLEXIBLE_RESPONSE_TAIL = struct.Struct(">BihqqqBBBBiB")
_FAST_ERRORS = (struct.error, ValueError, IndexError, OverflowError)  # UnicodeDecodeError is a ValueError
# The versions the fast path reads (Rule 1): v0-v2 (legacy message sets, up-converted) take the general path.
FAST_PATH_VERSIONS = (min(_RESPONSE_TAIL), 11)


class SinglePartitionProduce(NamedTuple):
    """A Produce request of one topic and one partition (Rule 1); ``records`` and ``frame`` are views of the
    frame."""

    api_version: int
    correlation_id: int
    acks: int
    timeout_ms: int
    topic: str
    index: int  # type: ignore[assignment]  # shadows tuple.index: Kafka's name for the partition
    records: memoryview
    frame: memoryview  # the whole request (after the size prefix): the general path's input, its size in flight


def decode_single_partition(frame: BytesLike) -> SinglePartitionProduce | None:
    """The request in ``frame`` (the bytes after the size prefix) if it has the one-partition shape, else None."""
    buf = frame if type(frame) is memoryview else memoryview(frame)
    end = len(buf)
    try:
        api_key, version, correlation_id, n = _REQUEST_PREFIX.unpack_from(buf, 0)
        if api_key != _PRODUCE or not FAST_PATH_VERSIONS[0] <= version <= FAST_PATH_VERSIONS[1]:
            return None
        if version >= FIRST_FLEXIBLE_VERSION:
            return _decode_flexible(buf, version, correlation_id, n)
        pos = _REQUEST_PREFIX.size + max(n, 0)
        if n > 0:
            str(buf[_REQUEST_PREFIX.size:pos], "utf-8")  # the general decoder refuses a client_id that is not UTF-8
        (n,) = _I16.unpack_from(buf, pos)  # transactional_id
        pos += 2
        if n > 0:
            str(buf[pos:pos + n], "utf-8")
            pos += n
        acks, timeout_ms, topics = _ACKS_TIMEOUT_TOPICS.unpack_from(buf, pos)
        (n,) = _I16.unpack_from(buf, pos + _ACKS_TIMEOUT_TOPICS.size)
        pos += _ACKS_TIMEOUT_TOPICS.size + 2
        if topics != 1 or n < 0 or pos + n > end:
            return None
        topic = str(buf[pos:pos + n], "utf-8")
        partitions, index, size = _PARTITIONS_INDEX_SIZE.unpack_from(buf, pos + n)
        pos += n + _PARTITIONS_INDEX_SIZE.size
    except _FAST_ERRORS:
        return None
    if partitions != 1 or size < 0 or pos + size > end:
        return None
    return SinglePartitionProduce(version, correlation_id, acks, timeout_ms, topic, index, buf[pos:pos + size], buf)


def _decode_flexible(buf: memoryview, version: int, correlation_id: int, n: int) -> SinglePartitionProduce | None:
    """decode_single_partition of v9+ (raises what a short or bad frame raises: the caller returns None). A length
    under 128 is its varint's one byte, read as it is (the common case)."""
    end = len(buf)
    pos = _REQUEST_PREFIX.size + max(n, 0)
    if n > 0:
        str(buf[_REQUEST_PREFIX.size:pos], "utf-8")  # cut short, the read of buf[pos] raises
    if buf[pos]:  # the header's tagged fields
        return None
    n, pos = (buf[pos + 1], pos + 2) if buf[pos + 1] < 0x80 else read_uvarint(buf, pos + 1)  # transactional_id
    if n > 1:  # 0: null, 1: ""
        if pos + n - 1 > end:
            return None
        str(buf[pos:pos + n - 1], "utf-8")
        pos += n - 1
    acks, timeout_ms, topics, n = _FLEXIBLE_ACKS_TIMEOUT_TOPICS_NAME.unpack_from(buf, pos)
    pos += _FLEXIBLE_ACKS_TIMEOUT_TOPICS_NAME.size
    if n >= 0x80:
        n, pos = read_uvarint(buf, pos - 1)
    if topics != 2 or n < 1 or pos + n - 1 > end:  # one topic, a name (0: null, refused by the general path)
        return None
    topic = str(buf[pos:pos + n - 1], "utf-8")
    pos += n - 1
    partitions, index, size = _FLEXIBLE_PARTITIONS_INDEX_RECORDS.unpack_from(buf, pos)
    pos += _FLEXIBLE_PARTITIONS_INDEX_RECORDS.size
    if size >= 0x80:
        size, pos = read_uvarint(buf, pos - 1)
    stop = pos + size - 1
    if partitions != 2 or size < 1 or stop + _NO_TAGS > end:  # one partition, its records not null
        return None
    if buf[stop] or buf[stop + 1] or buf[stop + 2]:  # the partition's, the topic's and the body's tag counts
        return None
    return SinglePartitionProduce(version, correlation_id, acks, timeout_ms, topic, index, buf[pos:stop], buf)


def encode_single_partition_response(request: SinglePartitionProduce, base_offset: int, log_append_time_ms: int,
                                     log_start_offset: int) -> bytes:
    """The whole response frame (size prefix included) of a successful append (Rule 2)."""
    version = request.api_version
    name = request.topic.encode()
    if version >= FIRST_FLEXIBLE_VERSION:
        return _flexible_response(request, name, base_offset, log_append_time_ms, log_start_offset)
    tail = _RESPONSE_TAIL[version]
    if version < 5:
        end = tail.pack(1, request.index, 0, base_offset, log_append_time_ms, 0)
    elif version < 8:
        end = tail.pack(1, request.index, 0, base_offset, log_append_time_ms, log_start_offset, 0)
    else:
        end = tail.pack(1, request.index, 0, base_offset, log_append_time_ms, log_start_offset, 0, _NULL_STRING, 0)
    size = _RESPONSE_PREFIX.size - 4 + len(name) + tail.size
    return _RESPONSE_PREFIX.pack(size, request.correlation_id, 1, len(name)) + name + end


def _flexible_response(request: SinglePartitionProduce, name: bytes, base_offset: int, log_append_time_ms: int,
                       log_start_offset: int) -> bytes:
    """encode_single_partition_response of v9+."""
    length = write_uvarint(len(name) + 1)
    size = _FLEXIBLE_RESPONSE_HEAD.size - 4 + len(length) + len(name) + _FLEXIBLE_RESPONSE_TAIL.size
    return (_FLEXIBLE_RESPONSE_HEAD.pack(size, request.correlation_id, 0, 2) + length + name
            + _FLEXIBLE_RESPONSE_TAIL.pack(2, request.index, 0, base_offset, log_append_time_ms, log_start_offset, 1,
                                           0, 0, 0, 0, 0))
