"""ElectLeaders (key 43), versions 0-2; v2 flexible. Transcribed from Kafka's ElectLeadersRequest.json and
ElectLeadersResponse.json (KIP-183, KIP-460).

By version: v1 the request's election_type (0 preferred, 1 unclean) and the response's top-level error_code;
v2 flexible. ``topic_partitions`` null asks for every partition.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ElectLeadersRequest", "ElectLeadersResponse", "ElectLeadersTopicPartitions", "ReplicaElectionResult",
           "ElectLeadersPartitionResult", "ELECTION_PREFERRED", "ELECTION_UNCLEAN"]

ELECTION_PREFERRED = 0  # Kafka's ElectionType.PREFERRED
ELECTION_UNCLEAN = 1

ElectLeadersRequest = message("ElectLeadersRequest", api_key=ApiKey.ELECT_LEADERS, versions="0-2", flexible="2+",
                              module=__name__, fields=[
    F("election_type", "int8", "1+", default=ELECTION_PREFERRED),
    F("topic_partitions", "[]TopicPartitions", "0+", nullable="0+", default=None, fields=[
        F("topic", "string", "0+"),
        F("partitions", "[]int32", "0+"),
    ]),
    F("timeout_ms", "int32", "0+", default=60000),
])

ElectLeadersResponse = message("ElectLeadersResponse", api_key=ApiKey.ELECT_LEADERS, versions="0-2",
                               flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "1+", default=0),
    F("replica_election_results", "[]ReplicaElectionResult", "0+", fields=[
        F("topic", "string", "0+"),
        F("partition_result", "[]PartitionResult", "0+", fields=[
            F("partition_id", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
])

ElectLeadersTopicPartitions = ElectLeadersRequest.TopicPartitions
ReplicaElectionResult = ElectLeadersResponse.ReplicaElectionResult
ElectLeadersPartitionResult = ReplicaElectionResult.PartitionResult
