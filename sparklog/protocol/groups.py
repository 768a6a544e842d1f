"""Kafka's broker-coordinated consumer groups: JoinGroup (key 11) v0-9 (flexible from 6), SyncGroup (14) v0-5
(flexible from 4), Heartbeat (12) v0-4 (flexible from 4), LeaveGroup (13) v0-5 (flexible from 4). Transcribed
from Kafka's JoinGroup*, SyncGroup*, Heartbeat* and LeaveGroup* JSON specs.

By version: JoinGroup v7 the response's protocol_type (and a nullable protocol_name), v8 the request's reason
(KIP-800), v9 the response's skip_assignment (KIP-814: a static leader that rejoins a stable group is told the
members but must not assign); SyncGroup v5 protocol_type and protocol_name on both sides (the coordinator
checks the request's against the group's: INCONSISTENT_GROUP_PROTOCOL); LeaveGroup v5 each member's reason.

The broker's group coordinator (sparklog/broker/coordinator/group/coordinator.py) serves them; the paper's ZooKeeper
groups (sparklog/coordination) are a separate kind of group that never uses these apis.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["JoinGroupRequest", "JoinGroupResponse", "SyncGroupRequest", "SyncGroupResponse",
           "HeartbeatRequest", "HeartbeatResponse", "LeaveGroupRequest", "LeaveGroupResponse"]

# v1 rebalance_timeout_ms; v2 throttle_time_ms; v5 group_instance_id; v6 flexible; v8 reason
JoinGroupRequest = message("JoinGroupRequest", api_key=ApiKey.JOIN_GROUP, versions="0-9", flexible="6+",
                           module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("session_timeout_ms", "int32", "0+"),
    F("rebalance_timeout_ms", "int32", "1+", default=-1),
    F("member_id", "string", "0+"),
    F("group_instance_id", "string", "5+", nullable="5+", default=None),
    F("protocol_type", "string", "0+"),
    F("protocols", "[]JoinGroupRequestProtocol", "0+", fields=[
        F("name", "string", "0+"),
        F("metadata", "bytes", "0+"),
    ]),
    F("reason", "string", "8+", nullable="8+", default=None),
])

JoinGroupResponse = message("JoinGroupResponse", api_key=ApiKey.JOIN_GROUP, versions="0-9", flexible="6+",
                            module=__name__, fields=[
    F("throttle_time_ms", "int32", "2+"),
    F("error_code", "int16", "0+"),
    F("generation_id", "int32", "0+", default=-1),
    F("protocol_type", "string", "7+", nullable="7+", default=None),
    F("protocol_name", "string", "0+", nullable="7+"),
    F("leader", "string", "0+"),
    F("skip_assignment", "bool", "9+", default=False),
    F("member_id", "string", "0+"),
    F("members", "[]JoinGroupResponseMember", "0+", fields=[
        F("member_id", "string", "0+"),
        F("group_instance_id", "string", "5+", nullable="5+", default=None),
        F("metadata", "bytes", "0+"),
    ]),
])

# v1 throttle_time_ms; v3 group_instance_id; v4 flexible; v5 protocol_type and protocol_name
SyncGroupRequest = message("SyncGroupRequest", api_key=ApiKey.SYNC_GROUP, versions="0-5", flexible="4+",
                           module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("generation_id", "int32", "0+"),
    F("member_id", "string", "0+"),
    F("group_instance_id", "string", "3+", nullable="3+", default=None),
    F("protocol_type", "string", "5+", nullable="5+", default=None),
    F("protocol_name", "string", "5+", nullable="5+", default=None),
    F("assignments", "[]SyncGroupRequestAssignment", "0+", fields=[
        F("member_id", "string", "0+"),
        F("assignment", "bytes", "0+"),
    ]),
])

SyncGroupResponse = message("SyncGroupResponse", api_key=ApiKey.SYNC_GROUP, versions="0-5", flexible="4+",
                            module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0+"),
    F("protocol_type", "string", "5+", nullable="5+", default=None),
    F("protocol_name", "string", "5+", nullable="5+", default=None),
    F("assignment", "bytes", "0+"),
])

HeartbeatRequest = message("HeartbeatRequest", api_key=ApiKey.HEARTBEAT, versions="0-4", flexible="4+",
                           module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("generation_id", "int32", "0+"),
    F("member_id", "string", "0+"),
    F("group_instance_id", "string", "3+", nullable="3+", default=None),
])

HeartbeatResponse = message("HeartbeatResponse", api_key=ApiKey.HEARTBEAT, versions="0-4", flexible="4+",
                            module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0+"),
])

# v3 batches members (member_id moves into members); v4 flexible; v5 each member's reason
LeaveGroupRequest = message("LeaveGroupRequest", api_key=ApiKey.LEAVE_GROUP, versions="0-5", flexible="4+",
                            module=__name__, fields=[
    F("group_id", "string", "0+"),
    F("member_id", "string", "0-2"),
    F("members", "[]MemberIdentity", "3+", fields=[
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+", default=None),
        F("reason", "string", "5+", nullable="5+", default=None),
    ]),
])

LeaveGroupResponse = message("LeaveGroupResponse", api_key=ApiKey.LEAVE_GROUP, versions="0-5", flexible="4+",
                             module=__name__, fields=[
    F("throttle_time_ms", "int32", "1+"),
    F("error_code", "int16", "0+"),
    F("members", "[]MemberResponse", "3+", fields=[
        F("member_id", "string", "3+"),
        F("group_instance_id", "string", "3+", nullable="3+"),
        F("error_code", "int16", "3+"),
    ]),
])
