"""WriteTxnMarkers (key 27), versions 0-1, flexible from 1. Transcribed from Kafka's WriteTxnMarkersRequest.json
and WriteTxnMarkersResponse.json (KIP-98).

Broker to broker: a transaction coordinator asks a partition leader to append the commit or abort marker
(a control batch) of a producer's transaction to the partitions named. ``transaction_result`` is true for
COMMIT, false for ABORT; ``coordinator_epoch`` is the epoch of the coordinator's `__transaction_state`
partition (the leader refuses a marker from an older coordinator). v1 is the first flexible version (v2,
Kafka 4's transaction version field, is not served).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["WriteTxnMarkersRequest", "WriteTxnMarkersResponse", "WritableTxnMarker", "WritableTxnMarkerTopic",
           "WritableTxnMarkerResult", "WritableTxnMarkerTopicResult", "WritableTxnMarkerPartitionResult"]

WriteTxnMarkersRequest = message("WriteTxnMarkersRequest", api_key=ApiKey.WRITE_TXN_MARKERS, versions="0-1",
                                 flexible="1+", module=__name__, fields=[
    F("markers", "[]WritableTxnMarker", "0+", fields=[
        F("producer_id", "int64", "0+"),
        F("producer_epoch", "int16", "0+"),
        F("transaction_result", "bool", "0+"),
        F("topics", "[]WritableTxnMarkerTopic", "0+", fields=[
            F("name", "string", "0+"),
            F("partition_indexes", "[]int32", "0+"),
        ]),
        F("coordinator_epoch", "int32", "0+"),
    ]),
])

WriteTxnMarkersResponse = message("WriteTxnMarkersResponse", api_key=ApiKey.WRITE_TXN_MARKERS, versions="0-1",
                                  flexible="1+", module=__name__, fields=[
    F("markers", "[]WritableTxnMarkerResult", "0+", fields=[
        F("producer_id", "int64", "0+"),
        F("topics", "[]WritableTxnMarkerTopicResult", "0+", fields=[
            F("name", "string", "0+"),
            F("partitions", "[]WritableTxnMarkerPartitionResult", "0+", fields=[
                F("partition_index", "int32", "0+"),
                F("error_code", "int16", "0+"),
            ]),
        ]),
    ]),
])

WritableTxnMarker = WriteTxnMarkersRequest.WritableTxnMarker
WritableTxnMarkerTopic = WritableTxnMarker.WritableTxnMarkerTopic
WritableTxnMarkerResult = WriteTxnMarkersResponse.WritableTxnMarkerResult
WritableTxnMarkerTopicResult = WritableTxnMarkerResult.WritableTxnMarkerTopicResult
WritableTxnMarkerPartitionResult = WritableTxnMarkerTopicResult.WritableTxnMarkerPartitionResult
