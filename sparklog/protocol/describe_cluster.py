"""DescribeCluster (key 60), versions 0-2; every version flexible. Transcribed from Kafka's
DescribeClusterRequest.json and DescribeClusterResponse.json (KIP-700).

By version: v1 adds endpoint_type (KIP-919; 1 = brokers, 2 = controllers); v2 adds include_fenced_brokers and
each broker's is_fenced (KIP-1073). ``cluster_authorized_operations`` is INT32_MIN when not asked for.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeClusterRequest", "DescribeClusterResponse", "DescribeClusterBroker", "ENDPOINT_BROKERS",
           "AUTHORIZED_OPERATIONS_OMITTED"]

ENDPOINT_BROKERS = 1
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)

DescribeClusterRequest = message("DescribeClusterRequest", api_key=ApiKey.DESCRIBE_CLUSTER, versions="0-2",
                                 flexible="0+", module=__name__, fields=[
    F("include_cluster_authorized_operations", "bool", "0+", default=False),
    F("endpoint_type", "int8", "1+", default=ENDPOINT_BROKERS),
    F("include_fenced_brokers", "bool", "2+", default=False),
])

DescribeClusterResponse = message("DescribeClusterResponse", api_key=ApiKey.DESCRIBE_CLUSTER, versions="0-2",
                                  flexible="0+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
    F("error_message", "string", "0+", nullable="0+", default=None),
    F("endpoint_type", "int8", "1+", default=ENDPOINT_BROKERS),
    F("cluster_id", "string", "0+"),
    F("controller_id", "int32", "0+", default=-1),
    F("brokers", "[]DescribeClusterBroker", "0+", fields=[
        F("broker_id", "int32", "0+"),
        F("host", "string", "0+"),
        F("port", "int32", "0+"),
        F("rack", "string", "0+", nullable="0+", default=None),
        F("is_fenced", "bool", "2+", default=False),
    ]),
    F("cluster_authorized_operations", "int32", "0+", default=AUTHORIZED_OPERATIONS_OMITTED),
])

DescribeClusterBroker = DescribeClusterResponse.DescribeClusterBroker
