"""EndTxn (key 26), versions 0-4, flexible from 3. Transcribed from Kafka's EndTxnRequest.json and
EndTxnResponse.json (KIP-98).

The producer asks its coordinator to commit (``committed`` true) or abort its ongoing transaction. By
version: v1 is v0 (throttling on quota violation); v2 allows PRODUCER_FENCED; v3 is flexible; v4 allows
TRANSACTION_ABORTABLE. (v5, KIP-890 part 2's epoch bump on every transaction, is not served.)
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["EndTxnRequest", "EndTxnResponse"]

EndTxnRequest = message("EndTxnRequest", api_key=ApiKey.END_TXN, versions="0-4", flexible="3+", module=__name__,
                        fields=[
    F("transactional_id", "string", "0+"),
    F("producer_id", "int64", "0+"),
    F("producer_epoch", "int16", "0+"),
    F("committed", "bool", "0+"),
])

EndTxnResponse = message("EndTxnResponse", api_key=ApiKey.END_TXN, versions="0-4", flexible="3+", module=__name__,
                         fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
])
