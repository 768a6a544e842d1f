"""InitProducerId (key 22), versions 0-1, none flexible. Transcribed from Kafka's
InitProducerIdRequest.json and InitProducerIdResponse.json (v1 is v0 with throttling on quota
violation; the format is the same).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["InitProducerIdRequest", "InitProducerIdResponse"]

InitProducerIdRequest = message("InitProducerIdRequest", api_key=ApiKey.INIT_PRODUCER_ID, versions="0-1",
                                module=__name__, fields=[
    F("transactional_id", "string", "0+", nullable="0+", default=None),
    F("transaction_timeout_ms", "int32", "0+"),
])

InitProducerIdResponse = message("InitProducerIdResponse", api_key=ApiKey.INIT_PRODUCER_ID, versions="0-1",
                                 module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
    F("producer_id", "int64", "0+", default=-1),
    F("producer_epoch", "int16", "0+"),
])
