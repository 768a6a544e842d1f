"""AlterPartitionReassignments (broker/handlers/reassignments.py) against a real ZooKeeper: each partition's
checks, the plan written for the controller (merged with one pending), cancellation, and the plan algebra of
coordination/reassignment.py Rule 3."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparklog.broker import handlers
from sparklog.broker.config import BrokerConfig
from sparklog.broker.handlers import reassignments
from sparklog.broker.replication.partitions import MetadataSnapshot
from sparklog.coordination import reassignment
from sparklog.coordination import topics as topic_registry
from sparklog.protocol import ApiKey, RequestHeader
from sparklog.protocol.alter_partition_reassignments import (AlterPartitionReassignmentsRequest,
                                                             ReassignablePartition, ReassignableTopic)
from sparklog.protocol.registry import Request

PLAN = "/admin/reassign_partitions"


class Partitions:
    snapshot = MetadataSnapshot({}, {}, {})


@pytest.fixture
def state(zk):
    for broker_id in (1, 2, 3):
        zk.create(f"/brokers/ids/{broker_id}", json.dumps({
            "version": 4, "host": "127.0.0.1", "port": 9090 + broker_id,
            "endpoints": [f"PLAINTEXT://127.0.0.1:{9090 + broker_id}"]}).encode(), ephemeral=True, makepath=True)
    topic_registry.create_topic(zk, "t", 3, 2, live_broker_ids=[1, 2, 3],
                                assignment={0: (1, 2), 1: (2, 3), 2: (3, 1)})
    config = BrokerConfig.from_properties({"broker.id": "1", "log.dirs": "/unused", "zookeeper.connect": "unused:1"})
    executor = concurrent.futures.ThreadPoolExecutor(2)
    yield handlers.BrokerState.build(config=config, cluster_id="c" * 22, zk=zk, partitions=Partitions(),
                                     executor=executor)
    executor.shutdown()


def alter(state, changes: dict, version: int = 0, allow_rf_change: bool = True) -> dict:
    topics: dict[str, list] = {}
    for (topic, partition), replicas in changes.items():
        topics.setdefault(topic, []).append(ReassignablePartition(partition_index=partition, replicas=replicas))
    body = AlterPartitionReassignmentsRequest(timeout_ms=1000, allow_replication_factor_change=allow_rf_change,
                                              topics=[ReassignableTopic(name=t, partitions=ps)
                                                      for t, ps in topics.items()])
    response = asyncio.run(reassignments.handle_alter_partition_reassignments(
        Request(RequestHeader(ApiKey.ALTER_PARTITION_REASSIGNMENTS, version, 7, "test"), body), state))
    assert response.error_code == 0, response
    return {(t.name, p.partition_index): p.error_code for t in response.responses for p in t.partitions}


def pending(zk) -> dict:
    return reassignment.pending_reassignment(zk) or {}


def test_each_partition_is_checked_and_only_those_that_pass_are_written(state, zk):
    codes = alter(state, {("t", 0): [1, 3], ("t", 1): [], ("t", 2): [3, 3], ("t", 7): [1], ("nosuch", 0): [1],
                          ("bad/name", 0): [1], ("t", 3): [4]}, version=1)
    assert codes == {("t", 0): 0, ("t", 1): handlers.INVALID_REPLICA_ASSIGNMENT,
                     ("t", 2): handlers.INVALID_REPLICA_ASSIGNMENT, ("t", 7): handlers.UNKNOWN_TOPIC_OR_PARTITION,
                     ("nosuch", 0): handlers.UNKNOWN_TOPIC_OR_PARTITION,
                     ("bad/name", 0): handlers.UNKNOWN_TOPIC_OR_PARTITION, ("t", 3): handlers.UNKNOWN_TOPIC_OR_PARTITION}
    assert pending(zk) == {("t", 0): (1, 3)}
    assert alter(state, {("t", 1): [2, 4]}) == {("t", 1): handlers.INVALID_REPLICA_ASSIGNMENT}  # 4 is not alive


def test_a_second_request_is_merged_into_the_pending_plan(state, zk):
    assert alter(state, {("t", 0): [1, 3]}) == {("t", 0): 0}
    assert alter(state, {("t", 1): [1, 2], ("t", 0): [3, 2]}) == {("t", 1): 0, ("t", 0): 0}
    assert pending(zk) == {("t", 0): (3, 2), ("t", 1): (1, 2)}


def test_v1_refuses_a_replication_factor_change_when_asked_to(state, zk):
    assert alter(state, {("t", 0): [1, 2, 3]}, version=1, allow_rf_change=False) == {
        ("t", 0): handlers.INVALID_REPLICATION_FACTOR}
    assert alter(state, {("t", 0): [1, 2, 3]}, version=1) == {("t", 0): 0}
    assert alter(state, {("t", 1): [3, 1]}, version=1, allow_rf_change=False) == {("t", 1): 0}


def test_cancellation_restores_the_original_replicas_or_drops_a_move_not_started(state, zk):
    assert alter(state, {("t", 0): None}) == {("t", 0): reassignments.NO_REASSIGNMENT_IN_PROGRESS}
    assert zk.exists(PLAN) is None
    alter(state, {("t", 0): [3], ("t", 1): [1, 2]})
    value, version = reassignment.read_topic_znode(zk, "t")  # partition 0 STARTED, as the controller writes it
    zk.set("/brokers/topics/t", json.dumps(reassignment.with_step(
        value, 0, reassignment.Step((3, 1, 2), (3,), (1, 2)))).encode(), version=version)
    assert alter(state, {("t", 0): None, ("t", 1): None}) == {("t", 0): 0, ("t", 1): 0}
    assert pending(zk) == {("t", 0): (1, 2)}  # back where it was; partition 1 had not started
    assert alter(state, {("t", 0): None}) == {("t", 0): 0}  # still moving back: cancelling again keeps it so
    assert pending(zk) == {("t", 0): (1, 2)}


def test_cancelling_the_only_move_deletes_the_request(state, zk):
    alter(state, {("t", 2): [1, 2]})
    assert alter(state, {("t", 2): None}) == {("t", 2): 0}
    assert zk.exists(PLAN) is None


def test_a_plan_changed_meanwhile_is_not_deleted_by_the_controller_finishing_the_old_one(zk):
    reassignment.request_reassignment(zk, {("t", 0): (1,)})
    old = pending(zk)
    reassignment.write_plan(zk, {("t", 0): (1,), ("t", 1): (2,)}, reassignment.pending_with_version(zk)[1])
    reassignment.finish_reassignment(zk, old)
    assert pending(zk) == {("t", 0): (1,), ("t", 1): (2,)}
    reassignment.finish_reassignment(zk, pending(zk))
    assert zk.exists(PLAN) is None


keys = st.tuples(st.sampled_from("ab"), st.integers(0, 3))
targets = st.lists(st.integers(1, 5), min_size=1, max_size=3, unique=True).map(tuple)


@given(st.dictionaries(keys, targets), st.dictionaries(keys, st.tuples(targets, targets)),
       st.dictionaries(keys, st.none() | targets))
def test_altered_plan_lays_the_changes_over_the_pending_plan(pending_plan, moving, changes):
    ongoing = {key: (tuple(dict.fromkeys(new + old)), tuple(b for b in new if b not in old),
                     tuple(b for b in old if b not in new)) for key, (old, new) in moving.items()}
    plan = reassignment.altered_plan(pending_plan, ongoing, changes)
    for key in set(pending_plan) | set(changes):
        if key not in changes:
            assert plan[key] == pending_plan[key]
        elif changes[key] is not None:
            assert plan[key] == changes[key]
        elif key in ongoing:
            # the original replicas, in the moving assignment's order (Kafka's originReplicas: replicas less adding)
            assert set(plan[key]) == set(moving[key][0])
            assert plan[key] == tuple(b for b in ongoing[key][0] if b in moving[key][0])
        else:
            assert key not in plan
    assert set(plan) <= set(pending_plan) | set(changes)
