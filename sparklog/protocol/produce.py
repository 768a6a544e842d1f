"""Produce (key 0), versions 3-8, none flexible. Transcribed from Kafka's ProduceRequest.json and
ProduceResponse.json.

By version: v3 transactional_id (and RecordBatch v2 only); v5 log_start_offset; v8 record_errors and
error_message. ``records`` is passed through untouched: decoded as a memoryview of the request frame.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ProduceRequest", "ProduceResponse", "TopicProduceData", "PartitionProduceData",
           "TopicProduceResponse", "PartitionProduceResponse", "BatchIndexAndErrorMessage"]

ProduceRequest = message("ProduceRequest", api_key=ApiKey.PRODUCE, versions="3-8", module=__name__, fields=[
    F("transactional_id", "string", "3+", nullable="3+", default=None),
    F("acks", "int16", "0+"),
    F("timeout_ms", "int32", "0+"),
    F("topic_data", "[]TopicProduceData", "0+", fields=[
        F("name", "string", "0-12"),
        F("partition_data", "[]PartitionProduceData", "0+", fields=[
            F("index", "int32", "0+"),
            F("records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

ProduceResponse = message("ProduceResponse", api_key=ApiKey.PRODUCE, versions="3-8", module=__name__, fields=[
    F("responses", "[]TopicProduceResponse", "0+", fields=[
        F("name", "string", "0-12"),
        F("partition_responses", "[]PartitionProduceResponse", "0+", fields=[
            F("index", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("base_offset", "int64", "0+"),
            F("log_append_time_ms", "int64", "2+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("record_errors", "[]BatchIndexAndErrorMessage", "8+", fields=[
                F("batch_index", "int32", "8+"),
                F("batch_index_error_message", "string", "8+", nullable="8+", default=None),
            ]),
            F("error_message", "string", "8+", nullable="8+", default=None),
        ]),
    ]),
    F("throttle_time_ms", "int32", "1+", default=0),
])

TopicProduceData = ProduceRequest.TopicProduceData
PartitionProduceData = TopicProduceData.PartitionProduceData
TopicProduceResponse = ProduceResponse.TopicProduceResponse
PartitionProduceResponse = TopicProduceResponse.PartitionProduceResponse
BatchIndexAndErrorMessage = PartitionProduceResponse.BatchIndexAndErrorMessage
