"""The transaction coordinator against confluent-kafka's transactional producer, on three real brokers
(`__transaction_state` with replication factor 3): init_transactions, transactions of consumer offsets committed
and aborted (send_offsets_to_transaction: AddOffsetsToTxn, TxnOffsetCommit, EndTxn, the markers on
`__consumer_offsets`), a zombie fenced by a second instance, the coordinator's abort of an expired transaction,
an absurd timeout refused. Records produced inside a transaction and read_committed need the storage half of
transactions: test_transactions_read_committed.py."""

from __future__ import annotations

import time
import uuid

import pytest

from support.cluster import started_cluster, wait_until
from support.wire import request

pytestmark = pytest.mark.slow

TIMEOUT_S = 60
SESSION_TIMEOUT_MS = 6000
TXN_SETTINGS = {"transaction.state.log.num.partitions": "3", "transaction.state.log.replication.factor": "3",
                "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
                "transaction.max.timeout.ms": "120000", "offsets.topic.replication.factor": "3"}


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    c = started_cluster(request, f"{zookeeper.connect_string}/txn-{uuid.uuid4().hex}",
                        tmp_path_factory.mktemp("txn"), 3, SESSION_TIMEOUT_MS, **TXN_SETTINGS)
    admin = _admin(c)
    admin.create_topics([_new_topic("in", 2)])["in"].result(TIMEOUT_S)
    return c


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


def committed_after_markers(cluster, group: str, partitions, expected: dict):
    """The committed offsets once they are `expected` (EndTxn answers when the decision is written; the
    markers, which commit the offsets, follow), or the last ones read after TIMEOUT_S."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        found = committed(cluster, group, partitions)
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def committed(cluster, group: str, partitions):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = consumer.committed([TopicPartition("in", p) for p in partitions], TIMEOUT_S)
        return {tp.partition: tp.offset for tp in found}
    finally:
        consumer.close()


def offsets(**by_partition):
    from confluent_kafka import TopicPartition

    return [TopicPartition("in", int(p[1:]), o) for p, o in by_partition.items()]


def describe(cluster, tid: str):
    """DescribeTransactions at the id's coordinator (FindCoordinator key type 1, by the wire)."""
    from sparklog.protocol import ApiKey, FindCoordinatorRequest
    from sparklog.protocol.describe_transactions import DescribeTransactionsRequest

    broker = cluster.brokers[1]
    found = request(broker.host, broker.port, ApiKey.FIND_COORDINATOR, 2, FindCoordinatorRequest(key=tid, key_type=1))
    assert found.error_code == 0, found
    (state,) = request(found.host, found.port, ApiKey.DESCRIBE_TRANSACTIONS, 0,
                       DescribeTransactionsRequest(transactional_ids=[tid])).transaction_states
    return state


def test_offsets_committed_in_a_transaction_appear_and_aborted_ones_do_not(cluster):
    tid, group = f"tx-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    p = producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.send_offsets_to_transaction(offsets(p0=42, p1=7), group_metadata(cluster, group), TIMEOUT_S)
    p.commit_transaction(TIMEOUT_S)
    assert committed_after_markers(cluster, group, [0, 1], {0: 42, 1: 7}) == {0: 42, 1: 7}
    p.begin_transaction()
    p.send_offsets_to_transaction(offsets(p0=99), group_metadata(cluster, group), TIMEOUT_S)
    p.abort_transaction(TIMEOUT_S)
    state = wait_until(lambda: (s := describe(cluster, tid)).transaction_state == "CompleteAbort" and s,
                       "the abort completed", TIMEOUT_S)
    assert committed(cluster, group, [0, 1]) == {0: 42, 1: 7}
    assert (state.error_code, state.producer_epoch, state.topics) == (0, 0, [])


def test_a_second_instance_fences_the_first_whose_commit_fails(cluster):
    """The zombie: instance 1 has a transaction open when instance 2 calls init_transactions with the same id;
    the coordinator aborts instance 1's transaction (bumping the epoch) and instance 1's commit is fatal."""
    from confluent_kafka import KafkaError, KafkaException

    tid, group = f"tx-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    first = producer(cluster, tid)
    first.init_transactions(TIMEOUT_S)
    first.begin_transaction()
    first.send_offsets_to_transaction(offsets(p0=5), group_metadata(cluster, group), TIMEOUT_S)
    second = producer(cluster, tid)
    second.init_transactions(TIMEOUT_S)
    assert describe(cluster, tid).producer_epoch == 2  # 0, fenced to 1 by the abort, 2 for the new instance
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(TIMEOUT_S)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH), error
    assert committed(cluster, group, [0]) == {0: -1001}  # nothing committed: the zombie's offsets were aborted
    second.begin_transaction()
    second.send_offsets_to_transaction(offsets(p0=6), group_metadata(cluster, group), TIMEOUT_S)
    second.commit_transaction(TIMEOUT_S)
    assert committed_after_markers(cluster, group, [0], {0: 6}) == {0: 6}


def test_the_coordinator_aborts_a_transaction_open_past_its_timeout(cluster):
    from confluent_kafka import KafkaException

    tid, group = f"tx-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    p = producer(cluster, tid, **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.send_offsets_to_transaction(offsets(p0=11), group_metadata(cluster, group), TIMEOUT_S)
    started = time.monotonic()
    state = wait_until(lambda: (s := describe(cluster, tid)).transaction_state == "CompleteAbort" and s,
                       "the coordinator's abort", TIMEOUT_S)
    assert time.monotonic() - started < TIMEOUT_S
    assert state.producer_epoch == 1  # fenced
    with pytest.raises(KafkaException):
        p.commit_transaction(TIMEOUT_S)
    assert committed(cluster, group, [0]) == {0: -1001}


def test_an_absurd_transaction_timeout_is_invalid_transaction_timeout(cluster):
    from sparklog.protocol import ApiKey, InitProducerIdRequest

    tid = f"tx-{uuid.uuid4().hex[:8]}"
    describe(cluster, tid)  # finds (and so creates) the coordinator
    for broker in cluster.brokers.values():
        for timeout_ms in (0, -5, 120001):
            answer = request(broker.host, broker.port, ApiKey.INIT_PRODUCER_ID, 4,
                             InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=timeout_ms))
            assert (answer.error_code, answer.producer_id) == (50, -1), (broker, timeout_ms, answer)
