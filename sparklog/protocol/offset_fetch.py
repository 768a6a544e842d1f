"""OffsetFetch (key 9), versions 1-7, flexible from 6. Transcribed from Kafka's OffsetFetchRequest.json and
OffsetFetchResponse.json (the v8+ multi-group form is left out).

By version: v2 nullable topics (null = all the group's committed partitions) and a top-level
error_code; v3 throttle_time_ms; v5 committed_leader_epoch; v6 flexible; v7 require_stable (KIP-447: a
partition with transactional offsets still pending is answered UNSTABLE_OFFSET_COMMIT, retriable).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["OffsetFetchRequest", "OffsetFetchResponse", "OffsetFetchRequestTopic",
           "OffsetFetchResponseTopic", "OffsetFetchResponsePartition"]

OffsetFetchRequest = message("OffsetFetchRequest", api_key=ApiKey.OFFSET_FETCH, versions="1-7",
                             flexible="6+", module=__name__, fields=[
    F("group_id", "string", "0-7"),
    F("topics", "[]OffsetFetchRequestTopic", "0-7", nullable="2-7", fields=[
        F("name", "string", "0-7"),
        F("partition_indexes", "[]int32", "0-7"),
    ]),
    F("require_stable", "bool", "7+", default=False),
])

OffsetFetchResponse = message("OffsetFetchResponse", api_key=ApiKey.OFFSET_FETCH, versions="1-7",
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
])

OffsetFetchRequestTopic = OffsetFetchRequest.OffsetFetchRequestTopic
OffsetFetchResponseTopic = OffsetFetchResponse.OffsetFetchResponseTopic
OffsetFetchResponsePartition = OffsetFetchResponseTopic.OffsetFetchResponsePartition
