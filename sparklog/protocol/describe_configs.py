"""DescribeConfigs (key 32), versions 0-4; v4 flexible. Transcribed from Kafka's DescribeConfigsRequest.json
and DescribeConfigsResponse.json (Kafka 4 dropped v0 from its specs; it differs from v1 as marked below).

By version: v1 adds include_synonyms, config_source and synonyms, and drops is_default; v2 as v1; v3 adds
include_documentation, config_type and documentation; v4 flexible. ``configuration_keys`` null means every
config of the resource. The resource types, config sources and config types are Kafka's numbers, below.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeConfigsRequest", "DescribeConfigsResponse", "DescribeConfigsResource",
           "DescribeConfigsResult", "DescribeConfigsResourceResult", "DescribeConfigsSynonym",
           "RESOURCE_TOPIC", "RESOURCE_BROKER", "RESOURCE_BROKER_LOGGER", "SOURCE_UNKNOWN", "SOURCE_TOPIC",
           "SOURCE_DYNAMIC_BROKER", "SOURCE_DYNAMIC_DEFAULT_BROKER", "SOURCE_STATIC_BROKER", "SOURCE_DEFAULT"]

# ConfigResource.Type (Kafka's ConfigResource.java)
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# DescribeConfigsResponse.ConfigSource
SOURCE_UNKNOWN = 0
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG: a topic's override
SOURCE_DYNAMIC_BROKER = 2  # DYNAMIC_BROKER_CONFIG
SOURCE_DYNAMIC_DEFAULT_BROKER = 3  # DYNAMIC_DEFAULT_BROKER_CONFIG
SOURCE_STATIC_BROKER = 4  # STATIC_BROKER_CONFIG: server.properties
SOURCE_DEFAULT = 5  # DEFAULT_CONFIG: Kafka's default

DescribeConfigsRequest = message("DescribeConfigsRequest", api_key=ApiKey.DESCRIBE_CONFIGS, versions="0-4",
                                 flexible="4+", module=__name__, fields=[
    F("resources", "[]DescribeConfigsResource", "0+", fields=[
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("configuration_keys", "[]string", "0+", nullable="0+", default=None),
    ]),
    F("include_synonyms", "bool", "1+", default=False),
    F("include_documentation", "bool", "3+", default=False),
])

DescribeConfigsResponse = message("DescribeConfigsResponse", api_key=ApiKey.DESCRIBE_CONFIGS, versions="0-4",
                                  flexible="4+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("results", "[]DescribeConfigsResult", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("configs", "[]DescribeConfigsResourceResult", "0+", fields=[
            F("name", "string", "0+"),
            F("value", "string", "0+", nullable="0+", default=None),
            F("read_only", "bool", "0+"),
            F("config_source", "int8", "1+", default=-1),
            F("is_default", "bool", "0"),
            F("is_sensitive", "bool", "0+"),
            F("synonyms", "[]DescribeConfigsSynonym", "1+", fields=[
                F("name", "string", "1+"),
                F("value", "string", "1+", nullable="0+", default=None),
                F("source", "int8", "1+"),
            ]),
            F("config_type", "int8", "3+", default=0),
            F("documentation", "string", "3+", nullable="0+", default=None),
        ]),
    ]),
])

DescribeConfigsResource = DescribeConfigsRequest.DescribeConfigsResource
DescribeConfigsResult = DescribeConfigsResponse.DescribeConfigsResult
DescribeConfigsResourceResult = DescribeConfigsResult.DescribeConfigsResourceResult
DescribeConfigsSynonym = DescribeConfigsResourceResult.DescribeConfigsSynonym
