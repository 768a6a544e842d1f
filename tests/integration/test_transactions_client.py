"""sparklog's transactional producer (client/transactions.py) against three real brokers, RF 3: commit,
abort, read_committed, offsets in a transaction, fencing of a zombie, and KIP-939's prepare/complete from
another connection; confluent-kafka's consumer is the reader."""

from __future__ import annotations

import uuid

import pytest

from support.cluster import wait_until
from support.transactions import (TIMEOUT_S, committed, committed_after_markers, describe, offsets, read_values,
                                  transaction_cluster)

from sparklog.client.producer import Producer
from sparklog.client.transactions import TransactionError, complete_prepared

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return transaction_cluster(request, zookeeper, tmp_path_factory, "txnclient",
                               topics=(("in", 2), ("out", 1), ("zombie", 1), ("prepared", 1), ("failed", 1), ("empty", 1)))


@pytest.fixture
def producers(cluster):
    made = []

    def make(tid: str, **settings) -> Producer:
        made.append(Producer(bootstrap_servers=cluster.bootstrap, **{"transactional.id": tid, **settings}))
        return made[-1]

    yield make
    for p in made:
        p.close(5)


def send_all(p: Producer, topic: str, values) -> None:
    for value in values:
        p.send(topic, value.encode(), partition=0)


def test_committed_transactions_are_read_committed_and_aborted_ones_are_not(producers, cluster):
    p = producers(f"c-{uuid.uuid4().hex[:8]}")
    p.init_transactions(TIMEOUT_S)
    for prefix, commit in (("c", True), ("a", False), ("d", True)):
        p.begin_transaction()
        send_all(p, "out", [f"{prefix}{i}" for i in range(5)])
        p.commit_transaction(TIMEOUT_S) if commit else p.abort_transaction(TIMEOUT_S)
    committed = [f"{x}{i}" for x in "cd" for i in range(5)]
    assert read_values(cluster, "out", "read_committed", 10) == committed
    assert sorted(read_values(cluster, "out", "read_uncommitted", 15)) == sorted(
        committed + [f"a{i}" for i in range(5)])


def test_a_transaction_with_nothing_in_it_commits_and_aborts_without_troubling_the_coordinator(producers, cluster):
    """A transaction that added no partition and no offsets ends without EndTxn, as Kafka's producer ("Not sending
    EndTxn for completed transaction since no partitions or offsets were successfully added") and librdkafka end
    it: the coordinator never heard of it, and answers an EndTxn for it INVALID_TXN_STATE."""
    p = producers(f"e-{uuid.uuid4().hex[:8]}")
    p.init_transactions(TIMEOUT_S)
    for end in ("commit", "abort", "commit"):
        p.begin_transaction()
        p.commit_transaction(TIMEOUT_S) if end == "commit" else p.abort_transaction(TIMEOUT_S)
    p.begin_transaction()
    send_all(p, "empty", ["after-empty"])
    p.commit_transaction(TIMEOUT_S)
    assert read_values(cluster, "empty", "read_committed", 1) == ["after-empty"]


def test_a_send_outside_a_transaction_is_refused(producers):
    p = producers(f"s-{uuid.uuid4().hex[:8]}")
    with pytest.raises(TransactionError, match="outside a transaction"):
        p.send("out", b"x")
    p.init_transactions(TIMEOUT_S)
    with pytest.raises(TransactionError, match="begin_transaction"):
        p.send_many("out", [b"x"])


def test_offsets_sent_in_a_committed_transaction_are_the_group_s_and_aborted_ones_are_not(producers, cluster):
    group = f"g-{uuid.uuid4().hex[:8]}"
    tid = f"o-{uuid.uuid4().hex[:8]}"
    p = producers(tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    send_all(p, "out", ["o0"])
    p.send_offsets_to_transaction(offsets(p0=5, p1=7), group, TIMEOUT_S)
    p.commit_transaction(TIMEOUT_S)
    assert committed_after_markers(cluster, group, [0, 1], {0: 5, 1: 7}) == {0: 5, 1: 7}
    p.begin_transaction()
    send_all(p, "out", ["o1"])
    p.send_offsets_to_transaction(offsets(p0=9, p1=9), group, TIMEOUT_S)
    p.abort_transaction(TIMEOUT_S)
    wait_until(lambda: describe(cluster, tid).transaction_state == "CompleteAbort", "the abort's markers", TIMEOUT_S)
    assert committed(cluster, group, [0, 1]) == {0: 5, 1: 7}


def test_a_zombie_is_fenced_fatally_and_its_records_never_read_committed(producers, cluster):
    tid = f"z-{uuid.uuid4().hex[:8]}"
    zombie = producers(tid)
    zombie.init_transactions(TIMEOUT_S)
    zombie.begin_transaction()
    send_all(zombie, "zombie", [f"z{i}" for i in range(4)])
    zombie.flush(TIMEOUT_S)
    successor = producers(tid)
    successor.init_transactions(TIMEOUT_S)
    successor.begin_transaction()
    send_all(successor, "zombie", ["s0", "s1"])
    successor.commit_transaction(TIMEOUT_S)
    with pytest.raises(TransactionError) as failure:
        zombie.commit_transaction(10)
    assert failure.value.fatal() and not failure.value.txn_requires_abort()
    with pytest.raises(TransactionError, match="fatal"):
        zombie.begin_transaction()
    assert read_values(cluster, "zombie", "read_committed", 2) == ["s0", "s1"]


def test_a_prepared_transaction_is_completed_from_another_connection_once_or_twice(producers, cluster):
    p = producers(f"p-{uuid.uuid4().hex[:8]}")
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    send_all(p, "prepared", ["p0", "p1"])
    prepared = p.prepare_transaction(TIMEOUT_S)
    p.close(5)  # closed without an abort: the transaction stays open
    complete_prepared(cluster.bootstrap, [prepared], commit=True, timeout=TIMEOUT_S)
    complete_prepared(cluster.bootstrap, [prepared], commit=True, timeout=TIMEOUT_S)  # idempotent
    assert read_values(cluster, "prepared", "read_committed", 2) == ["p0", "p1"]
