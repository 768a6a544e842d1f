"""OffsetFetch (key 9), versions 1-9, flexible from 6. Transcribed from Kafka's OffsetFetchRequest.json and
OffsetFetchResponse.json (v10, topics by id, is left out).

By version: v2 nullable topics (null = all the group's committed partitions) and a top-level
error_code; v3 throttle_time_ms; v5 committed_leader_epoch; v6 flexible; v7 require_stable (KIP-447: a
partition with transactional offsets still pending is answered UNSTABLE_OFFSET_COMMIT, retriable); v8 batches
groups (KIP-709: `groups`, each with its topics, null for all, and answered with its own error_code; the
top-level topics and error_code go); v9 each group's member_id and member_epoch (KIP-848: a consumer group's
member is checked as an OffsetCommit is, UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH for the group).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["GROUPS_VERSION", "OffsetFetchRequest", "OffsetFetchResponse", "OffsetFetchRequestTopic",
           "OffsetFetchResponseTopic", "OffsetFetchResponsePartition", "OffsetFetchRequestGroup", "OffsetFetchRequestTopics",
           "OffsetFetchResponseGroup", "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"]

GROUPS_VERSION = 8  # the first version of the batched form (groups)

OffsetFetchRequest = message("OffsetFetchRequest", api_key=ApiKey.OFFSET_FETCH, versions="1-9",
                             flexible="6+", module=__name__, fields=[
    F("group_id", "string", "0-7"),
    F("topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
        F("name", "string", "0-7"),
        F("partition_indexes", "[]int32", "0-7"),
    ]),
    F("groups", "[]OffsetFetchRequestGroup", "8+", fields=[
        F("group_id", "string", "8+"),
        F("member_id", "string", "9+", nullable="9+", default=None),
        F("member_epoch", "int32", "9+", default=-1),
        F("topics", "[]OffsetFetchRequestTopics", "8+", nullable="8+", fields=[
            F("name", "string", "8+"),
            F("partition_indexes", "[]int32", "8+"),
        ]),
    ]),
    F("require_stable", "bool", "7+", default=False),
])

OffsetFetchResponse = message("OffsetFetchResponse", api_key=ApiKey.OFFSET_FETCH, versions="1-9",
                              flexible="6+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "3+"),
    F("topics", "[]OffsetFetchResponseTopic", "0-7", fields=[
        F("name", "string", "0-7"),
        F("partitions", "[]OffsetFetchResponsePartition", "0-7", fields=[
            F("partition_index", "int32", "0-7"),
            F("committed_offset", "int64", "0-7"),
            F("committed_leader_epoch", "int32", "5-7", default=-1),
            F("metadata", "string", "0-7", nullable="0-7"),
            F("error_code", "int16", "0-7"),
        ]),
    ]),
    F("error_code", "int16", "2-7", default=0),
    F("groups", "[]OffsetFetchResponseGroup", "8+", fields=[
        F("group_id", "string", "8+"),
        F("topics", "[]OffsetFetchResponseTopics", "8+", fields=[
            F("name", "string", "8+"),
            F("partitions", "[]OffsetFetchResponsePartitions", "8+", fields=[
                F("partition_index", "int32", "8+"),
                F("committed_offset", "int64", "8+"),
                F("committed_leader_epoch", "int32", "8+", default=-1),
                F("metadata", "string", "8+", nullable="8+"),
                F("error_code", "int16", "8+"),
            ]),
        ]),
        F("error_code", "int16", "8+", default=0),
    ]),
])

OffsetFetchRequestTopic = OffsetFetchRequest.OffsetFetchRequestTopic
OffsetFetchResponseTopic = OffsetFetchResponse.OffsetFetchResponseTopic
OffsetFetchResponsePartition = OffsetFetchResponseTopic.OffsetFetchResponsePartition
OffsetFetchRequestGroup = OffsetFetchRequest.OffsetFetchRequestGroup
OffsetFetchRequestTopics = OffsetFetchRequestGroup.OffsetFetchRequestTopics
OffsetFetchResponseGroup = OffsetFetchResponse.OffsetFetchResponseGroup
OffsetFetchResponseTopics = OffsetFetchResponseGroup.OffsetFetchResponseTopics
OffsetFetchResponsePartitions = OffsetFetchResponseTopics.OffsetFetchResponsePartitions
