"""A consume-transform-produce transaction (confluent-kafka: records read from `in`, transformed into `out`,
the consumer's positions sent with send_offsets_to_transaction) whose group coordinator is SIGKILLed after
TxnOffsetCommit and before EndTxn, on three real brokers (`__consumer_offsets` with replication factor 3):
the offsets were written to `__consumer_offsets` as a transactional batch (offset_store.py, "Transactional
offsets"), so the broker that takes the group's partition over loads them pending, and the marker the
transaction coordinator then writes there commits them (commit) or drops them (abort)."""

from __future__ import annotations

import uuid

import pytest

from support.cluster import wait_until
from support.transactions import (TIMEOUT_S, committed, committed_after_markers, find_coordinator, producer,
                                  read_values, transaction_cluster)
from support.wire import request

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return transaction_cluster(request, zookeeper, tmp_path_factory, "txnoffsets", topics=(("in", 2), ("out", 1)))


def group_coordinator(cluster, group: str) -> int:
    from sparklog.protocol import ApiKey, FindCoordinatorRequest

    def found():
        broker = next(b for b in cluster.brokers.values() if b.running)
        answer = request(broker.host, broker.port, ApiKey.FIND_COORDINATOR, 2, FindCoordinatorRequest(key=group))
        return answer.error_code == 0 and answer

    return wait_until(found, f"the coordinator of group {group}", TIMEOUT_S).node_id


def id_coordinated_apart_from(cluster, node: int) -> str:
    for _ in range(200):
        tid = f"tx-{uuid.uuid4().hex[:8]}"
        if find_coordinator(cluster, tid).node_id != node:
            return tid
    raise AssertionError(f"every transactional id tried is coordinated by broker {node}")


def produce_input(cluster, partition: int, values: list[str]) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for value in values:
        p.produce("in", value.encode(), partition=partition)
    assert p.flush(TIMEOUT_S) == 0


def consume(cluster, group: str, partition: int, count: int):
    """A consumer of `in`-`partition` in `group` (assigned, not subscribed: no rebalance when a broker dies) that has read
    `count` records from the group's committed offset on: (consumer, their values)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False,
                         "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition("in", partition)])
    values = []
    wait_until(lambda: (m := consumer.poll(0.5)) is not None and m.error() is None and values.append(
        m.value().decode()) is None and len(values) >= count, f"{count} input records", TIMEOUT_S)
    return consumer, values


def transform_with_the_group_coordinator_killed(cluster, group: str, partition: int, commit: bool,
                                                 values_in: list[str]):
    """One transaction: read the input, produce it upper-cased to `out`, send the consumer's position; SIGKILL
    the group's coordinator; then commit or abort. Returns (the victim, the position sent)."""
    victim = cluster.brokers[group_coordinator(cluster, group)]
    p = producer(cluster, id_coordinated_apart_from(cluster, victim.broker_id))
    p.init_transactions(TIMEOUT_S)
    consumer, values = consume(cluster, group, partition, len(values_in))
    try:
        assert values == values_in
        p.begin_transaction()
        for value in values:
            p.produce("out", value.upper().encode())
        position = consumer.position(consumer.assignment())
        p.send_offsets_to_transaction(position, consumer.consumer_group_metadata(), TIMEOUT_S)
    finally:
        consumer.close()
    victim.kill()
    if commit:
        p.commit_transaction(TIMEOUT_S)
    else:
        p.abort_transaction(TIMEOUT_S)
    return victim, position[0].offset


def test_offsets_of_a_committed_transaction_survive_the_group_coordinators_death(cluster):
    group, tag = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    values = [f"c-{tag}-{i}" for i in range(3)]
    produce_input(cluster, 0, values)
    victim, position = transform_with_the_group_coordinator_killed(cluster, group, 0, True, values)
    try:
        assert group_coordinator(cluster, group) != victim.broker_id
        assert committed_after_markers(cluster, group, [0], {0: position}) == {0: position}
        out = read_values(cluster, "out", "read_committed", len(values))
        assert [v for v in out if v.startswith(f"C-{tag.upper()}")] == [v.upper() for v in values]
    finally:
        victim.start()


def test_offsets_of_an_aborted_transaction_are_dropped_by_the_new_group_coordinator(cluster):
    group, tag = f"g-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    values = [f"a-{tag}-{i}" for i in range(2)]
    produce_input(cluster, 1, values)
    before = committed(cluster, group, [1])[1]
    victim, _ = transform_with_the_group_coordinator_killed(cluster, group, 1, False, values)
    try:
        assert group_coordinator(cluster, group) != victim.broker_id
        assert committed(cluster, group, [1]) == {1: before}  # read_committed: require_stable waits for the marker
        out = read_values(cluster, "out", "read_committed", 0)
        assert not [v for v in out if v.startswith(f"A-{tag.upper()}")]
    finally:
        victim.start()
