"""The consumer's read replica (client/read_replica.py): Rule 1 (prefer, expiry) and Rule 2 (back to the leader)."""

from __future__ import annotations

from sparklog.client.read_replica import OFFSET_NOT_AVAILABLE, ReadReplicas

TP = ("t", 0)
BROKERS = {1: ("h", 1), 2: ("h", 2), 3: ("h", 3)}
LEADER, REPLICA = 1, 2
NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE = 6, 1


def preferring(now: float = 0.0) -> ReadReplicas:
    replicas = ReadReplicas(ttl_s=300)
    replicas.prefer(TP, REPLICA, now)
    return replicas


def test_without_a_preferred_replica_the_leader_is_fetched():
    assert ReadReplicas(300).node_for(TP, LEADER, BROKERS, 0.0) == LEADER


def test_a_preferred_replica_is_fetched_until_it_expires():
    replicas = preferring()
    assert replicas.node_for(TP, LEADER, BROKERS, 299.0) == REPLICA
    assert replicas.node_for(TP, LEADER, BROKERS, 300.0) == LEADER
    assert replicas.node_for(TP, LEADER, BROKERS, 1.0) == LEADER  # forgotten, not only skipped


def test_no_replica_named_keeps_the_leader():
    replicas = ReadReplicas(300)
    replicas.prefer(TP, -1, 0.0)
    assert replicas.node_for(TP, LEADER, BROKERS, 0.0) == LEADER


def test_a_replica_missing_from_the_metadata_sends_the_partition_to_its_leader():
    assert preferring().node_for(TP, LEADER, {1: ("h", 1)}, 1.0) == LEADER


def test_a_failed_request_to_the_replica_sends_the_partition_to_its_leader():
    replicas = preferring()
    replicas.fetch_failed([TP], LEADER)  # a failure at another broker changes nothing
    assert replicas.node_for(TP, LEADER, BROKERS, 1.0) == REPLICA
    replicas.fetch_failed([TP], REPLICA)
    assert replicas.node_for(TP, LEADER, BROKERS, 1.0) == LEADER


def test_a_replicas_partition_error_sends_it_to_its_leader_but_offset_not_available_is_retried_there():
    replicas = preferring()
    assert not replicas.partition_failed(TP, REPLICA, OFFSET_NOT_AVAILABLE)
    assert replicas.node_for(TP, LEADER, BROKERS, 1.0) == REPLICA
    assert not replicas.partition_failed(TP, LEADER, NOT_LEADER_OR_FOLLOWER)  # the leader's own error: not ours
    assert replicas.partition_failed(TP, REPLICA, OFFSET_OUT_OF_RANGE)  # no reset: the leader decides
    assert replicas.node_for(TP, LEADER, BROKERS, 1.0) == LEADER
