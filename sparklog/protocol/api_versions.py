"""ApiVersions (key 18), versions 0-4; v3+ flexible. Transcribed from Kafka's ApiVersionsRequest.json
and ApiVersionsResponse.json.

The response header is always v0, even in flexible versions (so that a client that does not yet know
which versions the broker serves can parse it); and a response with a non-zero error code is encoded
in the v0 body format whatever the request version (see ``registry.encode_api_versions_fallback``).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ApiVersionsRequest", "ApiVersionsResponse", "ApiVersion", "SupportedFeatureKey",
           "FinalizedFeatureKey"]

ApiVersionsRequest = message("ApiVersionsRequest", api_key=ApiKey.API_VERSIONS, versions="0-4",
                             flexible="3+", module=__name__, fields=[
    F("client_software_name", "string", "3+"),
    F("client_software_version", "string", "3+"),
])

ApiVersionsResponse = message("ApiVersionsResponse", api_key=ApiKey.API_VERSIONS, versions="0-4",
                              flexible="3+", module=__name__, fields=[
    F("error_code", "int16", "0+"),
    F("api_keys", "[]ApiVersion", "0+", fields=[
        F("api_key", "int16", "0+"),
        F("min_version", "int16", "0+"),
        F("max_version", "int16", "0+"),
    ]),
    F("throttle_time_ms", "int32", "1+"),
    F("supported_features", "[]SupportedFeatureKey", "3+", tag=0, tagged="3+", fields=[
        F("name", "string", "3+"),
        F("min_version", "int16", "3+"),
        F("max_version", "int16", "3+"),
    ]),
    F("finalized_features_epoch", "int64", "3+", tag=1, tagged="3+", default=-1),
    F("finalized_features", "[]FinalizedFeatureKey", "3+", tag=2, tagged="3+", fields=[
        F("name", "string", "3+"),
        F("max_version_level", "int16", "3+"),
        F("min_version_level", "int16", "3+"),
    ]),
    F("zk_migration_ready", "bool", "3+", tag=3, tagged="3+", default=False),
])

ApiVersion = ApiVersionsResponse.ApiVersion
SupportedFeatureKey = ApiVersionsResponse.SupportedFeatureKey
FinalizedFeatureKey = ApiVersionsResponse.FinalizedFeatureKey
