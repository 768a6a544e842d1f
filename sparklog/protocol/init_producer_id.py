"""InitProducerId (key 22), versions 0-4, flexible from 2. Transcribed from Kafka's
InitProducerIdRequest.json and InitProducerIdResponse.json: v1 is v0 (throttling on quota violation); v2 is
the first flexible version; v3 adds the producer id and epoch the producer holds (KIP-360: an idempotent
producer may ask again after INVALID_PRODUCER_EPOCH); v4 allows the PRODUCER_FENCED error; v5 the
TRANSACTION_ABORTABLE error (KIP-890), which sparklog never answers. The response
has the same fields in every version.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["InitProducerIdRequest", "InitProducerIdResponse"]

InitProducerIdRequest = message("InitProducerIdRequest", api_key=ApiKey.INIT_PRODUCER_ID, versions="0-5",
                                flexible="2+", module=__name__, fields=[
    F("transactional_id", "string", "0+", nullable="0+", default=None),
    F("transaction_timeout_ms", "int32", "0+"),
    F("producer_id", "int64", "3+", default=-1),
    F("producer_epoch", "int16", "3+", default=-1),
])

InitProducerIdResponse = message("InitProducerIdResponse", api_key=ApiKey.INIT_PRODUCER_ID, versions="0-5",
                                 flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
    F("producer_id", "int64", "0+", default=-1),
    F("producer_epoch", "int16", "0+"),
])
