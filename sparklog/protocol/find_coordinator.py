"""FindCoordinator (key 10), versions 0-2, none flexible. Transcribed from Kafka's
FindCoordinatorRequest.json and FindCoordinatorResponse.json.

By version: v1 key_type (0 group, 1 transaction), throttle_time_ms and error_message.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["FindCoordinatorRequest", "FindCoordinatorResponse", "KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION"]

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1

FindCoordinatorRequest = message("FindCoordinatorRequest", api_key=ApiKey.FIND_COORDINATOR, versions="0-2",
                                 module=__name__, fields=[
    F("key", "string", "0-3"),
    F("key_type", "int8", "1+", default=KEY_TYPE_GROUP),
])

FindCoordinatorResponse = message("FindCoordinatorResponse", api_key=ApiKey.FIND_COORDINATOR,
                                  versions="0-2", module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0-3"),
    F("error_message", "string", "1-3", nullable="1-3", default=None),
    F("node_id", "int32", "0-3"),
    F("host", "string", "0-3"),
    F("port", "int32", "0-3"),
])
