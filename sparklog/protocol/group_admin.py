"""Reading and removing broker-coordinated groups: DescribeGroups (key 15) v0-5 (flexible from v5), ListGroups
(16) v0-5 (flexible from v3) and DeleteGroups (42) v0-2 (flexible from v2). Transcribed from Kafka's
DescribeGroups*, ListGroups* and DeleteGroups* JSON specs.

By version: DescribeGroups v1 throttle_time_ms, v3 include_authorized_operations and
authorized_operations, v4 the members' group_instance_id; ListGroups v1 throttle_time_ms, v4 the states
filter and each group's state (KIP-518: without them librdkafka's list_consumer_groups(states=...) lists
every group, in state UNKNOWN), v5 the types filter and each group's type (KIP-848: "classic" or "consumer").
DescribeGroups v6 (KIP-1043's GROUP_ID_NOT_FOUND and error_message) is left out.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["DescribeGroupsRequest", "DescribeGroupsResponse", "DescribedGroup", "DescribedGroupMember",
           "ListGroupsRequest", "ListGroupsResponse", "ListedGroup", "DeleteGroupsRequest",
           "DeleteGroupsResponse", "DeletableGroupResult", "AUTHORIZED_OPERATIONS_OMITTED"]

AUTHORIZED_OPERATIONS_OMITTED = -2147483648  # INT32_MIN: "not asked for" in Kafka's specs

DescribeGroupsRequest = message("DescribeGroupsRequest", api_key=ApiKey.DESCRIBE_GROUPS, versions="0-5",
                                flexible="5+", module=__name__, fields=[
    F("groups", "[]string", "0+"),
    F("include_authorized_operations", "bool", "3+", default=False),
])

DescribeGroupsResponse = message("DescribeGroupsResponse", api_key=ApiKey.DESCRIBE_GROUPS, versions="0-5",
                                 flexible="5+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("groups", "[]DescribedGroup", "0+", fields=[
        F("error_code", "int16", "0+"),
        F("group_id", "string", "0+"),
        F("group_state", "string", "0+"),
        F("protocol_type", "string", "0+"),
        F("protocol_data", "string", "0+"),
        F("members", "[]DescribedGroupMember", "0+", fields=[
            F("member_id", "string", "0+"),
            F("group_instance_id", "string", "4+", nullable="4+", default=None),
            F("client_id", "string", "0+"),
            F("client_host", "string", "0+"),
            F("member_metadata", "bytes", "0+"),
            F("member_assignment", "bytes", "0+"),
        ]),
        F("authorized_operations", "int32", "3+", default=AUTHORIZED_OPERATIONS_OMITTED),
    ]),
])

ListGroupsRequest = message("ListGroupsRequest", api_key=ApiKey.LIST_GROUPS, versions="0-5", flexible="3+",
                            module=__name__, fields=[
    F("states_filter", "[]string", "4+", default=()),
    F("types_filter", "[]string", "5+", default=()),
])

ListGroupsResponse = message("ListGroupsResponse", api_key=ApiKey.LIST_GROUPS, versions="0-5", flexible="3+",
                             module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0+"),
    F("groups", "[]ListedGroup", "0+", fields=[
        F("group_id", "string", "0+"),
        F("protocol_type", "string", "0+"),
        F("group_state", "string", "4+", default=""),
        F("group_type", "string", "5+", default=""),
    ]),
])

DeleteGroupsRequest = message("DeleteGroupsRequest", api_key=ApiKey.DELETE_GROUPS, versions="0-2",
                              flexible="2+", module=__name__, fields=[
    F("groups_names", "[]string", "0+"),
])

DeleteGroupsResponse = message("DeleteGroupsResponse", api_key=ApiKey.DELETE_GROUPS, versions="0-2",
                               flexible="2+", module=__name__, fields=[
    F("throttle_time_ms", "int32", "0+"),
    F("results", "[]DeletableGroupResult", "0+", fields=[
        F("group_id", "string", "0+"),
        F("error_code", "int16", "0+"),
    ]),
])

DescribedGroup = DescribeGroupsResponse.DescribedGroup
DescribedGroupMember = DescribedGroup.DescribedGroupMember
ListedGroup = ListGroupsResponse.ListedGroup
DeletableGroupResult = DeleteGroupsResponse.DeletableGroupResult
