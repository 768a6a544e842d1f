"""DescribeAcls (key 29), CreateAcls (key 30) and DeleteAcls (key 31), versions 0-3, flexible from 2.
Transcribed from Kafka's DescribeAcls/CreateAcls/DeleteAcls Request/Response .json.

By version: v1 adds the resource pattern type (LITERAL = 3 before it); v2 is flexible; v3 allows the USER
resource type. The int8 codes are Kafka's (coordination/acl.py: ResourceType, PatternType, Operation,
Permission).
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeAclsRequest", "DescribeAclsResponse", "CreateAclsRequest", "CreateAclsResponse",
           "DeleteAclsRequest", "DeleteAclsResponse", "AclCreation", "LITERAL"]

LITERAL = 3


def _filter_fields() -> list[F]:
    """An ACL binding filter's fields: DescribeAcls' request, each of DeleteAcls' filters."""
    return [F("resource_type_filter", "int8", "0+"),
            F("resource_name_filter", "string", "0+", nullable="0+", default=None),
            F("pattern_type_filter", "int8", "1+", default=LITERAL),
            F("principal_filter", "string", "0+", nullable="0+", default=None),
            F("host_filter", "string", "0+", nullable="0+", default=None),
            F("operation", "int8", "0+"),
            F("permission_type", "int8", "0+")]


DescribeAclsRequest = message("DescribeAclsRequest", api_key=ApiKey.DESCRIBE_ACLS, versions="0-3", flexible="2+",
                              module=__name__, fields=_filter_fields())

DescribeAclsResponse = message("DescribeAclsResponse", api_key=ApiKey.DESCRIBE_ACLS, versions="0-3", flexible="2+",
                               module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("error_code", "int16", "0+"),
    F("error_message", "string", "0+", nullable="0+", default=None),
    F("resources", "[]DescribeAclsResource", "0+", fields=[
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("pattern_type", "int8", "1+", default=LITERAL),
        F("acls", "[]AclDescription", "0+", fields=[
            F("principal", "string", "0+"),
            F("host", "string", "0+"),
            F("operation", "int8", "0+"),
            F("permission_type", "int8", "0+"),
        ]),
    ]),
])

CreateAclsRequest = message("CreateAclsRequest", api_key=ApiKey.CREATE_ACLS, versions="0-3", flexible="2+",
                            module=__name__, fields=[
    F("creations", "[]AclCreation", "0+", fields=[
        F("resource_type", "int8", "0+"),
        F("resource_name", "string", "0+"),
        F("resource_pattern_type", "int8", "1+", default=LITERAL),
        F("principal", "string", "0+"),
        F("host", "string", "0+"),
        F("operation", "int8", "0+"),
        F("permission_type", "int8", "0+"),
    ]),
])

CreateAclsResponse = message("CreateAclsResponse", api_key=ApiKey.CREATE_ACLS, versions="0-3", flexible="2+",
                             module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("results", "[]AclCreationResult", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
    ]),
])

DeleteAclsRequest = message("DeleteAclsRequest", api_key=ApiKey.DELETE_ACLS, versions="0-3", flexible="2+",
                            module=__name__, fields=[
    F("filters", "[]DeleteAclsFilter", "0+", fields=_filter_fields()),
])

DeleteAclsResponse = message("DeleteAclsResponse", api_key=ApiKey.DELETE_ACLS, versions="0-3", flexible="2+",
                             module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("filter_results", "[]DeleteAclsFilterResult", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("matching_acls", "[]DeleteAclsMatchingAcl", "0+", fields=[
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
            F("resource_type", "int8", "0+"),
            F("resource_name", "string", "0+"),
            F("pattern_type", "int8", "1+", default=LITERAL),
            F("principal", "string", "0+"),
            F("host", "string", "0+"),
            F("operation", "int8", "0+"),
            F("permission_type", "int8", "0+"),
        ]),
    ]),
])

AclCreation = CreateAclsRequest.AclCreation
