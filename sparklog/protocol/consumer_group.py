"""ConsumerGroupHeartbeat (key 68), versions 0-1, and ConsumerGroupDescribe (key 69), versions 0-1, all flexible
(KIP-848, the consumer group protocol). Transcribed from Kafka's ConsumerGroupHeartbeatRequest.json,
ConsumerGroupHeartbeatResponse.json, ConsumerGroupDescribeRequest.json and ConsumerGroupDescribeResponse.json.

ConsumerGroupHeartbeat is the whole membership protocol of a consumer group: a member joins with epoch 0,
heartbeats with its current epoch and the partitions it owns (topic ids), leaves with epoch -1 (-2: a static
member that will come back). Every "null" field means "unchanged since the last heartbeat". By version: v1
SubscribedTopicRegex (librdkafka sends v1 only). The response's ``assignment`` is a nullable single struct:
null when unchanged, else every partition the member may own now.

ConsumerGroupDescribe v1 (KIP-1099) adds each member's MemberType: -1 unknown, 0 a classic member (a member of
the classic protocol in a consumer group, online migration), 1 a consumer member; the request is unchanged.
"""

from __future__ import annotations

from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.schema import F, message

__all__ = ["ConsumerGroupHeartbeatRequest", "ConsumerGroupHeartbeatResponse", "ConsumerGroupDescribeRequest",
           "ConsumerGroupDescribeResponse", "HeartbeatTopicPartitions", "HeartbeatAssignment", "AssignedTopicPartitions",
           "DescribedConsumerGroup", "DescribedConsumerGroupMember", "DescribedAssignment",
           "DescribedTopicPartitions", "JOIN_EPOCH", "LEAVE_EPOCH", "STATIC_LEAVE_EPOCH", "UNKNOWN_MEMBER_TYPE",
           "CLASSIC_MEMBER_TYPE", "CONSUMER_MEMBER_TYPE"]

JOIN_EPOCH = 0  # a member's first heartbeat
LEAVE_EPOCH = -1  # the member leaves the group
STATIC_LEAVE_EPOCH = -2  # a static member leaves and will rejoin under its instance id
UNKNOWN_MEMBER_TYPE, CLASSIC_MEMBER_TYPE, CONSUMER_MEMBER_TYPE = -1, 0, 1  # ConsumerGroupDescribe v1's MemberType

ConsumerGroupHeartbeatRequest = message(
    "ConsumerGroupHeartbeatRequest", api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT, versions="0-1", flexible="0+",
    module=__name__, fields=[
        F("group_id", "string", "0+"),
        F("member_id", "string", "0+"),
        F("member_epoch", "int32", "0+"),
        F("instance_id", "string", "0+", nullable="0+", default=None),
        F("rack_id", "string", "0+", nullable="0+", default=None),
        F("rebalance_timeout_ms", "int32", "0+", default=-1),
        F("subscribed_topic_names", "[]string", "0+", nullable="0+", default=None),
        F("subscribed_topic_regex", "string", "1+", nullable="1+", default=None),
        F("server_assignor", "string", "0+", nullable="0+", default=None),
        F("topic_partitions", "[]TopicPartitions", "0+", nullable="0+", default=None, fields=[
            F("topic_id", "uuid", "0+"),
            F("partitions", "[]int32", "0+"),
        ]),
    ])

ConsumerGroupHeartbeatResponse = message(
    "ConsumerGroupHeartbeatResponse", api_key=ApiKey.CONSUMER_GROUP_HEARTBEAT, versions="0-1", flexible="0+",
    module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("error_code", "int16", "0+"),
        F("error_message", "string", "0+", nullable="0+", default=None),
        F("member_id", "string", "0+", nullable="0+", default=None),
        F("member_epoch", "int32", "0+"),
        F("heartbeat_interval_ms", "int32", "0+"),
        F("assignment", "Assignment", "0+", nullable="0+", fields=[
            F("topic_partitions", "[]TopicPartitions", "0+", fields=[
                F("topic_id", "uuid", "0+"),
                F("partitions", "[]int32", "0+"),
            ]),
        ]),
    ])

ConsumerGroupDescribeRequest = message(
    "ConsumerGroupDescribeRequest", api_key=ApiKey.CONSUMER_GROUP_DESCRIBE, versions="0-1", flexible="0+",
    module=__name__, fields=[
        F("group_ids", "[]string", "0+"),
        F("include_authorized_operations", "bool", "0+"),
    ])



def _assignment() -> list[F]:
    """The fields of a described Assignment (fresh objects per use: a field holds its generated class)."""
    return [F("topic_partitions", "[]TopicPartitions", "0+", fields=[
        F("topic_id", "uuid", "0+"),
        F("topic_name", "string", "0+"),
        F("partitions", "[]int32", "0+"),
    ])]


ConsumerGroupDescribeResponse = message(
    "ConsumerGroupDescribeResponse", api_key=ApiKey.CONSUMER_GROUP_DESCRIBE, versions="0-1", flexible="0+",
    module=__name__, fields=[
        F("throttle_time_ms", "int32", "0+"),
        F("groups", "[]DescribedGroup", "0+", fields=[
            F("error_code", "int16", "0+"),
            F("error_message", "string", "0+", nullable="0+", default=None),
            F("group_id", "string", "0+"),
            F("group_state", "string", "0+"),
            F("group_epoch", "int32", "0+"),
            F("assignment_epoch", "int32", "0+"),
            F("assignor_name", "string", "0+"),
            F("members", "[]Member", "0+", fields=[
                F("member_id", "string", "0+"),
                F("instance_id", "string", "0+", nullable="0+", default=None),
                F("rack_id", "string", "0+", nullable="0+", default=None),
                F("member_epoch", "int32", "0+"),
                F("client_id", "string", "0+"),
                F("client_host", "string", "0+"),
                F("subscribed_topic_names", "[]string", "0+"),
                F("subscribed_topic_regex", "string", "0+", nullable="0+", default=None),
                F("assignment", "Assignment", "0+", fields=_assignment()),
                F("target_assignment", "Assignment", "0+", fields=_assignment()),
                F("member_type", "int8", "1+", default=UNKNOWN_MEMBER_TYPE),
            ]),
            F("authorized_operations", "int32", "0+", default=-2147483648),
        ]),
    ])

HeartbeatTopicPartitions = ConsumerGroupHeartbeatRequest.TopicPartitions
HeartbeatAssignment = ConsumerGroupHeartbeatResponse.Assignment
AssignedTopicPartitions = HeartbeatAssignment.TopicPartitions
DescribedConsumerGroup = ConsumerGroupDescribeResponse.DescribedGroup
DescribedConsumerGroupMember = DescribedConsumerGroup.Member
DescribedAssignment = DescribedConsumerGroupMember.Assignment
DescribedTopicPartitions = DescribedAssignment.TopicPartitions
