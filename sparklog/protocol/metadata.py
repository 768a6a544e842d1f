"""Metadata (key 3), versions 0-12, flexible from v9 (KIP-482). Transcribed from Kafka's MetadataRequest.json
and MetadataResponse.json.

By version: v0 topics not nullable, and an empty array means every topic (a client that sends no
ApiVersions asks this way); v1 controller_id, is_internal, rack, nullable topics (null = all topics, empty =
none); v2 cluster_id; v3 throttle_time_ms; v4 allow_auto_topic_creation; v5 offline_replicas; v7 leader_epoch;
v8 include_*_authorized_operations and the authorized operations bitfields; v9 flexible; v10 topic ids
(KIP-516: a requested topic by id, with a null name, and each answered topic's id); v11 drops the cluster
authorized operations (DescribeCluster answers them); v12 a topic asked by an unknown id is answered with a
null name.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["MetadataRequest", "MetadataResponse", "MetadataRequestTopic", "MetadataResponseBroker",
           "MetadataResponseTopic", "MetadataResponsePartition", "AUTHORIZED_OPERATIONS_OMITTED"]

# "authorized operations not requested" (Integer.MIN_VALUE in Kafka)
AUTHORIZED_OPERATIONS_OMITTED = -2147483648

MetadataRequest = message("MetadataRequest", api_key=ApiKey.METADATA, versions="0-12", flexible="9+",
                          module=__name__, fields=[
    F("topics", "[]MetadataRequestTopic", "0+", nullable="1+", fields=[
        F("topic_id", "uuid", "10+"),
        F("name", "string", "0+", nullable="10+"),
    ]),
    F("allow_auto_topic_creation", "bool", "4+", default=True),
    F("include_cluster_authorized_operations", "bool", "8-10"),
    F("include_topic_authorized_operations", "bool", "8+"),
])

MetadataResponse = message("MetadataResponse", api_key=ApiKey.METADATA, versions="0-12", flexible="9+",
                           module=__name__, fields=[
    F("throttle_time_ms", "int32", "3+"),
    F("brokers", "[]MetadataResponseBroker", "0+", fields=[
        F("node_id", "int32", "0+"),
        F("host", "string", "0+"),
        F("port", "int32", "0+"),
        F("rack", "string", "1+", nullable="1+", default=None),
    ]),
    F("cluster_id", "string", "2+", nullable="2+", default=None),
    F("controller_id", "int32", "1+", default=-1),
    F("topics", "[]MetadataResponseTopic", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("name", "string", "0+", nullable="12+"),
        F("topic_id", "uuid", "10+"),
        F("is_internal", "bool", "1+", default=False),
        F("partitions", "[]MetadataResponsePartition", "0+", fields=[
            F("error_code", "int16", "0+"),
            F("partition_index", "int32", "0+"),
            F("leader_id", "int32", "0+"),
            F("leader_epoch", "int32", "7+", default=-1),
            F("replica_nodes", "[]int32", "0+"),
            F("isr_nodes", "[]int32", "0+"),
            F("offline_replicas", "[]int32", "5+"),
        ]),
        F("topic_authorized_operations", "int32", "8+", default=AUTHORIZED_OPERATIONS_OMITTED),
    ]),
    F("cluster_authorized_operations", "int32", "8-10", default=AUTHORIZED_OPERATIONS_OMITTED),
])

MetadataRequestTopic = MetadataRequest.MetadataRequestTopic
MetadataResponseBroker = MetadataResponse.MetadataResponseBroker
MetadataResponseTopic = MetadataResponse.MetadataResponseTopic
MetadataResponsePartition = MetadataResponseTopic.MetadataResponsePartition
