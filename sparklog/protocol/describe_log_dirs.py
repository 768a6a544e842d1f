"""DescribeLogDirs (key 35), versions 0-4; v2+ flexible. Transcribed from Kafka's DescribeLogDirsRequest.json
and DescribeLogDirsResponse.json (KIP-113).

One broker's log directories and the partitions in each: size on disk and offset lag. ``topics`` null asks
for every partition. By version: v1 as v0; v2 flexible; v3 the response's top-level error_code; v4 each
directory's total_bytes and usable_bytes (KIP-827; -1 when unknown).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeLogDirsRequest", "DescribeLogDirsResponse", "DescribableLogDirTopic", "DescribeLogDirsResult",
           "DescribeLogDirsTopic", "DescribeLogDirsPartition"]

DescribeLogDirsRequest = message("DescribeLogDirsRequest", api_key=ApiKey.DESCRIBE_LOG_DIRS, versions="0-4",
                                 flexible="2+", module=__name__, fields=[
    F("topics", "[]DescribableLogDirTopic", "0+", nullable="0+", default=None, fields=[
        F("topic", "string", "0+"),
        F("partitions", "[]int32", "0+"),
    ]),
])

DescribeLogDirsResponse = message("DescribeLogDirsResponse", api_key=ApiKey.DESCRIBE_LOG_DIRS, versions="0-4",
                                  flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "3+", default=0),
    F("results", "[]DescribeLogDirsResult", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("log_dir", "string", "0+"),
        F("topics", "[]DescribeLogDirsTopic", "0+", fields=[
            F("name", "string", "0+"),
            F("partitions", "[]DescribeLogDirsPartition", "0+", fields=[
                F("partition_index", "int32", "0+"),
                F("partition_size", "int64", "0+"),
                F("offset_lag", "int64", "0+"),
                F("is_future_key", "bool", "0+"),
            ]),
        ]),
        F("total_bytes", "int64", "4+", default=-1),
        F("usable_bytes", "int64", "4+", default=-1),
    ]),
])

DescribableLogDirTopic = DescribeLogDirsRequest.DescribableLogDirTopic
DescribeLogDirsResult = DescribeLogDirsResponse.DescribeLogDirsResult
DescribeLogDirsTopic = DescribeLogDirsResult.DescribeLogDirsTopic
DescribeLogDirsPartition = DescribeLogDirsTopic.DescribeLogDirsPartition
