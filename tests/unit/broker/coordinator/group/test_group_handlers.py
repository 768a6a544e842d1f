"""The group apis through their handlers and the asyncio coordinator, on a real event loop and clock with
short timeouts; offsets go to an in-memory stand-in of the offset store (the `__consumer_offsets` one is
exercised by test_offset_store.py and the integration tests)."""

from __future__ import annotations

import asyncio

import pytest

from sparklog.broker import handlers
from sparklog.broker.network.dispatch import Dispatcher
from sparklog.broker.config import BrokerConfig
from sparklog.broker.coordinator.group.config import GroupConfig
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC, TopicOffsetStore, java_string_hash, offsets_partition
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import errors
from sparklog.protocol.find_coordinator import FindCoordinatorRequest
from sparklog.protocol.group_admin import DeleteGroupsRequest, DescribeGroupsRequest, ListGroupsRequest
from sparklog.protocol.groups import HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest
from sparklog.protocol.headers import RequestHeader
from sparklog.protocol.consumer_protocol import ConsumerProtocolSubscription, encode_subscription
from sparklog.protocol.offset_commit import OffsetCommitRequest
from sparklog.protocol.offset_delete import OffsetDeleteRequest
from sparklog.protocol.registry import Request, encode_request

ME, OTHER = 1, 2
DELAY_MS, SESSION_MS = 50, 300


class MemoryOffsets:
    """The offset store's interface: groups placed over the two brokers by their offsets partition, offsets
    kept in a dict."""

    def __init__(self):
        self.committed = {}

    def coordinator_for(self, group, snapshot):
        return ME if offsets_partition(group, 50) % 2 == 0 else OTHER

    def status(self, group):
        return 0 if self.coordinator_for(group, None) == ME else errors.NotCoordinatorError.errno

    async def commit(self, group, offsets):
        self.committed.update({(group, *k): v.offset for k, v in offsets.items()})
        return dict.fromkeys(offsets, 0)

    async def fetch(self, group, partitions):
        from sparklog.coordination.offsets import OffsetAndMetadata

        stored = {k[1:]: OffsetAndMetadata(v, "") for k, v in self.committed.items() if k[0] == group}
        return stored if partitions is None else {tp: stored[tp] for tp in partitions if tp in stored}

    def groups_with_offsets(self, group=None):
        return sorted({k[0] for k in self.committed if group in (None, k[0])})

    async def delete(self, group):
        had = any(k[0] == group for k in self.committed)
        self.committed = {k: v for k, v in self.committed.items() if k[0] != group}
        return had

    async def delete_offsets(self, group, partitions):
        for tp in partitions:
            self.committed.pop((group, *tp), None)
        return 0


class Partitions:
    snapshot = MetadataSnapshot({OFFSETS_TOPIC: TopicMeta(OFFSETS_TOPIC, {}),
                                 "t": TopicMeta("t", {0: PartitionMeta(0, ME, 0, (ME,), (ME,))}),
                                 "u": TopicMeta("u", {0: PartitionMeta(0, ME, 0, (ME,), (ME,))})},
                                {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "h2", 9093)}, {})


def group_on(broker: int, prefix: str) -> str:
    """A group id the offset store places on `broker` (of the two live ones)."""
    return next(g for g in (f"{prefix}{i}" for i in range(100)) if offsets_partition(g, 50) % 2 == broker - 1)


@pytest.fixture
def state():
    config = BrokerConfig.from_properties({
        "broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "unused:1",
        "group.initial.rebalance.delay.ms": str(DELAY_MS), "group.min.session.timeout.ms": "100"})
    return handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=None,
                                      partitions=Partitions(), offsets=MemoryOffsets())


def call(state, body, key, version, client="cli"):
    result = handlers.HANDLERS[key](Request(RequestHeader(key, version, 7, client), body), state)
    return result


async def join(state, group, member_id="", instance=None, session=SESSION_MS, metadata=b"m",
               protocol_type="consumer"):
    body = JoinGroupRequest(group_id=group, session_timeout_ms=session, rebalance_timeout_ms=1000,
                            member_id=member_id, group_instance_id=instance, protocol_type=protocol_type,
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=metadata)])
    result = call(state, body, 11, 5)
    return await result if asyncio.iscoroutine(result) else result


async def sync(state, group, generation, member_id, assignments=()):
    body = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id, assignments=[
        SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a) for m, a in assignments])
    return await call(state, body, 14, 3)


def commit(state, group, generation, member_id, partitions=(("t", 0),), version=7):
    topics = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=5, committed_metadata=""))
    body = OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=generation, member_id=member_id,
                               topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=parts)
                                       for t, parts in topics.items()])
    result = call(state, body, 8, version)
    return result


async def commit_code(state, group, generation, member_id, version=7):
    result = commit(state, group, generation, member_id, version=version)
    if asyncio.iscoroutine(result):
        result = await result
    return result.topics[0].partitions[0].error_code


async def two_member_group(state, group):
    first = await join(state, group)
    assert first.error_code == errors.MemberIdRequiredError.errno
    second = await join(state, group)
    a, b = await asyncio.gather(join(state, group, first.member_id), join(state, group, second.member_id))
    assert a.error_code == b.error_code == 0 and a.generation_id == b.generation_id == 1
    leader, follower = (a, b) if a.member_id == a.leader else (b, a)
    assert {m.member_id for m in leader.members} == {a.member_id, b.member_id} and follower.members == []
    follower_sync = asyncio.ensure_future(sync(state, group, 1, follower.member_id))
    await asyncio.sleep(0.01)
    assert not follower_sync.done()  # waits for the leader's assignment
    mine = await sync(state, group, 1, leader.member_id, [(leader.member_id, b"L"), (follower.member_id, b"F")])
    assert (mine.assignment, (await follower_sync).assignment) == (b"L", b"F")
    return leader.member_id, follower.member_id


def test_join_sync_heartbeat_commit_and_leave(state):
    group = group_on(ME, "g")

    async def scenario():
        leader, follower = await two_member_group(state, group)
        beat = call(state, HeartbeatRequest(group_id=group, generation_id=1, member_id=follower), 12, 3)
        assert beat.error_code == 0
        assert await commit_code(state, group, 0, follower) == errors.IllegalGenerationError.errno
        assert await commit_code(state, group, 1, "nobody") == errors.UnknownMemberIdError.errno
        assert await commit_code(state, group, -1, "") == errors.UnknownMemberIdError.errno  # members only
        assert await commit_code(state, group, 1, follower) == 0
        assert state.offsets.committed == {(group, "t", 0): 5}
        described = call(state, DescribeGroupsRequest(groups=[group]), 15, 4).groups[0]
        assert (described.group_state, described.protocol_data) == ("Stable", "range")
        assert {m.member_assignment for m in described.members} == {b"L", b"F"}
        assert call(state, ListGroupsRequest(), 16, 2).groups[0].group_id == group
        assert (await call(state, DeleteGroupsRequest(groups_names=[group]), 42, 1)).results[0].error_code == (
            errors.NonEmptyGroupError.errno)
        left = call(state, LeaveGroupRequest(group_id=group, member_id=follower), 13, 1)
        assert left.error_code == 0
        beat = call(state, HeartbeatRequest(group_id=group, generation_id=1, member_id=leader), 12, 3)
        assert beat.error_code == errors.RebalanceInProgressError.errno
        assert await commit_code(state, group, 1, leader) == 0  # preparing a rebalance: it still owns them

    asyncio.run(scenario())


def test_a_silent_member_expires_and_the_empty_group_is_forgotten(state):
    group = group_on(ME, "s")

    async def scenario():
        await two_member_group(state, group)
        await asyncio.sleep((SESSION_MS + 150) / 1000)  # nobody heartbeats: both expire
        assert group not in state.groups.groups
        assert await commit_code(state, group, -1, "") == 0  # member-less commits work again
        assert state.groups.statistics().waiting_requests == 0

    asyncio.run(scenario())


def test_a_commit_to_a_topic_or_partition_the_cluster_lacks_gets_unknown_topic_or_partition(state):
    """Kafka's KafkaApis answers such a partition UNKNOWN_TOPIC_OR_PARTITION (before asking the coordinator)
    and stores nothing for it; the request's other partitions are committed."""
    group = group_on(ME, "u")

    async def scenario():
        result = commit(state, group, -1, "", [("t", 0), ("t", 7), ("missing", 0)])
        result = await result if asyncio.iscoroutine(result) else result
        codes = {(t.name, p.partition_index): p.error_code for t in result.topics for p in t.partitions}
        unknown = errors.UnknownTopicOrPartitionError.errno
        assert codes == {("t", 0): 0, ("t", 7): unknown, ("missing", 0): unknown}
        assert state.offsets.committed == {(group, "t", 0): 5}
        only_missing = commit(state, group, -1, "", [("missing", 1)])
        only_missing = await only_missing if asyncio.iscoroutine(only_missing) else only_missing
        assert only_missing.topics[0].partitions[0].error_code == unknown
        assert state.offsets.committed == {(group, "t", 0): 5}

    asyncio.run(scenario())


def test_an_offset_fetch_of_what_the_cluster_lacks_is_no_offset_and_no_error_at_every_version(state):
    """Kafka answers OffsetFetch v1+ from the coordinator alone: a partition without an offset is -1 with no
    error, whatever the metadata says (only v0, read from ZooKeeper, checked it: UNKNOWN_TOPIC_OR_PARTITION);
    and it deletes a topic's offsets with the topic, so an offset stored before a topic (or partition) went
    away is not handed out while it is gone."""
    from sparklog.protocol.offset_fetch import OffsetFetchRequest

    group = group_on(ME, "f")
    state.offsets.committed = {(group, "t", 0): 5, (group, "t", 7): 3, (group, "gone", 0): 9}
    asked = [("t", [0, 7]), ("gone", [0]), ("missing", [1]), ("bad/name", [0])]

    async def answers(version, topics):
        result = call(state, OffsetFetchRequest(group_id=group, topics=topics), 9, version)
        result = await result if asyncio.iscoroutine(result) else result
        assert result.error_code == 0
        return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
                for t in result.topics for p in t.partitions}

    async def scenario():
        topics = [OffsetFetchRequest.OffsetFetchRequestTopic(name=n, partition_indexes=ps) for n, ps in asked]
        for version in range(1, 6):
            assert await answers(version, topics) == {("t", 0): (5, 0), ("t", 7): (-1, 0), ("gone", 0): (-1, 0),
                                                      ("missing", 1): (-1, 0), ("bad/name", 0): (-1, 0)}, version
        for version in range(2, 6):  # null topics: all the group's offsets, of what the cluster has
            assert await answers(version, None) == {("t", 0): (5, 0)}, version

    asyncio.run(scenario())


def test_groups_placed_on_another_broker_get_not_coordinator(state):
    group = group_on(OTHER, "o")
    found = call(state, FindCoordinatorRequest(key=group, key_type=0), 10, 2)
    assert (found.error_code, found.node_id, found.host, found.port) == (0, OTHER, "h2", 9093)
    mine = call(state, FindCoordinatorRequest(key=group_on(ME, "m"), key_type=0), 10, 2)
    assert mine.node_id == ME

    async def scenario():
        assert (await join(state, group)).error_code == errors.NotCoordinatorError.errno
        assert await commit_code(state, group, 3, "m") == errors.NotCoordinatorError.errno

    asyncio.run(scenario())


def test_session_timeout_outside_the_broker_bounds_is_refused(state):
    async def scenario():
        assert (await join(state, group_on(ME, "b"), session=50)).error_code == errors.InvalidSessionTimeoutError.errno

    asyncio.run(scenario())


def test_java_string_hash_and_kafka_partitioning():
    assert java_string_hash("") == 0 and java_string_hash("hello") == 99162322
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -2147483648  # Kafka's Utils.abs masks it to 0
    assert offsets_partition("polygenelubricants", 50) == 0
    assert offsets_partition("hello", 50) == 99162322 % 50


def test_a_group_known_only_by_its_offsets_is_listed_and_described_as_empty(state):
    group = group_on(ME, "offsets-only")

    async def scenario():
        assert await commit_code(state, group, -1, "") == 0  # member-less: no group in the coordinator
        assert group not in state.groups.groups
        listed = call(state, ListGroupsRequest(), 16, 2).groups
        assert [(g.group_id, g.protocol_type) for g in listed] == [(group, "")]
        described = call(state, DescribeGroupsRequest(groups=[group, group_on(ME, "never")]), 15, 4).groups
        assert [(d.error_code, d.group_state) for d in described] == [(0, "Empty"), (0, "Dead")]

    asyncio.run(scenario())


def test_list_groups_v4_reports_each_groups_state_and_filters_by_state(state):
    """confluent-kafka's list_consumer_groups(states={STABLE}) listed every group, each in state UNKNOWN:
    ListGroups stopped at v2, without v4's states filter and group_state (KIP-518)."""
    stable, empty = group_on(ME, "stable"), group_on(ME, "empty")

    async def scenario():
        await two_member_group(state, stable)
        assert await commit_code(state, empty, -1, "") == 0  # known only by its offsets: Empty, as in Kafka

        def listed(states):
            response = call(state, ListGroupsRequest(states_filter=states), 16, 4)
            return [(g.group_id, g.group_state) for g in response.groups]

        assert listed([]) == sorted([(stable, "Stable"), (empty, "Empty")])
        assert listed(["Stable"]) == [(stable, "Stable")]
        assert listed(["Empty", "Dead"]) == [(empty, "Empty")]
        assert [g.group_id for g in call(state, ListGroupsRequest(), 16, 3).groups] == sorted([stable, empty])

    asyncio.run(scenario())


def test_find_coordinator_answers_not_available_while_the_offsets_topic_cannot_be_created(state):
    """No topic, and creating it fails (here: no ZooKeeper): a retriable error, nothing raised."""
    state.partitions = type("NoTopics", (), {"snapshot": MetadataSnapshot({}, Partitions.snapshot.brokers, {})})()
    state.offsets = TopicOffsetStore(GroupConfig(), state.partitions, state.replicas, state.groups)

    async def scenario():
        found = await call(state, FindCoordinatorRequest(key="g", key_type=0), 10, 2)
        assert (found.error_code, found.node_id) == (errors.CoordinatorNotAvailableError.errno, -1)

    asyncio.run(scenario())


def test_a_members_host_is_the_address_its_connection_came_from(state):
    """DescribeGroups (and `sparklog groups describe --members`) show each member's address as Kafka writes
    it; the dispatcher takes it from the connection's session."""
    group = group_on(ME, "host")
    dispatcher = Dispatcher(state)
    session = dispatcher.new_session("10.1.2.3")
    body = JoinGroupRequest(group_id=group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=1000, member_id="",
                            group_instance_id="static-1", protocol_type="consumer",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])

    async def scenario():
        await dispatcher.handle_frame(memoryview(encode_request(11, 5, 1, "c", body))[4:], session)
        described = call(state, DescribeGroupsRequest(groups=[group]), 15, 4).groups[0]
        assert [(m.group_instance_id, m.client_host) for m in described.members] == [("static-1", "/10.1.2.3")]

    asyncio.run(scenario())


# -- OffsetDelete (group_handlers Rule 3) ---------------------------------------------------------------------


async def offset_delete_async(state, group, partitions):
    topics = {}
    for topic, partition in partitions:
        topics.setdefault(topic, []).append(
            OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=partition))
    body = OffsetDeleteRequest(group_id=group, topics=[OffsetDeleteRequest.OffsetDeleteRequestTopic(
        name=t, partitions=ps) for t, ps in topics.items()])
    result = call(state, body, 47, 0)  # OffsetDelete v0: (top-level error, {(topic, partition): error})
    response = await result if asyncio.iscoroutine(result) else result
    return response.error_code, {(t.name, p.partition_index): p.error_code for t in response.topics
                                 for p in t.partitions}


def test_offset_delete_of_an_empty_group_deletes_what_it_names_and_flags_what_the_cluster_lacks(state):
    group = group_on(ME, "od-empty")

    async def scenario():
        assert await commit_code(state, group, -1, "") == 0
        commit_result = commit(state, group, -1, "", partitions=(("u", 0),))
        await commit_result
        code, parts = await offset_delete_async(state, group, [("t", 0), ("t", 9), ("gone", 0)])
        assert code == 0
        assert parts == {("t", 0): 0, ("t", 9): errors.UnknownTopicOrPartitionError.errno,
                         ("gone", 0): errors.UnknownTopicOrPartitionError.errno}
        assert state.offsets.committed == {(group, "u", 0): 5}  # only what was named and known
        code, parts = await offset_delete_async(state, group, [("u", 0), ("t", 0)])  # t-0: none left, no error
        assert (code, parts) == (0, {("u", 0): 0, ("t", 0): 0})
        assert state.offsets.committed == {}

    asyncio.run(scenario())


def test_offset_delete_of_an_unknown_group_or_one_placed_elsewhere_is_a_top_level_error(state):
    async def scenario():
        assert await offset_delete_async(state, group_on(ME, "od-never"), [("t", 0)]) == (
            errors.GroupIdNotFoundError.errno, {})
        assert await offset_delete_async(state, group_on(OTHER, "od-other"), [("t", 0)]) == (
            errors.NotCoordinatorError.errno, {})
        assert await offset_delete_async(state, "", [("t", 0)]) == (errors.InvalidGroupIdError.errno, {})

    asyncio.run(scenario())


def test_offset_delete_keeps_the_offsets_of_the_topics_a_consumer_group_s_members_subscribe_to(state):
    """Kafka's GROUP_SUBSCRIBED_TO_TOPIC for subscribed topics, per partition; the others go."""
    group = group_on(ME, "od-members")
    subscription = encode_subscription(ConsumerProtocolSubscription(topics=["t"], user_data=None))

    async def scenario():
        first = await join(state, group, metadata=subscription)
        member = await join(state, group, first.member_id, metadata=subscription)
        assert member.error_code == 0
        await sync(state, group, member.generation_id, member.member_id, [(member.member_id, b"")])
        for partitions in ((("t", 0),), (("u", 0),)):
            assert (await commit(state, group, member.generation_id, member.member_id, partitions)
                    ).topics[0].partitions[0].error_code == 0
        code, parts = await offset_delete_async(state, group, [("t", 0), ("u", 0)])
        assert (code, parts) == (0, {("t", 0): errors.GroupSubscribedToTopicError.errno, ("u", 0): 0})
        assert state.offsets.committed == {(group, "t", 0): 5}

    asyncio.run(scenario())


def test_offset_delete_counts_every_topic_subscribed_while_a_member_s_subscription_cannot_be_read(state):
    group = group_on(ME, "od-opaque")

    async def scenario():
        first = await join(state, group)  # metadata b"m": not a consumer-protocol subscription
        member = await join(state, group, first.member_id)
        await sync(state, group, member.generation_id, member.member_id, [(member.member_id, b"")])
        code, parts = await offset_delete_async(state, group, [("u", 0)])
        assert (code, parts) == (0, {("u", 0): errors.GroupSubscribedToTopicError.errno})

    asyncio.run(scenario())


def test_offset_delete_of_a_group_of_another_protocol_with_members_is_non_empty_group(state):
    group = group_on(ME, "od-connect")

    async def scenario():
        first = await join(state, group, protocol_type="connect")
        member = await join(state, group, first.member_id, protocol_type="connect")
        assert member.error_code == 0
        assert await offset_delete_async(state, group, [("t", 0)]) == (errors.NonEmptyGroupError.errno, {})

    asyncio.run(scenario())
