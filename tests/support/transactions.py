"""Transactions in integration tests: a three-broker cluster set for them, and confluent-kafka helpers.

Rule: every process started here is stopped by the finalizer of the fixture that asked for it (support/cluster.py).
"""

from __future__ import annotations

import time
import uuid

from support.cluster import started_cluster
from support.wire import request

TIMEOUT_S = 60
SESSION_TIMEOUT_MS = 6000
SETTLE_S = 2.0  # after the expected records arrive, how long a reader keeps polling for records it must not get
TXN_SETTINGS = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                "transaction.max.timeout.ms": "120000", "offsets.topic.replication.factor": "3"}


def transaction_cluster(request, zookeeper, tmp_path_factory, name: str, topics=(("in", 2),)):
    """Three brokers for one test module (TXN_SETTINGS), with `topics` (replication factor 3)."""
    cluster = started_cluster(request, f"{zookeeper.connect_string}/{name}-{uuid.uuid4().hex}",
                              tmp_path_factory.mktemp(name), 3, SESSION_TIMEOUT_MS, **TXN_SETTINGS)
    admin = _admin(cluster)
    for topic, partitions in topics:
        admin.create_topics([_new_topic(topic, partitions)])[topic].result(TIMEOUT_S)
    return cluster


def _admin(cluster):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": cluster.bootstrap})


def _new_topic(name, partitions):
    from confluent_kafka.admin import NewTopic

    return NewTopic(name, partitions, 3)


def producer(cluster, tid: str, **settings):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid, **settings})


def group_metadata(cluster, group: str):
    """A consumer's group metadata for send_offsets_to_transaction (the consumer closed after)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def committed_after_markers(cluster, group: str, partitions, expected: dict, topic: str = "in"):
    """The committed offsets once they are `expected` (EndTxn answers when the decision is written; the
    markers, which commit the offsets, follow), or the last ones read after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = committed(cluster, group, partitions, topic)
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def committed(cluster, group: str, partitions, topic: str = "in"):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in partitions], TIMEOUT_S)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def offsets(**by_partition):
    from confluent_kafka import TopicPartition

    return [TopicPartition("in", int(p[1:]), o) for p, o in by_partition.items()]


def find_coordinator(cluster, tid: str):
    """FindCoordinator (key type 1) asked of the first running broker."""
    from sparklog.protocol import ApiKey, FindCoordinatorRequest

    broker = next(b for b in cluster.brokers.values() if b.running)
    return request(broker.host, broker.port, ApiKey.FIND_COORDINATOR, 2, FindCoordinatorRequest(key=tid, key_type=1))


def describe(cluster, tid: str):
    """DescribeTransactions at the id's coordinator (FindCoordinator key type 1, by the wire)."""
    from sparklog.protocol import ApiKey
    from sparklog.protocol.describe_transactions import DescribeTransactionsRequest

    found = find_coordinator(cluster, tid)
    assert found.error_code == 0, found
    (state,) = request(found.host, found.port, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                       DescribeTransactionsRequest(transactional_ids=[tid])).transaction_states
    return state


def read_values(cluster, topic: str, isolation: str, expected: int) -> list[str]:
    """Every value of `topic` from its start, read until `expected` values came and SETTLE_S more passed."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"r-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False, "isolation.level": isolation})
    consumer.subscribe([topic])
    values, deadline, settle_until = [], time.monotonic() + TIMEOUT_S, None
    try:
        while time.monotonic() < (settle_until or deadline):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                values.append(message.value().decode())
            if settle_until is None and len(values) >= expected:
                settle_until = time.monotonic() + SETTLE_S
    finally:
        consumer.close()
    return values
