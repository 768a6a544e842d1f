"""IncrementalAlterConfigs (key 44), versions 0-1; v1 flexible. Transcribed from Kafka's
IncrementalAlterConfigsRequest.json and IncrementalAlterConfigsResponse.json (KIP-339).

Each config carries its operation: SET a value, DELETE the override (back to the default), APPEND to or
SUBTRACT from a list-typed config (cleanup.policy, the throttled replica lists).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["IncrementalAlterConfigsRequest", "IncrementalAlterConfigsResponse", "IncrementalAlterConfigsResource",
           "IncrementalAlterableConfig", "IncrementalAlterConfigsResourceResponse", "OP_SET", "OP_DELETE",
           "OP_APPEND", "OP_SUBTRACT"]

# AlterConfigOp.OpType
OP_SET = 0
OP_DELETE = 1
OP_APPEND = 2
OP_SUBTRACT = 3

IncrementalAlterConfigsRequest = message("IncrementalAlterConfigsRequest",
                                         api_key=ApiKey.INCREMENTAL_ALTER_CONFIGS, versions="0-1", flexible="1+",
                                         module=__name__, fields=[
    F("resources", "[]AlterConfigsResource", "0+", fields=[
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("configs", "[]AlterableConfig", "0+", fields=[
            F("name", "string", "0+"),
            F("config_operation", "int8", "0+"),
            F("value", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
    F("validate_only", "bool", "0+", default=False),
])

IncrementalAlterConfigsResponse = message("IncrementalAlterConfigsResponse",
                                          api_key=ApiKey.INCREMENTAL_ALTER_CONFIGS, versions="0-1", flexible="1+",
                                          module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
    ]),
])

IncrementalAlterConfigsResource = IncrementalAlterConfigsRequest.AlterConfigsResource
IncrementalAlterableConfig = IncrementalAlterConfigsResource.AlterableConfig
IncrementalAlterConfigsResourceResponse = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse
