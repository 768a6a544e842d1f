"""AlterConfigs (key 33), versions 0-2; v2 flexible. Transcribed from Kafka's AlterConfigsRequest.json and
AlterConfigsResponse.json.

The older, non-incremental call: the configs given replace every override of the resource (a config left
out goes back to its default). By version: v1 as v0 (the response is sent before throttling); v2 flexible.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["AlterConfigsRequest", "AlterConfigsResponse", "AlterConfigsResource", "AlterableConfig",
           "AlterConfigsResourceResponse"]

AlterConfigsRequest = message("AlterConfigsRequest", api_key=ApiKey.ALTER_CONFIGS, versions="0-2",
                              flexible="2+", module=__name__, fields=[
    F("resources", "[]AlterConfigsResource", "0+", fields=[
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("configs", "[]AlterableConfig", "0+", fields=[
            F("name", "string", "0+"),
            F("value", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
    F("validate_only", "bool", "0+", default=False),
])

AlterConfigsResponse = message("AlterConfigsResponse", api_key=ApiKey.ALTER_CONFIGS, versions="0-2",
                               flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("responses", "[]AlterConfigsResourceResponse", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
    ]),
])

AlterConfigsResource = AlterConfigsRequest.AlterConfigsResource
AlterableConfig = AlterConfigsResource.AlterableConfig
AlterConfigsResourceResponse = AlterConfigsResponse.AlterConfigsResourceResponse
