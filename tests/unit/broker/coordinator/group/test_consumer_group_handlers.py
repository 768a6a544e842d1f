"""The consumer group protocol's apis (KIP-848) through their handlers and the asyncio coordinator, on a real
event loop and clock with short timeouts: topic ids on the wire, the coexistence of classic and consumer groups
by group id, commits carrying the member epoch, describe and list, and session expiry by the coordinator's
timer. Offsets go to the in-memory stand-in of test_group_handlers."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.replication.partitions import MetadataSnapshot, PartitionMeta, TopicMeta
from sparklog.coordination import topic_ids
from sparklog.coordination.brokers import BrokerInfo
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.consumer_group import (ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
                                              ConsumerGroupHeartbeatRequest,
                                              HeartbeatTopicPartitions)
from sparklog.protocol.group_admin import DescribeGroupsRequest, ListGroupsRequest
from sparklog.protocol.offset_delete import OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic
from sparklog.broker.coordinator.group.offset_store import OFFSETS_TOPIC

from unit.broker.coordinator.group.test_group_handlers import (ME, OTHER, MemoryOffsets, call, commit_code,
                                                               group_on, join)

SESSION_MS, INTERVAL_MS = 300, 100
T_ID, U_ID = uuid.UUID(int=7), uuid.UUID(int=9)


def _topic(name, topic_id, partitions):
    return TopicMeta(name, {p: PartitionMeta(p, ME, 0, (ME,), (ME,)) for p in range(partitions)},
                     topic_id=topic_ids.to_string(topic_id))


class Partitions:
    snapshot = MetadataSnapshot({OFFSETS_TOPIC: TopicMeta(OFFSETS_TOPIC, {}), "t": _topic("t", T_ID, 2),
                                 "u": _topic("u", U_ID, 1)},
                                {ME: BrokerInfo(ME, "127.0.0.1", 9092), OTHER: BrokerInfo(OTHER, "h2", 9093)}, {})


@pytest.fixture
def state():
    config = BrokerConfig.from_properties({
        "broker.id": str(ME), "log.dirs": "/unused", "zookeeper.connect": "unused:1",
        "group.initial.rebalance.delay.ms": "50", "group.min.session.timeout.ms": "100",
        "group.consumer.session.timeout.ms": str(SESSION_MS),
        "group.consumer.heartbeat.interval.ms": str(INTERVAL_MS)})
    return handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=None, logs=None,
                                      partitions=Partitions(), offsets=MemoryOffsets())


def heartbeat(state, group, member_id, epoch, topics=None, owned=None, assignor=None, regex=None, version=1):
    body = ConsumerGroupHeartbeatRequest(
        group_id=group, member_id=member_id, member_epoch=epoch, rebalance_timeout_ms=1000 if epoch == 0 else -1,
        subscribed_topic_names=topics, server_assignor=assignor, subscribed_topic_regex=regex,
        topic_partitions=None if owned is None else [HeartbeatTopicPartitions(topic_id=i, partitions=ps)
                                                     for i, ps in owned.items()])
    return call(state, body, ApiKey.CONSUMER_GROUP_HEARTBEAT, version)


def on_the_wire(response, version: int):
    """The response as a client decodes it at `version`."""
    data = bytes(ConsumerGroupDescribeResponse.encoder(version)(response, bytearray(), []))
    decoded, end = ConsumerGroupDescribeResponse.decoder(version)(memoryview(data), 0, len(data))
    assert end == len(data)
    return decoded


def assigned(response):
    return {t.topic_id: sorted(t.partitions) for t in response.assignment.topic_partitions}


def test_join_by_topic_ids_commit_with_the_member_epoch_and_describe(state):
    group = group_on(ME, "c")

    async def scenario():
        joined = heartbeat(state, group, "m1", 0, topics=["t", "u"])
        assert (joined.error_code, joined.member_id, joined.member_epoch) == (0, "m1", 1)
        assert joined.heartbeat_interval_ms == INTERVAL_MS
        assert assigned(joined) == {T_ID: [0, 1], U_ID: [0]}
        steady = heartbeat(state, group, "m1", 1, owned={T_ID: [0, 1], U_ID: [0]})
        assert steady.error_code == 0 and steady.assignment is None  # unchanged: null
        assert await commit_code(state, group, 1, "m1", version=9) == 0
        assert await commit_code(state, group, 0, "m1", version=9) == errors.StaleMemberEpochError.errno
        assert await commit_code(state, group, 1, "nobody", version=9) == errors.UnknownMemberIdError.errno
        assert await commit_code(state, group, -1, "", version=9) == errors.UnknownMemberIdError.errno
        # Kafka's validateOffsetCommit: a member of the new protocol commits at v9+, and a member named with
        # epoch -1 is a member whose epoch is stale
        assert await commit_code(state, group, 1, "m1", version=8) == errors.UnsupportedVersionError.errno
        assert await commit_code(state, group, -1, "m1", version=9) == errors.StaleMemberEpochError.errno
        assert heartbeat(state, group, "m1", 7).error_code == errors.FencedMemberEpochError.errno
        [described] = call(state, ConsumerGroupDescribeRequest(group_ids=[group]), ApiKey.CONSUMER_GROUP_DESCRIBE,
                           0).groups
        assert (described.error_code, described.group_state, described.assignor_name) == (0, "Stable", "uniform")
        [member] = described.members
        assert {(t.topic_name, tuple(t.partitions)) for t in member.assignment.topic_partitions} == {
            ("t", (0, 1)), ("u", (0,))}
        for version, member_type in ((0, -1), (1, 1)):  # v1 (KIP-1099): a consumer member; v0 has no MemberType
            response = call(state, ConsumerGroupDescribeRequest(group_ids=[group]), ApiKey.CONSUMER_GROUP_DESCRIBE,
                            version)
            [[on_wire]] = [g.members for g in on_the_wire(response, version).groups]
            assert on_wire.member_type == member_type and on_wire.member_id == "m1"
        classic = call(state, DescribeGroupsRequest(groups=[group]), 15, 4).groups[0]
        assert classic.error_code == errors.GroupIdNotFoundError.errno  # Kafka 4: not a classic group
        listed = {g.group_id: (g.protocol_type, g.group_state) for g in call(state, ListGroupsRequest(), 16, 4).groups}
        assert listed[group] == ("consumer", "Stable")

    asyncio.run(scenario())


def test_classic_and_consumer_groups_share_group_ids_as_kafka_allows(state):
    group = group_on(ME, "x")

    async def scenario():
        heartbeat(state, group, "m1", 0, topics=["t"])
        refused = await join(state, group)
        assert refused.error_code == errors.InconsistentGroupProtocolError.errno
        assert heartbeat(state, group, "m1", -1).error_code == 0  # leaves: the group is empty, forgotten
        first = await join(state, group)  # the empty consumer group converts to classic
        assert first.error_code == errors.MemberIdRequiredError.errno
        classic_join = asyncio.ensure_future(join(state, group, first.member_id))
        await asyncio.sleep(0.01)
        answer = heartbeat(state, group, "m2", 0, topics=["t"])
        assert answer.error_code == errors.GroupIdNotFoundError.errno  # a classic group with members
        assert (await classic_join).error_code == 0

    asyncio.run(scenario())


def test_a_silent_member_expires_and_its_partitions_move(state):
    group = group_on(ME, "s")

    async def scenario():
        heartbeat(state, group, "a", 0, topics=["t"])
        second = heartbeat(state, group, "b", 0, topics=["t"])
        assert second.member_epoch == 2 and assigned(second) == {}  # "a" still holds both
        beats = []
        while len(beats) < 8 and (not beats or beats[-1].assignment is None):  # "a" is silent, "b" is not
            await asyncio.sleep(SESSION_MS / 4000)
            beats.append(heartbeat(state, group, "b", 2, owned={}))
        assert len(beats) >= 4  # not before "a"'s session ran out
        assert beats[-1].member_epoch == 3 and assigned(beats[-1]) == {T_ID: [0, 1]}
        assert state.groups.consumer_groups.statistics().expired_members == 1

    asyncio.run(scenario())


def test_refusals(state):
    mine, other = group_on(ME, "r"), group_on(OTHER, "r")
    assert heartbeat(state, other, "m", 0, topics=["t"]).error_code == errors.NotCoordinatorError.errno
    assert heartbeat(state, "", "m", 0, topics=["t"]).error_code == errors.InvalidGroupIdError.errno

    async def scenario():
        assert heartbeat(state, mine, "m", 0, topics=["t"], assignor="sticky").error_code == (
            errors.UnsupportedAssignorError.errno)
        assert heartbeat(state, mine, "m", 0, regex="(").error_code == errors.InvalidRegularExpressionError.errno
        assert heartbeat(state, mine, "m", 0).error_code == errors.InvalidRequestError.errno  # no subscription
        assert heartbeat(state, mine, "m", 3).error_code == errors.UnknownMemberIdError.errno
        [described] = call(state, ConsumerGroupDescribeRequest(group_ids=[mine]), ApiKey.CONSUMER_GROUP_DESCRIBE,
                           0).groups
        assert described.error_code == errors.GroupIdNotFoundError.errno

    asyncio.run(scenario())


def test_offset_delete_keeps_the_subscribed_topics_of_a_consumer_group(state):
    group = group_on(ME, "d")

    async def scenario():
        heartbeat(state, group, "m1", 0, topics=["t"])
        assert await commit_code(state, group, 1, "m1", version=9) == 0
        state.offsets.committed[(group, "u", 0)] = 3
        body = OffsetDeleteRequest(group_id=group, topics=[
            OffsetDeleteRequestTopic(name=name, partitions=[OffsetDeleteRequestPartition(partition_index=0)])
            for name in ("t", "u")])
        result = await call(state, body, ApiKey.OFFSET_DELETE, 0)
        codes = {t.name: t.partitions[0].error_code for t in result.topics}
        assert codes == {"t": errors.GroupSubscribedToTopicError.errno, "u": 0}
        assert state.offsets.committed == {(group, "t", 0): 5}

    asyncio.run(scenario())


def test_a_commit_with_epoch_minus_one_and_a_member_id_goes_to_a_group_without_members(state):
    """librdkafka's consumer of `group.protocol=consumer` that assign()s (no group membership) commits with its
    own member id and epoch -1 (librdkafka's 0030_offset_commit): Kafka's coordinator accepts a commit of a
    negative epoch or generation to a group without members, whatever the member id (a "simple" group), and
    refuses it while the group has members."""
    group = group_on(ME, "s")

    async def scenario():
        assert await commit_code(state, group, -1, "its-own-member-id") == 0  # no such group yet
        joined = heartbeat(state, group, "m1", 0, topics=["t"])
        assert joined.error_code == 0
        assert await commit_code(state, group, -1, "its-own-member-id") == errors.UnknownMemberIdError.errno
        assert heartbeat(state, group, "m1", -1).error_code == 0  # the last member leaves
        assert await commit_code(state, group, -1, "its-own-member-id") == 0

    asyncio.run(scenario())
