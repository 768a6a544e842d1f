"""ListOffsets (key 2), versions 1-5, none flexible. Transcribed from Kafka's ListOffsetsRequest.json and
ListOffsetsResponse.json.

By version: v1 one (timestamp, offset) per partition; v2 isolation_level and throttle_time_ms;
v4 current_leader_epoch (request) and leader_epoch (response). Timestamps -1 and -2 ask for the latest
and earliest offsets; -3 (defined from v7, answered at any version as Kafka does) the record with the largest
timestamp.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ListOffsetsRequest", "ListOffsetsResponse", "ListOffsetsTopic", "ListOffsetsPartition",
           "ListOffsetsTopicResponse", "ListOffsetsPartitionResponse", "LATEST_TIMESTAMP",
           "EARLIEST_TIMESTAMP", "MAX_TIMESTAMP"]

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3  # KIP-734: the offset and time of the record with the largest timestamp

ListOffsetsRequest = message("ListOffsetsRequest", api_key=ApiKey.LIST_OFFSETS, versions="1-5",
                             module=__name__, fields=[
    F("replica_id", "int32", "0+"),
    F("isolation_level", "int8", "2+"),
    F("topics", "[]ListOffsetsTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]ListOffsetsPartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("current_leader_epoch", "int32", "4+", default=-1),
            F("timestamp", "int64", "0+"),
        ]),
    ]),
])

ListOffsetsResponse = message("ListOffsetsResponse", api_key=ApiKey.LIST_OFFSETS, versions="1-5",
                              module=__name__, fields=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]ListOffsetsTopicResponse", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]ListOffsetsPartitionResponse", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
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
