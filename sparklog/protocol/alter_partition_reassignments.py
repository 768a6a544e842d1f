"""AlterPartitionReassignments (key 45), versions 0-1, flexible (KIP-455; v1 KIP-860's
allow_replication_factor_change). Transcribed from Kafka's AlterPartitionReassignmentsRequest.json and
AlterPartitionReassignmentsResponse.json.

Each partition's target replicas, or ``replicas`` null to cancel the reassignment in flight for it; the answer
has an error per partition (and a top-level error for what fails the whole request); from v1 it repeats the
request's allow_replication_factor_change.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["AlterPartitionReassignmentsRequest", "AlterPartitionReassignmentsResponse", "ReassignableTopic",
           "ReassignablePartition", "ReassignableTopicResponse", "ReassignablePartitionResponse"]

AlterPartitionReassignmentsRequest = message(
    "AlterPartitionReassignmentsRequest", api_key=ApiKey.ALTER_PARTITION_REASSIGNMENTS, versions="0-1",
    flexible="0+", module=__name__, fields=[
        F("timeout_ms", "int32", "0+", default=60000),
        F("allow_replication_factor_change", "bool", "1+", default=True),
        F("topics", "[]ReassignableTopic", "0+", fields=[
            F("name", "string", "0+"),
            F("partitions", "[]ReassignablePartition", "0+", fields=[
                F("partition_index", "int32", "0+"),
                F("replicas", "[]int32", "0+", nullable="0+", default=None),
            ]),
        ]),
    ])

AlterPartitionReassignmentsResponse = message(
    "AlterPartitionReassignmentsResponse", api_key=ApiKey.ALTER_PARTITION_REASSIGNMENTS, versions="0-1",
    flexible="0+", module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("allow_replication_factor_change", "bool", "1+", default=True),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("responses", "[]ReassignableTopicResponse", "0+", fields=[
            F("name", "string", "0+"),
            F("partitions", "[]ReassignablePartitionResponse", "0+", fields=[
                F("partition_index", "int32", "0+"),
                F("error_code", "int16", "0+"),
                F("error_message", "string", "0+", nullable="0+", default=None),
            ]),
        ]),
    ])

ReassignableTopic = AlterPartitionReassignmentsRequest.ReassignableTopic
ReassignablePartition = ReassignableTopic.ReassignablePartition
ReassignableTopicResponse = AlterPartitionReassignmentsResponse.ReassignableTopicResponse
ReassignablePartitionResponse = ReassignableTopicResponse.ReassignablePartitionResponse
