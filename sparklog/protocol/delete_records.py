"""DeleteRecords (key 21), versions 0-2; v2 flexible. Transcribed from Kafka's DeleteRecordsRequest.json and
DeleteRecordsResponse.json.

Moves each partition's log start offset up to ``offset`` (-1: the high watermark); the answer's
``low_watermark`` is the log start offset afterwards. By version: v1 as v0; v2 flexible.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DeleteRecordsRequest", "DeleteRecordsResponse", "DeleteRecordsTopic", "DeleteRecordsPartition",
           "DeleteRecordsTopicResult", "DeleteRecordsPartitionResult", "HIGH_WATERMARK"]

HIGH_WATERMARK = -1  # an offset of -1 deletes up to the high watermark (Kafka's DeleteRecordsRequest)

DeleteRecordsRequest = message("DeleteRecordsRequest", api_key=ApiKey.DELETE_RECORDS, versions="0-2",
                               flexible="2+", module=__name__, fields=[
    F("topics", "[]DeleteRecordsTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]DeleteRecordsPartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("offset", "int64", "0+"),
        ]),
    ]),
    F("timeout_ms", "int32", "0+", default=60000),
])

DeleteRecordsResponse = message("DeleteRecordsResponse", api_key=ApiKey.DELETE_RECORDS, versions="0-2",
                                flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("topics", "[]DeleteRecordsTopicResult", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]DeleteRecordsPartitionResult", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("low_watermark", "int64", "0+", default=-1),
            F("error_code", "int16", "0+"),
        ]),
    ]),
])

DeleteRecordsTopic = DeleteRecordsRequest.DeleteRecordsTopic
DeleteRecordsPartition = DeleteRecordsTopic.DeleteRecordsPartition
DeleteRecordsTopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult
DeleteRecordsPartitionResult = DeleteRecordsTopicResult.DeleteRecordsPartitionResult
