"""TxnOffsetCommit (key 28), versions 0-4, flexible from 3. Transcribed from Kafka's TxnOffsetCommitRequest.json
and TxnOffsetCommitResponse.json (KIP-98, KIP-447).

A transactional producer sends a consumer group's offsets to the group's coordinator; they stay pending until
the transaction's marker on `__consumer_offsets` commits them (or drops them on abort). By version: v1 is v0
(throttling on quota violation); v2 adds ``committed_leader_epoch``; v3 is flexible and adds the group
membership (``generation_id``, ``member_id``, ``group_instance_id``) the coordinator checks (KIP-447); v4 the
TRANSACTION_ABORTABLE error (KIP-890), which sparklog never answers.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["TxnOffsetCommitRequest", "TxnOffsetCommitResponse", "TxnOffsetCommitRequestTopic",
           "TxnOffsetCommitRequestPartition", "TxnOffsetCommitResponseTopic", "TxnOffsetCommitResponsePartition"]

TxnOffsetCommitRequest = message("TxnOffsetCommitRequest", api_key=ApiKey.TXN_OFFSET_COMMIT, versions="0-4",
                                 flexible="3+", module=__name__, fields=[
    F("transactional_id", "string", "0+"),
    F("group_id", "string", "0+"),
    F("producer_id", "int64", "0+"),
    F("producer_epoch", "int16", "0+"),
    F("generation_id", "int32", "3+", default=-1),
    F("member_id", "string", "3+", default=""),
    F("group_instance_id", "string", "3+", nullable="3+", default=None),
    F("topics", "[]TxnOffsetCommitRequestTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]TxnOffsetCommitRequestPartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("committed_offset", "int64", "0+"),
            F("committed_leader_epoch", "int32", "2+", default=-1),
            F("committed_metadata", "string", "0+", nullable="0+"),
        ]),
    ]),
])

TxnOffsetCommitResponse = message("TxnOffsetCommitResponse", api_key=ApiKey.TXN_OFFSET_COMMIT, versions="0-4",
                                  flexible="3+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("topics", "[]TxnOffsetCommitResponseTopic", "0+", fields=[
        F("name", "string", "0+"),
        F("partitions", "[]TxnOffsetCommitResponsePartition", "0+", fields=[
            F("partition_index", "int32", "0+"),
            F("error_code", "int16", "0+"),
        ]),
    ]),
])

TxnOffsetCommitRequestTopic = TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic
TxnOffsetCommitRequestPartition = TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition
TxnOffsetCommitResponseTopic = TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic
TxnOffsetCommitResponsePartition = TxnOffsetCommitResponseTopic.TxnOffsetCommitResponsePartition
