"""CreateTopics (key 19), versions 0-4, none flexible. Transcribed from Kafka's CreateTopicsRequest.json
and CreateTopicsResponse.json (Kafka 4 dropped v0-1 from its specs; they differ from v2 only by the
fields marked 1+ and 2+ below).

By version: v1 validate_only and error_message; v2 throttle_time_ms. num_partitions and
replication_factor are -1 when ``assignments`` is given (or to take the broker defaults, v4).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["CreateTopicsRequest", "CreateTopicsResponse", "CreatableTopic", "CreatableReplicaAssignment",
           "CreatableTopicConfig", "CreatableTopicResult"]

CreateTopicsRequest = message("CreateTopicsRequest", api_key=ApiKey.CREATE_TOPICS, versions="0-4",
                              module=__name__, fields=[
    F("topics", "[]CreatableTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("num_partitions", "int32", "0+"),
        F("replication_factor", "int16", "0+"),
        F("assignments", "[]CreatableReplicaAssignment", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("broker_ids", "[]int32", "0+"),
        ]),
        F("configs", "[]CreatableTopicConfig", "0+", fields=[
            F("name", "string", "0+"),
            F("value", "string", "0+", nullable="0+"),
        ]),
    ]),
    F("timeout_ms", "int32", "0+", default=60000),
    F("validate_only", "bool", "1+", default=False),
])

CreateTopicsResponse = message("CreateTopicsResponse", api_key=ApiKey.CREATE_TOPICS, versions="0-4",
                               module=__name__, fields=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]CreatableTopicResult", "0+", fields=[
        F("name", "string", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "1+", nullable="0+", default=None),
    ]),
])

CreatableTopic = CreateTopicsRequest.CreatableTopic
CreatableReplicaAssignment = CreatableTopic.CreatableReplicaAssignment
CreatableTopicConfig = CreatableTopic.CreatableTopicConfig
CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult
