"""AddOffsetsToTxn (key 25), versions 0-4, flexible from 3. Transcribed from Kafka's AddOffsetsToTxnRequest.json
and AddOffsetsToTxnResponse.json (KIP-98).

A transactional producer that will commit a consumer group's offsets in its transaction names the group first:
the coordinator adds the group's `__consumer_offsets` partition to the transaction (its marker makes the offsets
visible), and the producer then sends TxnOffsetCommit to the group's coordinator. By version: v1 is v0
(throttling on quota violation); v2 allows PRODUCER_FENCED; v3 is flexible; v4 allows TRANSACTION_ABORTABLE.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["AddOffsetsToTxnRequest", "AddOffsetsToTxnResponse"]

AddOffsetsToTxnRequest = message("AddOffsetsToTxnRequest", api_key=ApiKey.ADD_OFFSETS_TO_TXN, versions="0-4",
                                 flexible="3+", module=__name__, fields=[
    F("transactional_id", "string", "0+"),
    F("producer_id", "int64", "0+"),
    F("producer_epoch", "int16", "0+"),
    F("group_id", "string", "0+"),
])

AddOffsetsToTxnResponse = message("AddOffsetsToTxnResponse", api_key=ApiKey.ADD_OFFSETS_TO_TXN, versions="0-4",
                                  flexible="3+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
])
