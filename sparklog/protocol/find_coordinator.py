"""FindCoordinator (key 10), versions 0-5, flexible from 3. Transcribed from Kafka's
FindCoordinatorRequest.json and FindCoordinatorResponse.json (v6, share groups, is left out).

By version: v1 key_type (0 group, 1 transaction), throttle_time_ms and error_message; v3 flexible; v4 batches
keys (KIP-699: coordinator_keys, each answered in coordinators with its own error); v5 the same fields, a
client that may be told TRANSACTION_ABORTABLE (KIP-890).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["FindCoordinatorRequest", "FindCoordinatorResponse", "KEY_TYPE_GROUP", "KEY_TYPE_TRANSACTION",
           "Coordinator", "BATCHED_VERSION"]

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
BATCHED_VERSION = 4  # the first version of coordinator_keys / coordinators

FindCoordinatorRequest = message("FindCoordinatorRequest", api_key=ApiKey.FIND_COORDINATOR, versions="0-5",
                                 flexible="3+", module=__name__, fields=[
    F("key", "string", "0-3"),
    F("key_type", "int8", "1+", default=KEY_TYPE_GROUP),
    F("coordinator_keys", "[]string", "4+"),
])

FindCoordinatorResponse = message("FindCoordinatorResponse", api_key=ApiKey.FIND_COORDINATOR,
                                  versions="0-5", flexible="3+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0-3"),
    F("error_message", "string", "1-3", nullable="1-3", default=None),
    F("node_id", "int32", "0-3"),
    F("host", "string", "0-3"),
    F("port", "int32", "0-3"),
    F("coordinators", "[]Coordinator", "4+", fields=[
        F("key", "string", "4+"),
        F("node_id", "int32", "4+", default=-1),
        F("host", "string", "4+"),
        F("port", "int32", "4+", default=-1),
        F("error_code", "int16", "4+"),
        F("error_message", "string", "4+", nullable="4+", default=None),
    ]),
])

Coordinator = FindCoordinatorResponse.Coordinator
