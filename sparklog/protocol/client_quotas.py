"""DescribeClientQuotas (key 48) and AlterClientQuotas (key 49), versions 0-1, flexible from v1 (KIP-546).
Transcribed from Kafka's DescribeClientQuotasRequest.json / DescribeClientQuotasResponse.json and
AlterClientQuotasRequest.json / AlterClientQuotasResponse.json.

An entity is a list of (entity_type, entity_name) components: entity_type "user" or "client-id", a null name
the default entity (`<default>` in ZooKeeper). A describe filter's match_type is MATCH_EXACT (name given),
MATCH_DEFAULT (the default entity) or MATCH_ANY (any entity that has the component); `strict` leaves out
entities with components the filter does not name. Quota values are float64.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeClientQuotasRequest", "DescribeClientQuotasResponse", "AlterClientQuotasRequest",
           "AlterClientQuotasResponse", "MATCH_EXACT", "MATCH_DEFAULT", "MATCH_ANY", "USER", "CLIENT_ID"]

MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2
USER = "user"
CLIENT_ID = "client-id"

DescribeClientQuotasRequest = message("DescribeClientQuotasRequest", api_key=ApiKey.DESCRIBE_CLIENT_QUOTAS,
                                      versions="0-1", flexible="1+", module=__name__, fields=[
    F("components", "[]ComponentData", "0+", fields=[
        F("entity_type", "string", "0+"),
        F("match_type", "int8", "0+"),
        F("match", "string", "0+", nullable="0+", default=None),
    ]),
    F("strict", "bool", "0+"),
])

DescribeClientQuotasResponse = message("DescribeClientQuotasResponse", api_key=ApiKey.DESCRIBE_CLIENT_QUOTAS,
                                       versions="0-1", flexible="1+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
    F("error_message", "string", "0+", nullable="0+", default=None),
    F("entries", "[]EntryData", "0+", nullable="0+", fields=[
        F("entity", "[]EntityData", "0+", fields=[
            F("entity_type", "string", "0+"),
            F("entity_name", "string", "0+", nullable="0+", default=None),
        ]),
        F("values", "[]ValueData", "0+", fields=[
            F("key", "string", "0+"),
            F("value", "float64", "0+"),
        ]),
    ]),
])

AlterClientQuotasRequest = message("AlterClientQuotasRequest", api_key=ApiKey.ALTER_CLIENT_QUOTAS,
                                   versions="0-1", flexible="1+", module=__name__, fields=[
    F("entries", "[]EntryData", "0+", fields=[
        F("entity", "[]EntityData", "0+", fields=[
            F("entity_type", "string", "0+"),
            F("entity_name", "string", "0+", nullable="0+", default=None),
        ]),
        F("ops", "[]OpData", "0+", fields=[
            F("key", "string", "0+"),
            F("value", "float64", "0+"),
            F("remove", "bool", "0+"),
        ]),
    ]),
    F("validate_only", "bool", "0+"),
])

AlterClientQuotasResponse = message("AlterClientQuotasResponse", api_key=ApiKey.ALTER_CLIENT_QUOTAS,
                                    versions="0-1", flexible="1+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("entries", "[]EntryData", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("entity", "[]EntityData", "0+", fields=[
            F("entity_type", "string", "0+"),
            F("entity_name", "string", "0+", nullable="0+", default=None),
        ]),
    ]),
])
