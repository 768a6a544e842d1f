import json
import time
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.coordination import topic_ids, topics
from sparklog.coordination.connection import decode
from sparklog.coordination.topics import (
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidTopicName,
    PartitionState,
    PartitionStateConflict,
    TopicExists,
    UnknownTopic,
    InvalidReplicaAssignment,
    assign_replicas,
    assign_replicas_rack_aware,
    validate_assignment,
)

BROKERS = [3, 1, 2]


def wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


# -- placement, pure ---------------------------------------------------------------------------------------


def test_leaders_go_round_robin_over_sorted_brokers():
    assignment = assign_replicas(BROKERS, 6, 1, seed=1)
    assert [assignment[p][0] for p in range(6)] == [2, 3, 1, 2, 3, 1]


@given(
    st.lists(st.integers(0, 50), min_size=1, max_size=8, unique=True),
    st.integers(1, 40),
    st.integers(1, 8),
    st.integers(0, 2**32),
)
def test_placement_properties(brokers, partitions, rf, seed):
    if rf > len(brokers):
        with pytest.raises(InvalidReplicationFactor):
            assign_replicas(brokers, partitions, rf, seed)
        return
    check_spread(assign_replicas(brokers, partitions, rf, seed), brokers, partitions, rf)


def check_spread(assignment, brokers, partitions, rf) -> None:
    """Every partition placed, rf distinct known replicas each, leaders even to within one."""
    assert sorted(assignment) == list(range(partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf == len(set(replicas)) and set(replicas) <= set(brokers)
    leaders = Counter(r[0] for r in assignment.values())
    assert max(leaders.values()) - min(leaders.get(b, 0) for b in brokers) <= 1


def test_growing_continues_the_same_placement():
    whole = assign_replicas(BROKERS, 9, 2, seed=7)
    first = assign_replicas(BROKERS, 4, 2, seed=7)
    rest = assign_replicas(BROKERS, 5, 2, seed=7, first_partition=4)
    assert {**first, **rest} == whole


@pytest.mark.parametrize("count", [0, -1])
def test_partition_count_must_be_positive(count):
    with pytest.raises(InvalidPartitions):
        assign_replicas(BROKERS, count, 1)


RACKS = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


def test_rack_aware_placement_puts_each_replica_on_another_rack():
    assignment = assign_replicas_rack_aware(RACKS, 12, 3, seed=5)
    for replicas in assignment.values():
        assert len({RACKS[b] for b in replicas}) == 3
    leaders = Counter(r[0] for r in assignment.values())
    assert sorted(leaders.values()) == [2] * 6


@given(
    st.dictionaries(st.integers(0, 30), st.sampled_from("abcd"), min_size=1, max_size=9),
    st.integers(1, 30),
    st.integers(1, 6),
    st.integers(0, 2**32),
)
def test_rack_aware_placement_properties(racks, partitions, rf, seed):
    if rf > len(racks):
        with pytest.raises(InvalidReplicationFactor):
            assign_replicas_rack_aware(racks, partitions, rf, seed)
        return
    assignment = assign_replicas_rack_aware(racks, partitions, rf, seed)
    check_spread(assignment, racks, partitions, rf)
    for replicas in assignment.values():
        assert len({racks[b] for b in replicas}) == min(rf, len(set(racks.values())))


def test_explicit_assignments_are_validated():
    assert validate_assignment({1: (2, 1), 0: (1, 2)}, {1, 2}) == {0: (1, 2), 1: (2, 1)}
    for bad, why in [({}, "empty"), ({1: (1,)}, "numbered"), ({0: (1, 1)}, "twice"),
                     ({0: (1, 2), 1: (1,)}, "same"), ({0: (1, 9)}, "unknown broker")]:
        with pytest.raises(InvalidReplicaAssignment, match=why):
            validate_assignment(bad, {1, 2})


def test_create_with_an_explicit_assignment_and_racks(zk):
    made = topics.create_topic(zk, "manual", 0, 0, live_broker_ids={1: None, 2: None},
                               assignment={0: (2, 1), 1: (1, 2)})
    assert topics.get_topic(zk, "manual").partitions == {0: (2, 1), 1: (1, 2)} == made.partitions
    assert made.states[0].leader == 2 and made.states[0].isr == (2, 1)
    racked = topics.create_topic(zk, "racked", 4, 2, live_broker_ids={1: "x", 2: "x", 3: "y", 4: "y"})
    assert all({b <= 2 for b in r} == {True, False} for r in racked.partitions.values())


# -- against ZooKeeper --------------------------------------------------------------------------------------


def test_create_writes_kafkas_znodes_in_one_go(zk):
    created = topics.create_topic(zk, "orders", 3, 2, {"retention.ms": 1000}, live_broker_ids=BROKERS)
    value = decode(zk.get("/brokers/topics/orders")[0])
    assert value == {
        "version": 3,
        "partitions": {str(p): list(r) for p, r in created.partitions.items()},
        "adding_replicas": {},
        "removing_replicas": {},
        "topic_id": created.topic_id,
    }
    state = decode(zk.get("/brokers/topics/orders/partitions/0/state")[0])
    replicas = created.partitions[0]
    assert state == {"controller_epoch": 1, "leader": replicas[0], "version": 1, "leader_epoch": 0, "isr": list(replicas)}
    assert zk.exists("/brokers/topics/orders/partitions/0/state").ephemeralOwner == 0  # persistent
    assert decode(zk.get("/config/topics/orders")[0]) == {"version": 1, "config": {"retention.ms": "1000"}}
    assert topics.get_topic(zk, "orders") == created


def test_create_uses_the_live_brokers(zk):
    from sparklog.coordination.brokers import BrokerRegistration

    registrations = [BrokerRegistration(zk, i, "h", 9000 + i) for i in (1, 2)]
    for r in registrations:
        r.register()
    try:
        created = topics.create_topic(zk, "t", 4, 2)
        assert {b for r in created.partitions.values() for b in r} == {1, 2}
        with pytest.raises(InvalidReplicationFactor, match="live brokers"):
            topics.create_topic(zk, "too-many", 1, 3)
    finally:
        for r in registrations:
            r.close()
    with pytest.raises(InvalidReplicationFactor):
        topics.create_topic(zk, "nobody", 1, 1)


def test_errors(zk):
    topics.create_topic(zk, "t", 1, 1, live_broker_ids=[1])
    with pytest.raises(TopicExists):
        topics.create_topic(zk, "t", 2, 1, live_broker_ids=[1])
    with pytest.raises(InvalidTopicName):
        topics.create_topic(zk, "../escape", 1, 1, live_broker_ids=[1])
    with pytest.raises(InvalidPartitions):
        topics.create_topic(zk, "u", 0, 1, live_broker_ids=[1])
    with pytest.raises(UnknownTopic):
        topics.get_topic(zk, "nope")
    with pytest.raises(UnknownTopic):
        topics.delete_topic(zk, "nope")
    assert topics.list_topics(zk) == ["t"]  # nothing half-made by the failures


def test_list_describe_delete(zk):
    assert topics.list_topics(zk) == []
    topics.create_topic(zk, "b", 2, 1, {"cleanup.policy": "delete"}, live_broker_ids=[1])
    topics.create_topic(zk, "a", 1, 1, live_broker_ids=[1])
    assert topics.list_topics(zk) == ["a", "b"]
    topics.delete_topic(zk, "b")
    assert topics.list_topics(zk) == ["a"]
    assert not zk.exists("/config/topics/b")
    topics.create_topic(zk, "b", 1, 1, live_broker_ids=[1])  # a deleted name can be used again
    assert topics.get_topic(zk, "b").config == {}


def test_retried_create_that_already_landed_is_success(zk):
    assignment = assign_replicas([1], 1, 1)
    attempts = iter([1])  # as if this were the second attempt
    made = topics.create_topic(zk, "t", 1, 1, live_broker_ids=[1])
    topics._inner_create(zk, "t", assignment, {}, attempts, made.topic_id)  # no TopicExists


def test_add_partitions(zk):
    topics.create_topic(zk, "t", 2, 2, live_broker_ids=BROKERS)
    grown = topics.add_partitions(zk, "t", 5, live_broker_ids=BROKERS)
    assert sorted(grown.partitions) == sorted(grown.states) == [0, 1, 2, 3, 4]
    assert grown.replication_factor == 2
    assert grown.states[4].leader == grown.partitions[4][0]
    with pytest.raises(InvalidPartitions):
        topics.add_partitions(zk, "t", 5, live_broker_ids=BROKERS)
    with pytest.raises(UnknownTopic):
        topics.add_partitions(zk, "nope", 5, live_broker_ids=BROKERS)


def test_add_partitions_with_an_assignment_places_them_as_given(zk):
    topics.create_topic(zk, "t", 2, 2, live_broker_ids=BROKERS)
    grown = topics.add_partitions(zk, "t", 4, live_broker_ids=BROKERS, assignment={2: (3, 1), 3: (2, 3)})
    assert grown.partitions[2] == (3, 1) and grown.partitions[3] == (2, 3)
    assert grown.states[2].leader == 3 and grown.states[2].isr == (3, 1)
    for assignment, words in [({4: (1,)}, "replication factor"), ({4: (1, 9)}, "unknown broker"),
                              ({4: (1, 1)}, "twice"), ({5: (1, 2)}, "numbered"), ({4: (1, 2), 5: (2, 3)}, "2 assign")]:
        with pytest.raises(InvalidReplicaAssignment, match=words):
            topics.add_partitions(zk, "t", 5, live_broker_ids=BROKERS, assignment=assignment)
    assert len(topics.get_topic(zk, "t").partitions) == 4


def test_partition_state_compare_and_set(zk):
    topics.create_topic(zk, "t", 1, 2, live_broker_ids=[1, 2])
    state = topics.partition_state(zk, "t", 0)
    moved = PartitionState(leader=2, isr=(2,), leader_epoch=state.leader_epoch + 1)
    written = topics.set_partition_state(zk, "t", 0, moved, expected_version=state.zk_version)
    assert written.zk_version == state.zk_version + 1
    assert topics.partition_state(zk, "t", 0) == written
    with pytest.raises(PartitionStateConflict):
        topics.set_partition_state(zk, "t", 0, moved, expected_version=state.zk_version)
    with pytest.raises(UnknownTopic):
        topics.set_partition_state(zk, "t", 9, moved)


def test_watch_fires_on_create_grow_and_delete(zk, zk_connect):
    from sparklog.coordination.connection import close, connect

    observer = connect(zk_connect)
    try:
        seen = []
        watch = topics.watch_topics(observer, seen.append)
        assert seen == [{}]
        topics.create_topic(zk, "t", 1, 1, live_broker_ids=[1])
        wait_for(lambda: seen[-1] == {"t": {0: (1,)}})
        topics.add_partitions(zk, "t", 2, live_broker_ids=[1])
        wait_for(lambda: seen[-1] == {"t": {0: (1,), 1: (1,)}})
        topics.delete_topic(zk, "t")
        wait_for(lambda: seen[-1] == {})
        topics.create_topic(zk, "t", 3, 1, live_broker_ids=[1])  # the same name again
        wait_for(lambda: len(seen[-1].get("t", {})) == 3)
        watch.stop()
        count = len(seen)
        topics.create_topic(zk, "u", 1, 1, live_broker_ids=[1])
        time.sleep(0.3)
        assert len(seen) == count
    finally:
        close(observer)


def test_set_topic_config_replaces_the_overrides_and_refuses_unknown_topics(zk):
    from sparklog.coordination import topics as registry

    registry.create_topic(zk, "configured", 1, 1, {"retention.ms": "1"}, [1])
    registry.set_topic_config(zk, "configured", {"cleanup.policy": "compact"})
    registry.set_topic_config(zk, "configured", {"cleanup.policy": "compact"})  # idempotent
    assert registry.topic_config(zk, "configured") == {"cleanup.policy": "compact"}
    zk.delete("/config/topics/configured")  # a topic some tool created without a config node
    registry.set_topic_config(zk, "configured", {"segment.ms": "5"})
    assert registry.get_topic(zk, "configured").config == {"segment.ms": "5"}
    with pytest.raises(registry.UnknownTopic):
        registry.set_topic_config(zk, "absent", {})
def test_existing_topic_config_is_none_for_a_missing_topic_and_empty_without_a_config_node(zk):
    topics.create_topic(zk, "described", 1, 1, config={"retention.ms": "5"}, live_broker_ids=[1])
    assert topics.existing_topic_config(zk, "described") == {"retention.ms": "5"}
    assert topics.existing_topic_config(zk, "absent") is None
    zk.delete("/config/topics/described")  # a topic some tool created without a config node
    assert topics.existing_topic_config(zk, "described") == {}
    topics.delete_topic(zk, "described")
    assert topics.existing_topic_config(zk, "described") is None


def test_get_topics_reads_what_get_topic_reads(zk):
    assert topics.get_topics(zk) == {}
    topics.create_topic(zk, "one", 3, 1, config={"retention.ms": "5"}, live_broker_ids=[1, 2])
    topics.create_topic(zk, "two", 1, 2, live_broker_ids=[1, 2])
    s = topics.partition_state(zk, "one", 1)
    topics.set_partition_state(zk, "one", 1, PartitionState(s.leader, s.isr, 4), s.zk_version)
    assert topics.get_topics(zk) == {"one": topics.get_topic(zk, "one"), "two": topics.get_topic(zk, "two")}
    assert topics.get_topics(zk)["one"].states[1].zk_version == 1
    assert topics.get_topics(zk, ["two", "absent"]) == {"two": topics.get_topic(zk, "two")}


# -- topic ids (KIP-516) --------------------------------------------------------------------------------------


def test_a_topic_id_is_random_kept_when_the_topic_grows_and_new_when_it_is_recreated(zk):
    first = topics.create_topic(zk, "ids", 2, 1, live_broker_ids=[1])
    assert topic_ids.to_uuid(first.topic_id) not in (topic_ids.ZERO, topic_ids.METADATA_TOPIC_ID)
    assert topics.topic_id(zk, "ids") == first.topic_id == topics.get_topics(zk)["ids"].topic_id
    assert topics.add_partitions(zk, "ids", 4, live_broker_ids=[1]).topic_id == first.topic_id
    assert decode(zk.get("/brokers/topics/ids")[0])["topic_id"] == first.topic_id
    topics.delete_topic(zk, "ids")
    assert topics.topic_id(zk, "ids") is None
    second = topics.create_topic(zk, "ids", 2, 1, live_broker_ids=[1])
    assert second.topic_id != first.topic_id and topics.topic_id(zk, "ids") == second.topic_id


def test_a_topic_created_before_topic_ids_gets_its_czxid_id_written_once(zk):
    old = {"version": 2, "partitions": {"0": [1]}, "adding_replicas": {}, "removing_replicas": {}}
    zk.create("/brokers/topics/legacy", json.dumps(old).encode(), makepath=True)
    zk.create("/brokers/topics/legacy/partitions/0/state", json.dumps(
        {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 0, "isr": [1]}).encode(), makepath=True)
    derived = topic_ids.from_czxid(zk.exists("/brokers/topics/legacy").czxid)
    assert topics.get_topic(zk, "legacy").topic_id == derived  # read before the migration: the same id
    topics.create_topic(zk, "modern", 1, 1, live_broker_ids=[1])
    assert topics.assign_missing_topic_ids(zk) == ["legacy"]
    value = decode(zk.get("/brokers/topics/legacy")[0])
    assert value["topic_id"] == derived and value["version"] == 3 and value["partitions"] == {"0": [1]}
    assert topics.assign_missing_topic_ids(zk) == []  # once
