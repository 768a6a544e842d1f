"""ListPartitionReassignments (key 46), version 0, flexible (KIP-455). Transcribed from Kafka's
ListPartitionReassignmentsRequest.json and ListPartitionReassignmentsResponse.json.

The partitions being reassigned now, with their replicas and the replicas being added and removed; a
partition not being reassigned is left out. ``topics`` null asks for every partition.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ListPartitionReassignmentsRequest", "ListPartitionReassignmentsResponse",
           "ListPartitionReassignmentsTopics", "OngoingTopicReassignment", "OngoingPartitionReassignment"]

ListPartitionReassignmentsRequest = message(
    "ListPartitionReassignmentsRequest", api_key=ApiKey.LIST_PARTITION_REASSIGNMENTS, versions="0", flexible="0+",
    module=__name__, fields=[
        F("timeout_ms", "int32", "0+", default=60000),
        F("topics", "[]ListPartitionReassignmentsTopics", "0+", nullable="0+", default=None, fields=[
            F("name", "string", "0+"),
            F("partition_indexes", "[]int32", "0+"),
        ]),
    ])

ListPartitionReassignmentsResponse = message(
    "ListPartitionReassignmentsResponse", api_key=ApiKey.LIST_PARTITION_REASSIGNMENTS, versions="0",
    flexible="0+", module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("topics", "[]OngoingTopicReassignment", "0+", fields=[
            F("name", "string", "0+"),
            F("partitions", "[]OngoingPartitionReassignment", "0+", fields=[
                F("partition_index", "int32", "0+"),
                F("replicas", "[]int32", "0+"),
                F("adding_replicas", "[]int32", "0+"),
                F("removing_replicas", "[]int32", "0+"),
            ]),
        ]),
    ])

ListPartitionReassignmentsTopics = ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics
OngoingTopicReassignment = ListPartitionReassignmentsResponse.OngoingTopicReassignment
OngoingPartitionReassignment = OngoingTopicReassignment.OngoingPartitionReassignment
