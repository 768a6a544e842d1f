"""CreateTopics (key 19), versions 0-7, flexible from v5. Transcribed from Kafka's CreateTopicsRequest.json
and CreateTopicsResponse.json (Kafka 4 dropped v0-1 from its specs; they differ from v2 only by the
fields marked 1+ and 2+ below).

By version: v1 validate_only and error_message; v2 throttle_time_ms; v5 flexible, and each result carries the
topic's partition count, replication factor and configs (KIP-525; ``topic_config_error_code`` tagged);
v6 may answer THROTTLING_QUOTA_EXCEEDED; v7 the created topic's id (KIP-516). num_partitions and
replication_factor are -1 when ``assignments`` is given (or to take the broker defaults, v4).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["CreateTopicsRequest", "CreateTopicsResponse", "CreatableTopic", "CreatableReplicaAssignment",
           "CreatableTopicConfig", "CreatableTopicResult", "CreatableTopicConfigs"]

CreateTopicsRequest = message("CreateTopicsRequest", api_key=ApiKey.CREATE_TOPICS, versions="0-7",
                              flexible="5+", module=__name__, fields=[
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

CreateTopicsResponse = message("CreateTopicsResponse", api_key=ApiKey.CREATE_TOPICS, versions="0-7",
                               flexible="5+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "2+"),
    F("topics", "[]CreatableTopicResult", "0+", fields=[
        F("name", "string", "0+"),
        F("topic_id", "uuid", "7+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "1+", nullable="0+", default=None),
        F("topic_config_error_code", "int16", "5+", tag=0, tagged="5+"),
        F("num_partitions", "int32", "5+", default=-1),
        F("replication_factor", "int16", "5+", default=-1),
        F("configs", "[]CreatableTopicConfigs", "5+", nullable="5+", fields=[
            F("name", "string", "5+"),
            F("value", "string", "5+", nullable="5+"),
            F("read_only", "bool", "5+"),
            F("config_source", "int8", "5+", default=-1),
            F("is_sensitive", "bool", "5+"),
        ]),
    ]),
])

CreatableTopic = CreateTopicsRequest.CreatableTopic
CreatableReplicaAssignment = CreatableTopic.CreatableReplicaAssignment
CreatableTopicConfig = CreatableTopic.CreatableTopicConfig
CreatableTopicResult = CreateTopicsResponse.CreatableTopicResult
CreatableTopicConfigs = CreatableTopicResult.CreatableTopicConfigs
