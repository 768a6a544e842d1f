"""The classic group APIs' flexible versions through their handlers (as test_group_handlers, whose stand-ins they
use) and the group state machine: JoinGroup v7's protocol type and null protocol name, v9's skip_assignment for a
static leader (KIP-814), SyncGroup v5's protocol check, FindCoordinator v4's and OffsetFetch v8's batches, and
OffsetFetch v9's member epoch and ListGroups v5's types against a KIP-848 consumer group."""

from __future__ import annotations

import asyncio

from sparklog.broker.coordinator.group.group import JoinResult
from sparklog.protocol import errors
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.find_coordinator import FindCoordinatorRequest
from sparklog.protocol.group_admin import ListGroupsRequest
from sparklog.protocol.groups import JoinGroupRequest, SyncGroupRequest
from sparklog.protocol.offset_fetch import OffsetFetchRequest, OffsetFetchRequestGroup, OffsetFetchRequestTopics

from unit.broker.coordinator.group.test_group import DELAY, new_group, req
from unit.broker.coordinator.group.test_group_handlers import (ME, OTHER, call, commit_code, group_on, state,
                                                               two_member_group)

__all__ = ["state"]  # the fixture
INCONSISTENT = errors.InconsistentGroupProtocolError.errno


async def join_at(state, group, version, member_id=""):
    body = JoinGroupRequest(group_id=group, session_timeout_ms=300, rebalance_timeout_ms=1000, member_id=member_id,
                            protocol_type="consumer", reason="a test joins",
                            protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"m")])
    result = call(state, body, ApiKey.JOIN_GROUP, version)
    return await result if asyncio.iscoroutine(result) else result


def test_join_v7_answers_the_protocol_type_and_a_null_protocol_name_when_there_is_none(state):
    group = group_on(ME, "j")

    async def scenario():
        first = await join_at(state, group, 7)
        assert first.error_code == errors.MemberIdRequiredError.errno
        joined = await join_at(state, group, 9, first.member_id)
        assert (joined.error_code, joined.protocol_type, joined.protocol_name) == (0, "consumer", "range")
        assert not joined.skip_assignment
        pending = await join_at(state, group_on(ME, "k"), 8)
        assert (pending.protocol_type, pending.protocol_name) == (None, None)
        old = await join_at(state, group_on(ME, "l"), 6)
        assert old.protocol_name == ""  # v6 has no null string there

    asyncio.run(scenario())


def static_stable_pair(leader_instance="i1"):
    """A stable group of two static members; returns (group, leader id, follower id)."""
    g = new_group()
    a = g.join(0, req(instance="i1", client="a"))
    b = g.join(0, req(instance="i2", client="b"))
    g.tick(DELAY)
    g.outbox.clear()
    g.sync(DELAY, g.leader, None, 1, {a.member_id: b"A", b.member_id: b"B"})
    g.outbox.clear()
    follower = b.member_id if g.leader == a.member_id else a.member_id
    return g, g.leader, follower


def test_a_static_leader_rejoining_a_stable_group_skips_assignment_at_v9_and_is_a_follower_before():
    """KIP-814, as Kafka's coordinator: v9+ the members and skip_assignment with its new id as leader; below v9
    no members and the old leader id, so the client does not assign; the generation stays, nothing rebalances."""
    for version, expect_members, expect_skip in ((9, 2, True), (5, 0, False)):
        g, leader, _ = static_stable_pair()
        instance = next(i for i, m in g.static.items() if m == leader)
        again = g.join(DELAY + 10, req(instance=instance, version=version))
        assert isinstance(again, JoinResult) and again.error == 0 and again.generation == 1
        assert (len(again.members), again.skip_assignment) == (expect_members, expect_skip)
        assert again.leader == (again.member_id if version >= 9 else leader)
        assert g.leader == again.member_id and g.state.value == "Stable"


def test_sync_v5_checks_the_protocol_type_and_name_and_answers_the_groups(state):
    group = group_on(ME, "s")

    async def sync5(generation, member_id, protocol_type, protocol_name):
        body = SyncGroupRequest(group_id=group, generation_id=generation, member_id=member_id,
                                protocol_type=protocol_type, protocol_name=protocol_name, assignments=[])
        return await call(state, body, ApiKey.SYNC_GROUP, 5)

    async def scenario():
        leader, follower = await two_member_group(state, group)
        ok = await sync5(1, follower, "consumer", "range")
        assert (ok.error_code, ok.assignment, ok.protocol_type, ok.protocol_name) == (0, b"F", "consumer", "range")
        assert (await sync5(1, follower, None, None)).assignment == b"F"  # not named: not checked
        assert (await sync5(1, follower, "connect", "range")).error_code == INCONSISTENT
        assert (await sync5(1, follower, "consumer", "roundrobin")).error_code == INCONSISTENT
        unknown = await sync5(1, "nobody", "connect", "range")  # the member checks come first, as in Kafka
        assert unknown.error_code == errors.UnknownMemberIdError.errno

    asyncio.run(scenario())


def test_find_coordinator_v4_answers_each_key_as_v3_answers_it_alone(state):
    keys = [group_on(ME, "a"), group_on(OTHER, "b"), group_on(ME, "c")]
    batched = call(state, FindCoordinatorRequest(coordinator_keys=keys), ApiKey.FIND_COORDINATOR, 4)
    batched = asyncio.run(batched) if asyncio.iscoroutine(batched) else batched
    assert [c.key for c in batched.coordinators] == keys
    for c in batched.coordinators:
        alone = call(state, FindCoordinatorRequest(key=c.key), ApiKey.FIND_COORDINATOR, 3)
        assert (c.error_code, c.error_message, c.node_id, c.host, c.port) == (
            alone.error_code, alone.error_message, alone.node_id, alone.host, alone.port)
    assert [c.node_id for c in batched.coordinators] == [ME, OTHER, ME]


def test_offset_fetch_v8_answers_each_group_as_v7_answers_it(state):
    mine, elsewhere, empty = group_on(ME, "m"), group_on(OTHER, "o"), group_on(ME, "e")

    async def scenario():
        assert await commit_code(state, mine, -1, "") == 0
        body = OffsetFetchRequest(groups=[
            OffsetFetchRequestGroup(group_id=mine, topics=None),
            OffsetFetchRequestGroup(group_id=elsewhere, topics=None),
            OffsetFetchRequestGroup(group_id=empty, topics=[OffsetFetchRequestTopics(name="t", partition_indexes=[0])])])
        answer = await call(state, body, ApiKey.OFFSET_FETCH, 8)
        got = [(g.group_id, g.error_code, [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                                           for t in g.topics]) for g in answer.groups]
        assert got == [(mine, 0, [("t", [(0, 5)])]), (elsewhere, errors.NotCoordinatorError.errno, []),
                       (empty, 0, [("t", [(0, -1)])])]

    asyncio.run(scenario())


def test_offset_fetch_v9_checks_a_consumer_group_members_epoch_and_list_groups_v5_filters_by_type(state):
    from unit.broker.coordinator.group.test_consumer_group_handlers import heartbeat

    consumer, classic = group_on(ME, "kip848-"), group_on(ME, "classic-")

    async def fetch9(group, member_id, epoch):
        body = OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=group, member_id=member_id,
                                                                  member_epoch=epoch, topics=None)])
        return (await call(state, body, ApiKey.OFFSET_FETCH, 9)).groups[0].error_code

    async def scenario():
        assert heartbeat(state, consumer, "m1", 0, topics=["t"]).member_epoch == 1
        assert await fetch9(consumer, "m1", 1) == 0
        assert await fetch9(consumer, "m1", 0) == errors.StaleMemberEpochError.errno
        assert await fetch9(consumer, "nobody", 1) == errors.UnknownMemberIdError.errno
        assert await fetch9(consumer, None, -1) == 0  # an admin client's: no member named
        assert await fetch9(consumer, "m1", -1) == errors.StaleMemberEpochError.errno  # Kafka's validateOffsetFetch
        await two_member_group(state, classic)
        assert await fetch9(classic, "whoever", 42) == 0  # a classic group's members are not checked (Kafka's)

        def listed(types):
            groups = call(state, ListGroupsRequest(types_filter=types), ApiKey.LIST_GROUPS, 5).groups
            return [(g.group_id, g.protocol_type, g.group_type) for g in groups]

        both = sorted([(consumer, "consumer", "consumer"), (classic, "consumer", "classic")])
        assert listed([]) == both
        assert listed(["consumer"]) == [(consumer, "consumer", "consumer")]
        assert listed(["Classic"]) == [(classic, "consumer", "classic")]

    asyncio.run(scenario())
