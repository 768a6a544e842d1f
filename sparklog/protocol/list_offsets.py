"""ListOffsets (key 2), versions 0-10 decoded (1-6 advertised: registry.py); v6+ flexible. Transcribed from
Kafka's ListOffsetsRequest.json and ListOffsetsResponse.json.

By version: v0 up to max_num_offsets offsets per partition, old_style_offsets, at segment boundaries (Kafka's
legacy answer: storage/legacy_offsets.py); v1 one (timestamp, offset) per partition; v2 isolation_level and throttle_time_ms;
v4 current_leader_epoch (request) and leader_epoch (response); v5 as v4 (the OFFSET_NOT_AVAILABLE error);
v6 flexible; v7 as v6, the first to define MAX_TIMESTAMP (-3, KIP-734); v8 EARLIEST_LOCAL_TIMESTAMP (-4,
KIP-405); v9 LATEST_TIERED_TIMESTAMP (-5, KIP-1005); v10 the request's timeout_ms, how long a broker may wait
for a remote (tiered) lookup (KIP-1075). Timestamps -1 and -2 ask for the latest and earliest offsets.
v11 (-6, the earliest offset pending upload, KIP-1023) is left out.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ListOffsetsRequest", "ListOffsetsResponse", "ListOffsetsTopic", "ListOffsetsPartition",
           "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse", "LATEST_TIMESTAMP",
           "EARLIEST_TIMESTAMP", "MAX_TIMESTAMP",
           "EARLIEST_LOCAL_TIMESTAMP", "LATEST_TIERED_TIMESTAMP", "TIMESTAMP_MIN_VERSION"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734: the offset and time of the record with the largest timestamp
EARLIEST_LOCAL_TIMESTAMP = -4  # KIP-405: the first offset kept on the broker's own disks
LATEST_TIERED_TIMESTAMP = -5  # KIP-1005: the last offset copied to tiered storage

# The first version that defines each special timestamp (Kafka's ReplicaManager.timestampMinSupportedVersion).
TIMESTAMP_MIN_VERSION = {LATEST_TIMESTAMP: 1, EARLIEST_TIMESTAMP: 1, MAX_TIMESTAMP: 7,
                         EARLIEST_LOCAL_TIMESTAMP: 8, LATEST_TIERED_TIMESTAMP: 9}

ListOffsetsRequest = message("ListOffsetsRequest", api_key=ApiKey.LIST_OFFSETS, versions="0-10",
                             flexible="6+", module=__name__, fields=[
    F("replica_id", "int32", "0+"),
    F("isolation_level", "int8", "2+"),
    F("topics", "[]ListOffsetsTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]ListOffsetsPartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("current_leader_epoch", "int32", "4+", default=-1),
            F("timestamp", "int64", "0+"),
            F("max_num_offsets", "int32", "0", default=1),
        ]),
    ]),
    F("timeout_ms", "int32", "10+", default=0),
])

ListOffsetsResponse = message("ListOffsetsResponse", api_key=ApiKey.LIST_OFFSETS, versions="0-10",
                              flexible="6+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]ListOffsetsTopicResponse", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]ListOffsetsPartitionResponse", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("old_style_offsets", "[]int64", "0"),
            F("timestamp", "int64", "1+", default=-1),
            F("offset", "int64", "1+", default=-1),
            F("leader_epoch", "int32", "4+", default=-1),
        ]),
    ]),
])

ListOffsetsTopic = ListOffsetsRequest.ListOffsetsTopic
ListOffsetsPartition = ListOffsetsTopic.ListOffsetsPartition
ListOffsetsTopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse
ListOffsetsPartitionResponse = ListOffsetsTopicResponse.ListOffsetsPartitionResponse
