"""Fetch (key 1), versions 4-16, flexible from v12 (KIP-482). Transcribed from Kafka's FetchRequest.json and
FetchResponse.json.

By version: v4 isolation_level, last_stable_offset, aborted_transactions; v5 log_start_offset (both
sides); v7 fetch sessions (session_id, session_epoch, forgotten_topics_data; response error_code and
session_id); v9 current_leader_epoch; v11 rack_id and preferred_read_replica; v12 flexible, last_fetched_epoch
and the response's diverging_epoch (KIP-320), current_leader and snapshot_id tagged fields, the request's tagged
cluster_id; v13 topics (and forgotten topics) by topic_id instead of name (KIP-516); v14 the same (a tiered
storage error); v15 the fetcher's replica_id moves into the tagged replica_state (KIP-903); v16 the response's
node_endpoints tagged field (KIP-951).

``records`` of a response may be bytes, a memoryview, or any object with ``__len__`` that the caller
writes itself (a storage ``FileSlice`` sent with ``os.sendfile``): ``encode_response`` returns it as a
chunk of its own. Decoded, it is a memoryview of the frame.

The one-partition fast path (a consumer's common Fetch: one topic, one partition) is hand-written beside the
declarations, for the broker's hot path, as produce.py's is:
Rule 1: ``decode_single_partition(frame)`` returns a ``SinglePartitionFetch`` only for a Fetch request of a
version served here whose body is exactly one topic with one partition and no forgotten topics, outside any
fetch session (session_id 0, session_epoch 0 or -1: a full fetch, answered session_id 0), and which the general
decoder (registry.decode_request) would decode without error to the same values (v13+: ``topic`` "" and
``topic_id`` the topic's id; v15+: ``replica_id`` the replica_state's, -1 without one); for anything
else it returns None and the caller uses the general path. In flexible versions (v12+) a tagged field in the
header, the topic or the partition leaves the request to the general path.
Rule 2: ``encode_single_partition_head(...)`` gives the bytes ``registry.encode_response`` gives for a
FetchResponse of that one partition, error_code 0, up to its records, which follow as they are (a FileSlice
sent with ``os.sendfile``), then ``single_partition_end(version)`` (v12+: the tag counts after the records). The property test in tests/unit/protocol/test_fetch_fast.py holds both rules.
"""

from __future__ import annotations

import struct
import uuid
from typing import NamedTuple

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message
from sparklog.protocol.types import read_uvarint, write_uvarint
from sparklog.records import BytesLike

__all__ = ["SinglePartitionFetch", "decode_single_partition", "encode_single_partition_head", "single_partition_end",
           "FetchRequest", "FetchResponse", "FetchTopic", "FetchPartition", "ForgottenTopic",
           "FetchableTopicResponse", "PartitionData", "AbortedTransaction", "ReplicaState", "EpochEndOffset",
           "LeaderIdAndEpoch", "NodeEndpoint", "FIRST_FLEXIBLE_VERSION", "FIRST_TOPIC_ID_VERSION",
           "FIRST_REPLICA_STATE_VERSION"]

FetchRequest = message("FetchRequest", api_key=ApiKey.FETCH, versions="4-16", flexible="12+", module=__name__,
                       fields=[
    F("cluster_id", "string", "12+", nullable="12+", default=None, tag=0, tagged="12+"),
    F("replica_id", "int32", "0-14", default=-1),
    F("replica_state", "ReplicaState", "15+", tag=1, tagged="15+", fields=[
        F("replica_id", "int32", "15+", default=-1),
        F("replica_epoch", "int64", "15+", default=-1),
    ]),
    F("max_wait_ms", "int32", "0+"),
    F("min_bytes", "int32", "0+"),
    F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    F("isolation_level", "int8", "4+", default=0),
    F("session_id", "int32", "7+", default=0),
    F("session_epoch", "int32", "7+", default=-1),
    F("topics", "[]FetchTopic", "0+", fields=[
        F("topic", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", "[]FetchPartition", "0+", fields=[
            F("partition", "int32", "0+"),
            F("current_leader_epoch", "int32", "9+", default=-1),
            F("fetch_offset", "int64", "0+"),
            F("last_fetched_epoch", "int32", "12+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("partition_max_bytes", "int32", "0+"),
        ]),
    ]),
    F("forgotten_topics_data", "[]ForgottenTopic", "7+", fields=[
        F("topic", "string", "7-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", "[]int32", "7+"),
    ]),
    F("rack_id", "string", "11+", default=""),
])

FetchResponse = message("FetchResponse", api_key=ApiKey.FETCH, versions="4-16", flexible="12+", module=__name__,
                        fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "7+"),
    F("session_id", "int32", "7+", default=0),
    F("responses", "[]FetchableTopicResponse", "0+", fields=[
        F("topic", "string", "0-12"),
        F("topic_id", "uuid", "13+"),
        F("partitions", "[]PartitionData", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("high_watermark", "int64", "0+", default=-1),
            F("last_stable_offset", "int64", "4+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("diverging_epoch", "EpochEndOffset", "12+", tag=0, tagged="12+", fields=[
                F("epoch", "int32", "12+", default=-1),
                F("end_offset", "int64", "12+", default=-1),
            ]),
            F("current_leader", "LeaderIdAndEpoch", "12+", tag=1, tagged="12+", fields=[
                F("leader_id", "int32", "12+", default=-1),
                F("leader_epoch", "int32", "12+", default=-1),
            ]),
            F("snapshot_id", "SnapshotId", "12+", tag=2, tagged="12+", fields=[
                F("end_offset", "int64", "12+", default=-1),
                F("epoch", "int32", "12+", default=-1),
            ]),
            F("aborted_transactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                F("producer_id", "int64", "4+"),
                F("first_offset", "int64", "4+"),
            ]),
            F("preferred_read_replica", "int32", "11+", default=-1),
            F("records", "records", "0+", nullable="0+", default=b""),  # an error partition's: empty, not null
        ]),
    ]),
    F("node_endpoints", "[]NodeEndpoint", "16+", tag=0, tagged="16+", fields=[
        F("node_id", "int32", "16+"),
        F("host", "string", "16+"),
        F("port", "int32", "16+"),
        F("rack", "string", "16+", nullable="16+", default=None),
    ]),
])

FetchTopic = FetchRequest.FetchTopic
FetchPartition = FetchTopic.FetchPartition
ForgottenTopic = FetchRequest.ForgottenTopic
FetchableTopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = FetchableTopicResponse.PartitionData
AbortedTransaction = PartitionData.AbortedTransaction
ReplicaState = FetchRequest.ReplicaState
EpochEndOffset = PartitionData.EpochEndOffset
LeaderIdAndEpoch = PartitionData.LeaderIdAndEpoch
NodeEndpoint = FetchResponse.NodeEndpoint


# ---- the one-partition fast path (Rules 1 and 2)

_FETCH = int(ApiKey.FETCH)
_REQUEST_PREFIX = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_I16 = struct.Struct(">h")
# From after the client_id to the topic name: replica_id, max_wait_ms, min_bytes, max_bytes, isolation_level
# (v4+ always here), v7+ session_id and session_epoch, then topics count (1) and the topic name's length.
_HEAD = {4: struct.Struct(">iiiibih"), 7: struct.Struct(">iiiibiiih")}
# After the topic name: partitions count (1), partition, current_leader_epoch (v9+), fetch_offset,
# log_start_offset (v5+), partition_max_bytes, then v7+ the forgotten topics count (0); rack_id follows (v11).
_PARTITION = {4: struct.Struct(">iiqi"), 5: struct.Struct(">iiqqi"), 7: struct.Struct(">iiqqii"),
              9: struct.Struct(">iiiqqii")}
# (head, partition) shapes by version: one unpack each
_SHAPES = {v: (_HEAD[7 if v >= 7 else 4], _PARTITION[9 if v >= 9 else 7 if v >= 7 else 5 if v >= 5 else 4])
           for v in range(4, 12)}
# size, correlation_id, throttle_time_ms; v7+: error_code, session_id; then responses count (1), topic length
_RESPONSE_HEAD = {4: struct.Struct(">iiiih"), 7: struct.Struct(">iiihiih")}
# partitions count (1), partition_index, error_code, high_watermark, last_stable_offset, (v5+ log_start_offset),
# aborted_transactions (null), (v11 preferred_read_replica), records length
_RESPONSE_TAIL = {4: struct.Struct(">iihqqii"), 5: struct.Struct(">iihqqqii"), 11: struct.Struct(">iihqqqiii")}
_NULL_ARRAY = -1
_NO_REPLICA = -1
FIRST_FLEXIBLE_VERSION = 12  # compact strings and arrays, tagged fields (KIP-482)
FIRST_TOPIC_ID_VERSION = 13  # topics named by id (KIP-516)
FIRST_REPLICA_STATE_VERSION = 15  # the fetcher's replica id in the tagged ReplicaState (KIP-903)
# Flexible versions, after the header's tags: (v12-14 replica_id), max_wait_ms, min_bytes, max_bytes,
# isolation_level, session_id, session_epoch, then the topics' compact count (one byte, 2: one topic)
_FLEXIBLE_HEAD = {12: struct.Struct(">iiiibiiB"), 15: struct.Struct(">iiibiiB")}
# After the topic (compact name, or uuid v13+): partitions count (2), partition, current_leader_epoch,
# fetch_offset, last_fetched_epoch, log_start_offset, partition_max_bytes, the partition's and the topic's tag
# counts (0), the forgotten topics' compact count (1: none); rack_id and the body's tags follow
_FLEXIBLE_PARTITION = struct.Struct(">BiiqiqiBBB")
# size, correlation_id, header tags (0), throttle_time_ms, error_code, session_id, responses count (2)
_FLEXIBLE_RESPONSE_HEAD = struct.Struct(">iiBihiB")
# partitions count (2), partition_index, error_code, high_watermark, last_stable_offset, log_start_offset,
# aborted_transactions (0: null), preferred_read_replica; the records' compact length follows
_FLEXIBLE_RESPONSE_PARTITION = struct.Struct(">Bihqqqbi")
# after the records: the partition's, the topic's and the body's tag counts (none)
_FLEXIBLE_RESPONSE_END = b"\x00\x00\x00"
_FAST_ERRORS = (struct.error, ValueError, IndexError, OverflowError)  # UnicodeDecodeError is a ValueError


class SinglePartitionFetch(NamedTuple):
    """A Fetch request of one topic and one partition (Rule 1)."""

    api_version: int
    correlation_id: int
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    partition_max_bytes: int
    isolation_level: int  # 1: read_committed, served here only when nothing is unstable (handlers)
    topic_id: uuid.UUID | None = None  # v13+: the topic asked by id (`topic` is then "")
    last_fetched_epoch: int = -1  # v12+: the epoch of the last record fetched (KIP-320), -1 if none


def decode_single_partition(frame: BytesLike) -> SinglePartitionFetch | None:
    """The request in ``frame`` (the bytes after the size prefix) if it has the one-partition shape, else None."""
    buf = frame if type(frame) is memoryview else memoryview(frame)
    end = len(buf)
    try:
        api_key, version, correlation_id, n = _REQUEST_PREFIX.unpack_from(buf, 0)
        if api_key != _FETCH or not 4 <= version <= 16:
            return None
        if version >= FIRST_FLEXIBLE_VERSION:
            return _decode_flexible(buf, version, correlation_id, n)
        pos = _REQUEST_PREFIX.size + max(n, 0)
        if n > 0:
            if pos > end:
                return None
            str(buf[_REQUEST_PREFIX.size:pos], "utf-8")  # the general decoder refuses a client_id that is not UTF-8
        head, partition_shape = _SHAPES[version]
        fields = head.unpack_from(buf, pos)
        pos += head.size
        topics, n = fields[-2], fields[-1]
        if version >= 7 and (fields[5] != 0 or fields[6] not in (0, -1)):  # in a session: the general path
            return None
        if topics != 1 or n < 0 or pos + n > end:
            return None
        topic = str(buf[pos:pos + n], "utf-8")
        pos += n
        parts = partition_shape.unpack_from(buf, pos)
        pos += partition_shape.size
        if parts[0] != 1:
            return None
        if version >= 7 and parts[-1] != 0:  # forgotten topics: left to the general path
            return None
        if version >= 9:
            leader_epoch, fetch_offset, partition_max_bytes = parts[2], parts[3], parts[5]
        else:
            leader_epoch, fetch_offset, partition_max_bytes = -1, parts[2], parts[-2 if version >= 7 else -1]
        if version >= 11:
            (n,) = _I16.unpack_from(buf, pos)
            pos += 2
            if n < 0 or pos + n > end:
                return None
            str(buf[pos:pos + n], "utf-8")
    except _FAST_ERRORS:
        return None
    return SinglePartitionFetch(version, correlation_id, fields[0], fields[1], fields[2], fields[3], topic,
                                parts[1], leader_epoch, fetch_offset, partition_max_bytes, fields[4])


def _decode_flexible(buf: memoryview, version: int, correlation_id: int, n: int) -> SinglePartitionFetch | None:
    """decode_single_partition of v12+ (raises what a short or bad frame raises: the caller returns None). Tags
    in the header, a partition or a topic leave the request to the general path; the body's own (cluster_id,
    v15+ replica_state) are read by the general body decoder, which then decides."""
    end = len(buf)
    pos = _REQUEST_PREFIX.size + max(n, 0)
    if pos > end:
        return None
    str(buf[_REQUEST_PREFIX.size:pos], "utf-8")
    if buf[pos] != 0:
        return None
    start = pos = pos + 1
    head = _FLEXIBLE_HEAD[15 if version >= FIRST_REPLICA_STATE_VERSION else 12]
    fields = head.unpack_from(buf, pos)
    pos += head.size
    if fields[-1] != 2 or fields[-3] != 0 or fields[-2] not in (0, -1):  # one topic, outside any session
        return None
    topic, topic_id = "", None
    if version >= FIRST_TOPIC_ID_VERSION:
        if pos + 16 > end:
            return None
        topic_id = uuid.UUID(bytes=bytes(buf[pos:pos + 16]))
        pos += 16
    else:
        n, pos = read_uvarint(buf, pos)
        if n < 1 or pos + n - 1 > end:
            return None
        topic = str(buf[pos:pos + n - 1], "utf-8")
        pos += n - 1
    parts = _FLEXIBLE_PARTITION.unpack_from(buf, pos)
    pos += _FLEXIBLE_PARTITION.size
    if parts[0] != 2 or parts[-3] != 0 or parts[-2] != 0 or parts[-1] != 1:
        return None
    n, pos = read_uvarint(buf, pos)  # rack_id
    if n < 1 or pos + n - 1 > end:
        return None
    str(buf[pos:pos + n - 1], "utf-8")
    replica_id = fields[0] if version < FIRST_REPLICA_STATE_VERSION else _NO_REPLICA
    if buf[pos + n - 1] != 0:  # the body's tagged fields
        body, _ = FetchRequest.decoder(version)(buf, start, end)
        if body.replica_state is not None:
            replica_id = body.replica_state.replica_id
    max_wait_ms, min_bytes, max_bytes, isolation_level = fields[-7:-3]
    return SinglePartitionFetch(version, correlation_id, replica_id, max_wait_ms, min_bytes, max_bytes, topic,
                                parts[1], parts[2], parts[3], parts[6], isolation_level, topic_id, parts[4])


def encode_single_partition_head(request: SinglePartitionFetch, high_watermark: int, log_start_offset: int,
                                 records_length: int) -> bytes:
    """Everything of the response frame (size prefix included) up to the records, which the caller writes
    after it (``records_length`` bytes): the bytes ``registry.encode_response`` gives for a FetchResponse of
    that one partition with no error, throttle 0, session 0, last_stable_offset = high_watermark, no aborted
    transactions and no preferred read replica (Rule 2)."""
    version = request.api_version
    if version >= FIRST_FLEXIBLE_VERSION:
        return _flexible_head(request, high_watermark, log_start_offset, records_length)
    name = request.topic.encode()
    head = _RESPONSE_HEAD[7 if version >= 7 else 4]
    if version >= 11:
        tail = _RESPONSE_TAIL[11].pack(1, request.partition, 0, high_watermark, high_watermark, log_start_offset,
                                       _NULL_ARRAY, _NO_REPLICA, records_length)
    elif version >= 5:
        tail = _RESPONSE_TAIL[5].pack(1, request.partition, 0, high_watermark, high_watermark, log_start_offset,
                                      _NULL_ARRAY, records_length)
    else:
        tail = _RESPONSE_TAIL[4].pack(1, request.partition, 0, high_watermark, high_watermark, _NULL_ARRAY,
                                      records_length)
    size = head.size - 4 + len(name) + len(tail) + records_length
    if version >= 7:
        start = head.pack(size, request.correlation_id, 0, 0, 0, 1, len(name))
    else:
        start = head.pack(size, request.correlation_id, 0, 1, len(name))
    return start + name + tail


def single_partition_end(version: int) -> bytes:
    """What follows the records in encode_single_partition_head's frame (Rule 2): v12+, the tag counts of the
    partition, the topic and the body."""
    return _FLEXIBLE_RESPONSE_END if version >= FIRST_FLEXIBLE_VERSION else b""


def _flexible_head(request: SinglePartitionFetch, high_watermark: int, log_start_offset: int,
                   records_length: int) -> bytes:
    if request.api_version >= FIRST_TOPIC_ID_VERSION:
        assert request.topic_id is not None  # decoded with the v13+ request
        topic = request.topic_id.bytes
    else:
        name = request.topic.encode()
        topic = write_uvarint(len(name) + 1) + name
    partition = _FLEXIBLE_RESPONSE_PARTITION.pack(2, request.partition, 0, high_watermark, high_watermark,
                                                  log_start_offset, 0, _NO_REPLICA) + write_uvarint(records_length + 1)
    size = (_FLEXIBLE_RESPONSE_HEAD.size - 4 + len(topic) + len(partition) + records_length
            + len(_FLEXIBLE_RESPONSE_END))
    return _FLEXIBLE_RESPONSE_HEAD.pack(size, request.correlation_id, 0, 0, 0, 0, 2) + topic + partition
