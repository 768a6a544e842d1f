"""OffsetDelete (key 47), version 0, not flexible (KIP-496). Transcribed from Kafka's OffsetDeleteRequest.json
and OffsetDeleteResponse.json.

Deletes a group's committed offsets of the named partitions, answered by the group's coordinator. The
response's top-level ``error_code`` is the group's (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR...);
each partition then has its own (GROUP_SUBSCRIBED_TO_TOPIC while a member of the group consumes its topic,
UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["OffsetDeleteRequest", "OffsetDeleteResponse", "OffsetDeleteRequestTopic",
           "OffsetDeleteRequestPartition", "OffsetDeleteResponseTopic", "OffsetDeleteResponsePartition"]

OffsetDeleteRequest = message("OffsetDeleteRequest", api_key=ApiKey.OFFSET_DELETE, versions="0",
                              module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("topics", "[]OffsetDeleteRequestTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]OffsetDeleteRequestPartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
        ]),
    ]),
])

OffsetDeleteResponse = message("OffsetDeleteResponse", api_key=ApiKey.OFFSET_DELETE, versions="0",
                               module=__name__, fields=[
    F("error_code", "int16", "0+"),
    F("throttle_time_ms", "int32", "0+"),
    F("topics", "[]OffsetDeleteResponseTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]OffsetDeleteResponsePartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
        ]),
    ]),
])

OffsetDeleteRequestTopic = OffsetDeleteRequest.OffsetDeleteRequestTopic
OffsetDeleteRequestPartition = OffsetDeleteRequestTopic.OffsetDeleteRequestPartition
OffsetDeleteResponseTopic = OffsetDeleteResponse.OffsetDeleteResponseTopic
OffsetDeleteResponsePartition = OffsetDeleteResponseTopic.OffsetDeleteResponsePartition
