"""OffsetForLeaderEpoch (key 23), versions 2-4, flexible from 4. Transcribed from Kafka's
OffsetForLeaderEpochRequest.json and OffsetForLeaderEpochResponse.json.

A follower (or a consumer, KIP-320) asks the leader where a leader epoch ends, to find where its own log
stops agreeing with the leader's (KIP-101, KIP-279). By version: v1 leader_epoch in the response; v2
current_leader_epoch (fencing) and throttle_time_ms; v3 replica_id; v4 flexible.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["OffsetForLeaderEpochRequest", "OffsetForLeaderEpochResponse", "OffsetForLeaderTopic",
           "OffsetForLeaderPartition", "OffsetForLeaderTopicResult", "EpochEndOffset", "CONSUMER_REPLICA_ID"]

CONSUMER_REPLICA_ID = -1  # replica_id of a consumer's request (Kafka: -2 "debugging", -1 consumer)

OffsetForLeaderEpochRequest = message(
    "OffsetForLeaderEpochRequest", api_key=ApiKey.OFFSET_FOR_LEADER_EPOCH, versions="2-4", flexible="4+",
    module=__name__, fields=[
        F("replica_id", "int32", "3+", default=-2),
        F("topics", "[]OffsetForLeaderTopic", "0+", fields=[
            F("topic", "string", "0+"),
            F("partitions", "[]OffsetForLeaderPartition", "0+", fields=[
                F("partition", "int32", "0+"),
                F("current_leader_epoch", "int32", "2+", default=-1),
                F("leader_epoch", "int32", "0+"),
            ]),
        ]),
    ])

OffsetForLeaderEpochResponse = message(
    "OffsetForLeaderEpochResponse", api_key=ApiKey.OFFSET_FOR_LEADER_EPOCH, versions="2-4", flexible="4+",
    module=__name__, fields=[
        F("throttle_time_ms", "int32", "2+", default=0),
        F("topics", "[]OffsetForLeaderTopicResult", "0+", fields=[
            F("topic", "string", "0+"),
            F("partitions", "[]EpochEndOffset", "0+", fields=[
                F("error_code", "int16", "0+"),
                F("partition", "int32", "0+"),
                F("leader_epoch", "int32", "1+", default=-1),
                F("end_offset", "int64", "0+", default=-1),
            ]),
        ]),
    ])

OffsetForLeaderTopic = OffsetForLeaderEpochRequest.OffsetForLeaderTopic
OffsetForLeaderPartition = OffsetForLeaderTopic.OffsetForLeaderPartition
OffsetForLeaderTopicResult = OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult
EpochEndOffset = OffsetForLeaderTopicResult.EpochEndOffset
