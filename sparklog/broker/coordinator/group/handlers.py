"""The group apis, one function per api as in handlers.py: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups, ListGroups, DeleteGroups, OffsetDelete (the consumer protocol's are in consumer_handlers.py). They translate between the wire messages and the broker's
`GroupCoordinator` (`state.groups`); placement and offsets go through `state.offsets` (offset_store.py).

Rule 1: a request for a group this broker does not coordinate gets NOT_COORDINATOR (the client asks
FindCoordinator again), COORDINATOR_LOAD_IN_PROGRESS while it loads the group's offsets partition,
COORDINATOR_NOT_AVAILABLE while there is no offsets topic (offset_store.py's `status`); an invalid group id
gets INVALID_GROUP_ID. DescribeGroups of a consumer-protocol group (KIP-848) gets GROUP_ID_NOT_FOUND, as in
Kafka: ConsumerGroupDescribe describes it.
Rule 2: JoinGroup and SyncGroup may wait for the rest of the group: they return a coroutine (handlers.py's
Rule 1), bounded by the group's rebalance timeout.
Rule 4 (the flexible versions, as Kafka's KafkaApis answers them): JoinGroup v7+ answers the group's protocol
type, and a protocol name that is null rather than empty; v9+ may answer skip_assignment (group.py's Rule 2).
SyncGroup v5+ answers the group's protocol type and name, and refuses a request naming others
(INCONSISTENT_GROUP_PROTOCOL, group.py's Rule 3). JoinGroup v8's and LeaveGroup v5's reasons are logged.
ListGroups v5 filters by type ("classic", "consumer", case-insensitive as Kafka) and answers each group's.
Rule 3 (OffsetDelete, Kafka's `GroupCoordinator.handleDeleteOffsets`): a group is known by its members or by
its committed offsets (else GROUP_ID_NOT_FOUND, top-level, and no partitions listed). A partition the cluster
lacks is UNKNOWN_TOPIC_OR_PARTITION and left alone. An Empty group loses the named offsets; a consumer-protocol
group with members keeps those of the topics its members subscribe to (GROUP_SUBSCRIBED_TO_TOPIC: every topic,
while their subscriptions cannot be read) and loses the others; a group of another protocol with members is
NON_EMPTY_GROUP. A partition without a committed offset is deleted without error, as in Kafka. A consumer group
of KIP-848's protocol keeps the offsets of the topics its members subscribe to (by name or regex).
"""

from __future__ import annotations

import logging

from sparklog.broker.coordinator.group.coordinator import CONSUMER_GROUP_TYPE
from sparklog.broker.coordinator.group.group import GroupState, JoinRequest
from sparklog.broker.coordinator.group.offset_store import OffsetStoreError
from sparklog.coordination import offsets as offset_registry
from sparklog.coordination import paths as zk_paths
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.consumer_protocol import CONSUMER_PROTOCOL_TYPE, MalformedConsumerProtocol, decode_subscription
from sparklog.protocol.group_admin import (DeletableGroupResult, DeleteGroupsResponse, DescribedGroup,
                                           DescribedGroupMember, DescribeGroupsResponse, ListedGroup,
                                           ListGroupsResponse)
from sparklog.protocol.groups import HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse
from sparklog.protocol.offset_delete import (OffsetDeleteResponse, OffsetDeleteResponsePartition,
                                             OffsetDeleteResponseTopic)

log = logging.getLogger(__name__)

NONE = 0
NOT_COORDINATOR = errors.NotCoordinatorError.errno
INVALID_GROUP_ID = errors.InvalidGroupIdError.errno
COORDINATOR_NOT_AVAILABLE = errors.CoordinatorNotAvailableError.errno
NON_EMPTY_GROUP = errors.NonEmptyGroupError.errno
GROUP_ID_NOT_FOUND = errors.GroupIdNotFoundError.errno
GROUP_SUBSCRIBED_TO_TOPIC = errors.GroupSubscribedToTopicError.errno
UNKNOWN_TOPIC_OR_PARTITION = errors.UnknownTopicOrPartitionError.errno
DEAD = "Dead"  # DescribeGroups' state of a group the coordinator does not know
CLASSIC_GROUP_TYPE = "classic"  # ListGroups v5's type of a JoinGroup/SyncGroup group (and one of offsets only)
NULLABLE_PROTOCOL_NAME_VERSION = 7  # JoinGroup: null, not "", when there is no protocol


def group_error(state, group_id: str) -> int:
    """Rule 1's checks, shared with OffsetCommit."""
    try:
        zk_paths.group(group_id)
    except ValueError:
        return INVALID_GROUP_ID
    return state.offsets.status(group_id)


def handle_join_group(request, state):
    body = request.body
    code = group_error(state, body.group_id)
    if code != NONE:
        return _join_response(code, body.member_id)
    if body.reason:
        log.info("member %s of group %s joins: %s", body.member_id or "(new)", body.group_id, body.reason)
    join = JoinRequest(
        member_id=body.member_id, instance_id=body.group_instance_id, client_id=request.header.client_id or "",
        client_host=request.client_host, session_timeout_ms=body.session_timeout_ms,
        rebalance_timeout_ms=body.session_timeout_ms if body.rebalance_timeout_ms < 0 else body.rebalance_timeout_ms,
        protocol_type=body.protocol_type, protocols=tuple((p.name, p.metadata) for p in body.protocols),
        api_version=request.header.api_version)
    return _join(state, body.group_id, join)


async def _join(state, group_id: str, join: JoinRequest) -> JoinGroupResponse:
    """Rule 4."""
    result = await state.groups.join(group_id, join)
    members = [JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
               for m, i, meta in result.members]
    return JoinGroupResponse(throttle_time_ms=0, error_code=result.error, generation_id=result.generation,
                             protocol_type=result.protocol_type,
                             protocol_name=_protocol_name(result.protocol, join.api_version), leader=result.leader,
                             skip_assignment=result.skip_assignment, member_id=result.member_id, members=members)


def _protocol_name(protocol: str | None, version: int) -> str | None:
    return protocol or (None if version >= NULLABLE_PROTOCOL_NAME_VERSION else "")


def _join_response(code: int, member_id: str) -> JoinGroupResponse:
    return JoinGroupResponse(throttle_time_ms=0, error_code=code, generation_id=-1, protocol_name="", leader="",
                             member_id=member_id, members=[])


def handle_sync_group(request, state):
    body = request.body
    code = group_error(state, body.group_id)
    if code != NONE:
        return SyncGroupResponse(throttle_time_ms=0, error_code=code, assignment=b"")
    assignments = {a.member_id: a.assignment for a in body.assignments}
    return _sync(state, body, assignments)


async def _sync(state, body, assignments) -> SyncGroupResponse:
    """Rule 4: v5's protocol type and name, checked by the group and answered with its own."""
    result = await state.groups.sync(body.group_id, body.member_id, body.group_instance_id, body.generation_id,
                                     assignments, (body.protocol_type, body.protocol_name))
    return SyncGroupResponse(throttle_time_ms=0, error_code=result.error, protocol_type=result.protocol_type,
                             protocol_name=result.protocol_name, assignment=result.assignment)


def handle_heartbeat(request, state) -> HeartbeatResponse:
    body = request.body
    code = group_error(state, body.group_id)
    if code == NONE:
        code = state.groups.heartbeat(body.group_id, body.member_id, body.group_instance_id, body.generation_id)
    return HeartbeatResponse(throttle_time_ms=0, error_code=code)


def handle_leave_group(request, state) -> LeaveGroupResponse:
    """v0-2 name one member; v3 a batch, each answered on its own (the top-level code is then NONE)."""
    body = request.body
    code = group_error(state, body.group_id)
    if code != NONE:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[])
    if request.header.api_version < 3:
        code = state.groups.leave(body.group_id, body.member_id, None)
        return LeaveGroupResponse(throttle_time_ms=0, error_code=code, members=[])
    for m in body.members:
        if m.reason:  # v5
            log.info("member %s of group %s leaves: %s", m.member_id or m.group_instance_id, body.group_id, m.reason)
    members = [LeaveGroupResponse.MemberResponse(
        member_id=m.member_id, group_instance_id=m.group_instance_id,
        error_code=state.groups.leave(body.group_id, m.member_id, m.group_instance_id)) for m in body.members]
    return LeaveGroupResponse(throttle_time_ms=0, error_code=NONE, members=members)


def handle_describe_groups(request, state) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(throttle_time_ms=0, groups=[_describe(state, g) for g in request.body.groups])


def _describe(state, group_id: str) -> DescribedGroup:
    code = group_error(state, group_id)
    if code == NONE and state.groups.consumer_groups.describe(group_id) is not None:  # Kafka 4's answer
        return DescribedGroup(error_code=GROUP_ID_NOT_FOUND, group_id=group_id, group_state=DEAD, protocol_type="",
                              protocol_data="", members=[])
    found = state.groups.describe(group_id) if code == NONE else None
    if found is None:  # Kafka: a group known only by its committed offsets is Empty
        known = code == NONE and group_id in state.offsets.groups_with_offsets(group_id)
        return DescribedGroup(error_code=code, group_id=group_id,
                              group_state=GroupState.EMPTY.value if known else DEAD, protocol_type="",
                              protocol_data="", members=[])
    members = [DescribedGroupMember(member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                                    client_host=m.client_host, member_metadata=m.metadata,
                                    member_assignment=m.assignment) for m in found.members]
    return DescribedGroup(error_code=NONE, group_id=group_id, group_state=found.state,
                          protocol_type=found.protocol_type, protocol_data=found.protocol, members=members)


def handle_list_groups(request, state) -> ListGroupsResponse:
    """The groups this broker coordinates (a client asks every broker, as Kafka's admin clients do): those
    with members and those known only by their committed offsets (Kafka lists these too, as Empty); v4
    filters by state, by Kafka's state names; v5 by type (Rule 4)."""
    listed = {group_id: (protocol_type, group_state) for group_id, protocol_type, group_state in state.groups.list()}
    for group_id in state.offsets.groups_with_offsets():
        listed.setdefault(group_id, ("", GroupState.EMPTY.value))
    wanted = set(request.body.states_filter or ())  # v4: only groups in these states (none: every group)
    types = {t.lower() for t in request.body.types_filter or ()}  # v5: only groups of these types
    consumer = {g for g, _ in state.groups.consumer_groups.list()}
    kinds = {g: CONSUMER_GROUP_TYPE if g in consumer else CLASSIC_GROUP_TYPE for g in listed}
    groups = [ListedGroup(group_id=g, protocol_type=t, group_state=s, group_type=kinds[g])
              for g, (t, s) in sorted(listed.items())
              if (not wanted or s in wanted) and (not types or kinds[g] in types)]
    return ListGroupsResponse(throttle_time_ms=0, error_code=NONE, groups=groups)


def handle_delete_groups(request, state):
    return _delete_groups(request.body.groups_names, state)


async def _delete_groups(names, state) -> DeleteGroupsResponse:
    results = []
    for name in names:
        results.append(DeletableGroupResult(group_id=name, error_code=await _delete_one(state, name)))
    return DeleteGroupsResponse(throttle_time_ms=0, results=results)


async def _delete_one(state, group_id: str) -> int:
    """NON_EMPTY_GROUP while members are in it; else its offsets go (tombstones), and GROUP_ID_NOT_FOUND if
    it had neither a group nor offsets."""
    code = group_error(state, group_id)
    if code != NONE:
        return code
    known = state.groups.describe(group_id) is not None
    code = state.groups.delete(group_id)
    if code != NONE:
        return code
    try:
        had_offsets = await state.offsets.delete(group_id)
    except OffsetStoreError as exc:
        return exc.code
    except offset_registry.GroupNotEmpty:
        return NON_EMPTY_GROUP  # a ZooKeeper group of the same name has consumers
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: retriable for the client
        log.warning("deleting the offsets of group %s failed: %s", group_id, exc)
        return COORDINATOR_NOT_AVAILABLE
    return NONE if known or had_offsets else GROUP_ID_NOT_FOUND


def handle_offset_delete(request, state):
    """Rule 3; the group's checks first (Rule 1), then the partitions."""
    body = request.body
    code = group_error(state, body.group_id)
    if code != NONE:
        return OffsetDeleteResponse(error_code=code, throttle_time_ms=0, topics=[])
    snapshot = state.partitions.snapshot
    codes: dict[tuple[str, int], int] = {}
    for topic in body.topics:
        meta = snapshot.topics.get(topic.name)
        for part in topic.partitions:
            known = meta is not None and part.partition_index in meta.partitions
            codes[(topic.name, part.partition_index)] = NONE if known else UNKNOWN_TOPIC_OR_PARTITION
    return _offset_delete(state, body, codes)


async def _offset_delete(state, body, codes: dict[tuple[str, int], int]) -> OffsetDeleteResponse:
    group_id = body.group_id
    found = state.groups.describe(group_id)
    members = found is not None and found.state != GroupState.EMPTY.value and bool(found.members)
    consumer = state.groups.consumer_groups.describe(group_id)  # KIP-848: its members' topics are kept
    if found is None and consumer is None and group_id not in state.offsets.groups_with_offsets(group_id):
        return OffsetDeleteResponse(error_code=GROUP_ID_NOT_FOUND, throttle_time_ms=0, topics=[])
    if consumer is not None:
        subscribed_now = consumer.subscribed_topics()
        for tp, code in codes.items():
            if code == NONE and tp[0] in subscribed_now:
                codes[tp] = GROUP_SUBSCRIBED_TO_TOPIC
    elif members:
        if found.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return OffsetDeleteResponse(error_code=NON_EMPTY_GROUP, throttle_time_ms=0, topics=[])
        subscribed = subscribed_topics(found)
        for tp, code in codes.items():
            if code == NONE and (subscribed is None or tp[0] in subscribed):
                codes[tp] = GROUP_SUBSCRIBED_TO_TOPIC
    doomed = [tp for tp, code in codes.items() if code == NONE]
    if doomed:
        try:
            code = await state.offsets.delete_offsets(group_id, doomed)
        except OffsetStoreError as exc:
            code = exc.code
        if code != NONE:  # the tombstones were not written: the group's error (Kafka's cleanupGroupMetadata)
            return OffsetDeleteResponse(error_code=code, throttle_time_ms=0, topics=[])
    by_topic: dict[str, list] = {}
    for (topic, partition), code in codes.items():
        by_topic.setdefault(topic, []).append(OffsetDeleteResponsePartition(partition_index=partition,
                                                                            error_code=code))
    topics = [OffsetDeleteResponseTopic(name=t, partitions=ps) for t, ps in by_topic.items()]
    return OffsetDeleteResponse(error_code=NONE, throttle_time_ms=0, topics=topics)


def subscribed_topics(group) -> set[str] | None:
    """The topics a consumer-protocol group's members subscribe to, from their metadata for the group's
    protocol; None when any cannot be read (Kafka's `GroupMetadata.computeSubscribedTopics`: then every topic
    counts as subscribed, to be safe)."""
    if not group.protocol:
        return None
    topics: set[str] = set()
    for member in group.members:
        try:
            topics.update(decode_subscription(member.metadata).topics)
        except MalformedConsumerProtocol:
            return None
    return topics


HANDLERS = {
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
}
