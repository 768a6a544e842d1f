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

from support.cluster import wait_until
from support.transactions import (TIMEOUT_S, committed, committed_after_markers, describe, find_coordinator,
                                  group_metadata, offsets, producer, transaction_cluster)
from support.wire import request

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return transaction_cluster(request, zookeeper, tmp_path_factory, "txn")


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


def test_offsets_committed_in_a_transaction_keep_their_leader_epoch(cluster):
    """TxnOffsetCommit v2+ carries the committed leader epoch: OffsetFetch answers it once the marker committed
    the offsets, as Kafka's does (librdkafka's 0103_transactions compares it)."""
    from confluent_kafka import Consumer, TopicPartition

    tid, group = f"tx-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    p = producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("in", 0, 60, leader_epoch=3)], group_metadata(cluster, group),
                                  TIMEOUT_S)
    p.commit_transaction(TIMEOUT_S)
    assert committed_after_markers(cluster, group, [0], {0: 60}) == {0: 60}
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        found = c.committed([TopicPartition("in", 0)], TIMEOUT_S)
    finally:
        c.close()
    assert [(tp.offset, tp.leader_epoch) for tp in found] == [(60, 3)]


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


def test_a_coordinator_killed_after_the_decision_leaves_the_transaction_committed(cluster):
    """SIGKILL of the coordinator right after EndTxn answered (PrepareCommit replicated, markers maybe not sent):
    the leader elected for the id's __transaction_state partition loads it and the transaction ends committed
    (metadata.py Rule 3), its offsets visible. The group's coordinator is another broker (its death is
    test_transactional_offsets_failover.py's)."""
    group = f"g-{uuid.uuid4().hex[:8]}"
    tid = _id_coordinated_apart_from(cluster, group)
    p = producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    producer_id = describe(cluster, tid).producer_id
    p.begin_transaction()
    p.send_offsets_to_transaction(offsets(p0=21, p1=22), group_metadata(cluster, group), TIMEOUT_S)
    victim = cluster.brokers[find_coordinator(cluster, tid).node_id]
    p.commit_transaction(TIMEOUT_S)
    victim.kill()
    try:
        state = wait_until(lambda: (s := _describe_elsewhere(cluster, tid, victim)) and
                           s.transaction_state == "CompleteCommit" and s, "a new coordinator's CompleteCommit",
                           TIMEOUT_S)
        assert (state.producer_id, state.producer_epoch) == (producer_id, 0)
        assert committed_after_markers(cluster, group, [0, 1], {0: 21, 1: 22}) == {0: 21, 1: 22}
    finally:
        victim.start()


def _id_coordinated_apart_from(cluster, group: str) -> str:
    """A transactional id whose coordinator is not `group`'s coordinator."""
    from sparklog.protocol import ApiKey, FindCoordinatorRequest

    broker = cluster.brokers[1]
    group_node = wait_until(lambda: (f := request(broker.host, broker.port, ApiKey.FIND_COORDINATOR, 2,
                                                  FindCoordinatorRequest(key=group))).error_code == 0 and f,
                            "the group's coordinator", TIMEOUT_S).node_id
    for _ in range(100):
        tid = f"tx-{uuid.uuid4().hex[:8]}"
        if find_coordinator(cluster, tid).node_id != group_node:
            return tid
    raise AssertionError("every transactional id tried is coordinated by the group's coordinator")


def _describe_elsewhere(cluster, tid, victim):
    """The id's state at its coordinator, once that is not `victim`; None before (or while none answers)."""
    try:
        found = find_coordinator(cluster, tid)
        if found.error_code or found.node_id == victim.broker_id:
            return None
        return describe(cluster, tid)
    except (OSError, AssertionError):
        return None
