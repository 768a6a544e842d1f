"""The consumer group protocol's apis (KIP-848), one function per api as in handlers.py: ConsumerGroupHeartbeat
and ConsumerGroupDescribe. They translate between the wire (topic ids) and the `ConsumerGroups` of the group
coordinator (`state.groups.consumer_groups`, in topic names), with the cluster's topics from the current
`MetadataSnapshot`.

Rule 1: the group checks of the classic apis first (handlers.py Rule 1: NOT_COORDINATOR, loading,
INVALID_GROUP_ID for an empty or illegal group id).
Rule 2 (consumer_coordinator Rule 2): a heartbeat for a classic group with members gets GROUP_ID_NOT_FOUND;
an empty classic group is converted (forgotten: its offsets stay). ConsumerGroupDescribe of a group that is
not a consumer group here gets GROUP_ID_NOT_FOUND, as in Kafka.
Rule 3: owned partitions of a topic id the cluster does not know (a deleted topic) are left out: nobody else
can be given them; an assignment names only topics the snapshot has.
Rule 4 (consumer_coordinator Rule 5): a heartbeat that changed its group is answered once the group's changed
records are on the in-sync replicas of `__consumer_offsets` (a coroutine, handlers.py's Rule 1); if they
are not, with the write's error instead.
"""

from __future__ import annotations

from typing import Mapping

from sparklog.broker.coordinator.group.consumer_group import ConsumerGroup, HeartbeatRequest, HeartbeatResult
from sparklog.broker.coordinator.group.handlers import group_error
from sparklog.broker.handlers.metadata import wire_topic_id
from sparklog.coordination import topic_ids
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.consumer_group import (CONSUMER_MEMBER_TYPE, AssignedTopicPartitions, ConsumerGroupDescribeResponse,
                                              ConsumerGroupHeartbeatResponse, DescribedAssignment,
                                              DescribedConsumerGroup, DescribedConsumerGroupMember,
                                              DescribedTopicPartitions, HeartbeatAssignment)

NONE = 0
GROUP_ID_NOT_FOUND = errors.GroupIdNotFoundError.errno

TopicPartition = tuple[str, int]


def _topics(snapshot) -> dict[str, int]:
    """name -> partition count of every topic the cluster has."""
    return {name: len(meta.partitions) for name, meta in snapshot.topics.items()}


def _ids(snapshot) -> tuple[dict[str, object], dict[object, str]]:
    """Topic ids by name and names by id (a topic without an id, created before KIP-516, has the zero id)."""
    by_name = {name: wire_topic_id(meta.topic_id) for name, meta in snapshot.topics.items()}
    return by_name, {topic_id: name for name, topic_id in by_name.items() if topic_id != topic_ids.ZERO}


def handle_consumer_group_heartbeat(request, state) -> ConsumerGroupHeartbeatResponse:
    body = request.body
    code = group_error(state, body.group_id)
    if code == NONE and state.groups.has_classic_members(body.group_id):
        return _heartbeat_response(HeartbeatResult(GROUP_ID_NOT_FOUND, error_message=f"group {body.group_id} is "
                                                   f"not a consumer group"), {})
    if code != NONE:
        return _heartbeat_response(HeartbeatResult(code), {})
    snapshot = state.partitions.snapshot
    by_name, by_id = _ids(snapshot)
    owned = None if body.topic_partitions is None else frozenset(
        (by_id[t.topic_id], p) for t in body.topic_partitions if t.topic_id in by_id for p in t.partitions)
    req = HeartbeatRequest(
        member_id=body.member_id, member_epoch=body.member_epoch, instance_id=body.instance_id,
        rack_id=body.rack_id, rebalance_timeout_ms=body.rebalance_timeout_ms,
        subscribed_topic_names=None if body.subscribed_topic_names is None else tuple(body.subscribed_topic_names),
        subscribed_topic_regex=body.subscribed_topic_regex, server_assignor=body.server_assignor, owned=owned,
        client_id=request.header.client_id or "", client_host=request.client_host)
    state.groups.forget_empty_classic(body.group_id)  # Rule 2: an empty classic group converts
    consumer_groups = state.groups.consumer_groups
    result = consumer_groups.heartbeat(body.group_id, req, _topics(snapshot))
    write = consumer_groups.write_changes(body.group_id)
    if write is None:
        return _heartbeat_response(result, by_name)
    return _written(write, result, by_name)


async def _written(write, result: HeartbeatResult, by_name: Mapping[str, object]) -> ConsumerGroupHeartbeatResponse:
    """Rule 4."""
    code = await write
    return _heartbeat_response(result if code == NONE else HeartbeatResult(code), by_name)


def _heartbeat_response(result: HeartbeatResult, by_name: Mapping[str, object]) -> ConsumerGroupHeartbeatResponse:
    assignment = None
    if result.assignment is not None:
        assignment = HeartbeatAssignment(topic_partitions=[
            AssignedTopicPartitions(topic_id=by_name[topic], partitions=partitions)
            for topic, partitions in _grouped(result.assignment, by_name)])
    return ConsumerGroupHeartbeatResponse(
        throttle_time_ms=0, error_code=result.error, error_message=result.error_message, member_id=result.member_id,
        member_epoch=result.member_epoch, heartbeat_interval_ms=result.heartbeat_interval_ms, assignment=assignment)


def _grouped(partitions: frozenset[TopicPartition], known: Mapping[str, object]) -> list[tuple[str, list[int]]]:
    """Rule 3: (topic, sorted partitions) of the topics the snapshot knows."""
    by_topic: dict[str, list[int]] = {}
    for topic, index in sorted(partitions):
        if topic in known:
            by_topic.setdefault(topic, []).append(index)
    return list(by_topic.items())


def handle_consumer_group_describe(request, state) -> ConsumerGroupDescribeResponse:
    snapshot = state.partitions.snapshot
    by_name, _ = _ids(snapshot)
    return ConsumerGroupDescribeResponse(throttle_time_ms=0, groups=[
        _describe(state, group_id, by_name) for group_id in request.body.group_ids])


def _describe(state, group_id: str, by_name: Mapping[str, object]) -> DescribedConsumerGroup:
    code = group_error(state, group_id)
    group = state.groups.consumer_groups.describe(group_id) if code == NONE else None
    if group is None:
        code = code or GROUP_ID_NOT_FOUND
        return DescribedConsumerGroup(error_code=code, error_message=None if code != GROUP_ID_NOT_FOUND else (
            f"group {group_id} is not a consumer group"), group_id=group_id, group_state="Dead", group_epoch=-1,
            assignment_epoch=-1, assignor_name="")
    return DescribedConsumerGroup(
        error_code=NONE, group_id=group_id, group_state=group.state.value, group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch, assignor_name=group.assignor,
        members=[_member(group, m, by_name) for m in group.members.values()])


def _member(group: ConsumerGroup, member, by_name) -> DescribedConsumerGroupMember:
    return DescribedConsumerGroupMember(
        member_id=member.member_id, instance_id=member.instance_id, rack_id=member.rack_id,
        member_epoch=member.epoch, client_id=member.client_id, client_host=member.client_host,
        subscribed_topic_names=list(member.subscribed_topic_names),
        subscribed_topic_regex=member.subscribed_topic_regex,
        assignment=_described(member.assigned, by_name),
        target_assignment=_described(group.target.get(member.member_id, frozenset()), by_name),
        member_type=CONSUMER_MEMBER_TYPE)  # v1: every member here speaks the consumer protocol


def _described(partitions: frozenset[TopicPartition], by_name: Mapping[str, object]) -> DescribedAssignment:
    return DescribedAssignment(topic_partitions=[
        DescribedTopicPartitions(topic_id=by_name[topic], topic_name=topic, partitions=indexes)
        for topic, indexes in _grouped(partitions, by_name)])


HANDLERS = {
    ApiKey.CONSUMER_GROUP_HEARTBEAT: handle_consumer_group_heartbeat,
    ApiKey.CONSUMER_GROUP_DESCRIBE: handle_consumer_group_describe,
}
