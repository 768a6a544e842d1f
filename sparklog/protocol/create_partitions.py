"""CreatePartitions (key 37), versions 0-3; v2+ flexible. Transcribed from Kafka's CreatePartitionsRequest.json
and CreatePartitionsResponse.json.

By version: v1 as v0 (the response is sent before throttling); v2 flexible; v3 as v2 (may answer
THROTTLING_QUOTA_EXCEEDED). ``count`` is the new total number of partitions, not the number added;
``assignments`` (null to let the broker place them) holds one replica list per new partition.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["CreatePartitionsRequest", "CreatePartitionsResponse", "CreatePartitionsTopic",
           "CreatePartitionsAssignment", "CreatePartitionsTopicResult"]

CreatePartitionsRequest = message("CreatePartitionsRequest", api_key=ApiKey.CREATE_PARTITIONS, versions="0-3",
                                  flexible="2+", module=__name__, fields=[
    F("topics", "[]CreatePartitionsTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("count", "int32", "0+"),
        F("assignments", "[]CreatePartitionsAssignment", "0+", nullable="0+", default=None, fields=[
            F("broker_ids", "[]int32", "0+"),
        ]),
    ]),
    F("timeout_ms", "int32", "0+", default=60000),
    F("validate_only", "bool", "0+", default=False),
])

CreatePartitionsResponse = message("CreatePartitionsResponse", api_key=ApiKey.CREATE_PARTITIONS, versions="0-3",
                                   flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("results", "[]CreatePartitionsTopicResult", "0+", fields=[
        F("name", "string", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
    ]),
])

CreatePartitionsTopic = CreatePartitionsRequest.CreatePartitionsTopic
CreatePartitionsAssignment = CreatePartitionsTopic.CreatePartitionsAssignment
CreatePartitionsTopicResult = CreatePartitionsResponse.CreatePartitionsTopicResult
