"""DescribeProducers (key 61), version 0, flexible (KIP-664). Transcribed from Kafka's
DescribeProducersRequest.json and DescribeProducersResponse.json.

The idempotent producers whose state a partition's leader keeps: id, epoch, last sequence and the timestamp
of their last batch. ``coordinator_epoch`` and ``current_txn_start_offset`` concern transactions (-1 without).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeProducersRequest", "DescribeProducersResponse", "DescribeProducersTopicRequest",
           "DescribeProducersTopicResponse", "DescribeProducersPartitionResponse", "ProducerState"]

DescribeProducersRequest = message("DescribeProducersRequest", api_key=ApiKey.DESCRIBE_PRODUCERS, versions="0",
                                   flexible="0+", module=__name__, fields=[
    F("topics", "[]TopicRequest", "0+", fields=[
        F("name", "string", "0+"),
        F("partition_indexes", "[]int32", "0+"),
    ]),
])

DescribeProducersResponse = message("DescribeProducersResponse", api_key=ApiKey.DESCRIBE_PRODUCERS, versions="0",
                                    flexible="0+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("topics", "[]TopicResponse", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]PartitionResponse", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
            F("active_producers", "[]ProducerState", "0+", fields=[
                F("producer_id", "int64", "0+"),
                F("producer_epoch", "int32", "0+"),
                F("last_sequence", "int32", "0+", default=-1),
                F("last_timestamp", "int64", "0+", default=-1),
                F("coordinator_epoch", "int32", "0+"),
                F("current_txn_start_offset", "int64", "0+", default=-1),
            ]),
        ]),
    ]),
])

DescribeProducersTopicRequest = DescribeProducersRequest.TopicRequest
DescribeProducersTopicResponse = DescribeProducersResponse.TopicResponse
DescribeProducersPartitionResponse = DescribeProducersTopicResponse.PartitionResponse
ProducerState = DescribeProducersPartitionResponse.ProducerState
