"""OffsetCommit (key 8), versions 2-9, flexible from 8. Transcribed from Kafka's OffsetCommitRequest.json
and OffsetCommitResponse.json (v10, topics by id, is left out).

By version: v2 retention_time_ms (until v4); v3 throttle_time_ms; v5 drops retention_time_ms;
v6 committed_leader_epoch; v7 group_instance_id; v8 flexible; v9 the same fields, the first version a member
of a KIP-848 consumer group commits with (its member epoch in generation_id_or_member_epoch: a stale one is
STALE_MEMBER_EPOCH).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["OffsetCommitRequest", "OffsetCommitResponse", "OffsetCommitRequestTopic",
           "OffsetCommitRequestPartition", "OffsetCommitResponseTopic", "OffsetCommitResponsePartition"]

OffsetCommitRequest = message("OffsetCommitRequest", api_key=ApiKey.OFFSET_COMMIT, versions="2-9",
                              flexible="8+", module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("generation_id_or_member_epoch", "int32", "1+", default=-1),
    F("member_id", "string", "1+"),
    F("group_instance_id", "string", "7+", nullable="7+", default=None),
    F("retention_time_ms", "int64", "2-4", default=-1),
    F("topics", "[]OffsetCommitRequestTopic", "0+", fields=[
        F("name", "string", "0-9"),
        F("partitions", "[]OffsetCommitRequestPartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("committed_offset", "int64", "0+"),
            F("committed_leader_epoch", "int32", "6+", default=-1),
            F("committed_metadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])

OffsetCommitResponse = message("OffsetCommitResponse", api_key=ApiKey.OFFSET_COMMIT, versions="2-9",
                               flexible="8+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "3+"),
    F("topics", "[]OffsetCommitResponseTopic", "0+", fields=[
        F("name", "string", "0-9"),
        F("partitions", "[]OffsetCommitResponsePartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
        ]),
    ]),
])

OffsetCommitRequestTopic = OffsetCommitRequest.OffsetCommitRequestTopic
OffsetCommitRequestPartition = OffsetCommitRequestTopic.OffsetCommitRequestPartition
OffsetCommitResponseTopic = OffsetCommitResponse.OffsetCommitResponseTopic
OffsetCommitResponsePartition = OffsetCommitResponseTopic.OffsetCommitResponsePartition
