"""DescribeTopicPartitions (key 75), version 0, flexible (KIP-966). Transcribed from Kafka's
DescribeTopicPartitionsRequest.json and DescribeTopicPartitionsResponse.json.

A request names topics (none: every topic), the most partitions one response may carry
(response_partition_limit) and an optional cursor, the topic and partition index to start at; the response's
next_cursor (Kafka's NextTopicPartition) is the cursor of the next page, null when nothing is left. Both cursors
are nullable single structs. The eligible-leader-replica fields (KIP-966's ELR) are nullable arrays.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeTopicPartitionsRequest", "DescribeTopicPartitionsResponse", "TopicRequest", "RequestCursor",
           "ResponseTopic", "ResponsePartition", "ResponseCursor", "DEFAULT_PARTITION_LIMIT", "NO_AUTHORIZED_OPERATIONS"]

DEFAULT_PARTITION_LIMIT = 2000  # the request's ResponsePartitionLimit default
NO_AUTHORIZED_OPERATIONS = -2147483648  # TopicAuthorizedOperations: not asked for


def _cursor(version: str) -> list[F]:
    return [F("topic_name", "string", version), F("partition_index", "int32", version)]


DescribeTopicPartitionsRequest = message(
    "DescribeTopicPartitionsRequest", api_key=ApiKey.DESCRIBE_TOPIC_PARTITIONS, versions="0", flexible="0+",
    module=__name__, fields=[
        F("topics", "[]TopicRequest", "0+", fields=[
            F("name", "string", "0+"),
        ]),
        F("response_partition_limit", "int32", "0+", default=DEFAULT_PARTITION_LIMIT),
        F("cursor", "Cursor", "0+", nullable="0+", default=None, fields=_cursor("0+")),
    ])

DescribeTopicPartitionsResponse = message(
    "DescribeTopicPartitionsResponse", api_key=ApiKey.DESCRIBE_TOPIC_PARTITIONS, versions="0", flexible="0+",
    module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("topics", "[]DescribeTopicPartitionsResponseTopic", "0+", fields=[
            F("error_code", "int16", "0+"),
            F("name", "string", "0+", nullable="0+"),
            F("topic_id", "uuid", "0+"),
            F("is_internal", "bool", "0+", default=False),
            F("partitions", "[]DescribeTopicPartitionsResponsePartition", "0+", fields=[
                F("error_code", "int16", "0+"),
                F("partition_index", "int32", "0+"),
                F("leader_id", "int32", "0+"),
                F("leader_epoch", "int32", "0+", default=-1),
                F("replica_nodes", "[]int32", "0+"),
                F("isr_nodes", "[]int32", "0+"),
                F("eligible_leader_replicas", "[]int32", "0+", nullable="0+", default=None),
                F("last_known_elr", "[]int32", "0+", nullable="0+", default=None),
                F("offline_replicas", "[]int32", "0+"),
            ]),
            F("topic_authorized_operations", "int32", "0+", default=NO_AUTHORIZED_OPERATIONS),
        ]),
        F("next_cursor", "Cursor", "0+", nullable="0+", default=None, fields=_cursor("0+")),
    ])

TopicRequest = DescribeTopicPartitionsRequest.TopicRequest
RequestCursor = DescribeTopicPartitionsRequest.Cursor
ResponseTopic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
ResponsePartition = ResponseTopic.DescribeTopicPartitionsResponsePartition
ResponseCursor = DescribeTopicPartitionsResponse.Cursor
