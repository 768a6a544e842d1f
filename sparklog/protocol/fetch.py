"""Fetch (key 1), versions 4-11, none flexible. Transcribed from Kafka's FetchRequest.json and
FetchResponse.json.

By version: v4 isolation_level, last_stable_offset, aborted_transactions; v5 log_start_offset (both
sides); v7 fetch sessions (session_id, session_epoch, forgotten_topics_data; response error_code and
session_id); v9 current_leader_epoch; v11 rack_id and preferred_read_replica.

``records`` of a response may be bytes, a memoryview, or any object with ``__len__`` that the caller
writes itself (a storage ``FileSlice`` sent with ``os.sendfile``): ``encode_response`` returns it as a
chunk of its own. Decoded, it is a memoryview of the frame.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["FetchRequest", "FetchResponse", "FetchTopic", "FetchPartition", "ForgottenTopic",
           "FetchableTopicResponse", "PartitionData", "AbortedTransaction"]

FetchRequest = message("FetchRequest", api_key=ApiKey.FETCH, versions="4-11", module=__name__, fields=[
    F("replica_id", "int32", "0-14", default=-1),
    F("max_wait_ms", "int32", "0+"),
    F("min_bytes", "int32", "0+"),
    F("max_bytes", "int32", "3+", default=0x7FFFFFFF),
    F("isolation_level", "int8", "4+", default=0),
    F("session_id", "int32", "7+", default=0),
    F("session_epoch", "int32", "7+", default=-1),
    F("topics", "[]FetchTopic", "0+", fields=[
        F("topic", "string", "0-12"),
        F("partitions", "[]FetchPartition", "0+", fields=[
            F("partition", "int32", "0+"),
            F("current_leader_epoch", "int32", "9+", default=-1),
            F("fetch_offset", "int64", "0+"),
            F("log_start_offset", "int64", "5+", default=-1),
            F("partition_max_bytes", "int32", "0+"),
        ]),
    ]),
    F("forgotten_topics_data", "[]ForgottenTopic", "7+", fields=[
        F("topic", "string", "7-12"),
        F("partitions", "[]int32", "7+"),
    ]),
    F("rack_id", "string", "11+", default=""),
])

FetchResponse = message("FetchResponse", api_key=ApiKey.FETCH, versions="4-11", module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "7+"),
    F("session_id", "int32", "7+", default=0),
    F("responses", "[]FetchableTopicResponse", "0+", fields=[
        F("topic", "string", "0-12"),
        F("partitions", "[]PartitionData", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
            F("high_watermark", "int64", "0+"),
            F("last_stable_offset", "int64", "4+", default=-1),
            F("log_start_offset", "int64", "5+", default=-1),
            F("aborted_transactions", "[]AbortedTransaction", "4+", nullable="4+", fields=[
                F("producer_id", "int64", "4+"),
                F("first_offset", "int64", "4+"),
            ]),
            F("preferred_read_replica", "int32", "11+", default=-1),
            F("records", "records", "0+", nullable="0+"),
        ]),
    ]),
])

FetchTopic = FetchRequest.FetchTopic
FetchPartition = FetchTopic.FetchPartition
ForgottenTopic = FetchRequest.ForgottenTopic
FetchableTopicResponse = FetchResponse.FetchableTopicResponse
PartitionData = FetchableTopicResponse.PartitionData
AbortedTransaction = PartitionData.AbortedTransaction
