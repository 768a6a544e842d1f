"""Records produced inside transactions, read back with isolation.level=read_committed, on three real brokers:
committed transactions read, aborted ones never, a fenced zombie's records never, a transaction the coordinator
aborts at its timeout never (and it does not hold later ones back), and a consume-transform-produce loop whose
output is its input exactly once.

These need both halves of transactions: the coordinator (this branch) and the storage half (branch txnstore:
transactional batches accepted by the leader, the last stable offset, aborted transactions in Fetch). On the
coordinator alone the leader refuses transactional batches (INVALID_TXN_STATE) and the produce calls fail."""

from __future__ import annotations

import time
import uuid

import pytest

from support.cluster import wait_until
from support.transactions import (TIMEOUT_S, committed_after_markers, describe, producer, read_values,
                                  transaction_cluster)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return transaction_cluster(request, zookeeper, tmp_path_factory, "txnrc",
                               topics=(("in", 2), ("out", 1), ("zombie", 1), ("expired", 1), ("src", 2), ("dst", 1)))


def produce_all(p, topic: str, values) -> None:
    for value in values:
        p.produce(topic, value=value.encode(), partition=0)
    assert p.flush(TIMEOUT_S) == 0


def test_committed_transactions_are_read_and_aborted_ones_are_not(cluster):
    p = producer(cluster, f"tx-{uuid.uuid4().hex[:8]}")
    p.init_transactions(TIMEOUT_S)
    for prefix, commit in (("c", True), ("a", False), ("d", True)):
        p.begin_transaction()
        produce_all(p, "out", [f"{prefix}{i}" for i in range(5)])
        p.commit_transaction(TIMEOUT_S) if commit else p.abort_transaction(TIMEOUT_S)
    committed = [f"{x}{i}" for x in "cd" for i in range(5)]
    assert read_values(cluster, "out", "read_committed", 10) == committed
    assert sorted(read_values(cluster, "out", "read_uncommitted", 15)) == sorted(
        committed + [f"a{i}" for i in range(5)])


def test_a_fenced_zombie_s_records_are_never_read_committed(cluster):
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = producer(cluster, tid)
    zombie.init_transactions(TIMEOUT_S)
    zombie.begin_transaction()
    produce_all(zombie, "zombie", [f"z{i}" for i in range(4)])
    successor = producer(cluster, tid)
    successor.init_transactions(TIMEOUT_S)
    successor.begin_transaction()
    produce_all(successor, "zombie", ["s0", "s1"])
    successor.commit_transaction(TIMEOUT_S)
    assert read_values(cluster, "zombie", "read_committed", 2) == ["s0", "s1"]


def test_an_expired_transaction_is_aborted_and_does_not_hold_back_later_ones(cluster):
    """The last stable offset is never stuck longer than the transaction timeout."""
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    stale = producer(cluster, tid, **{"transaction.timeout.ms": 3000, "message.timeout.ms": 3000})
    stale.init_transactions(TIMEOUT_S)
    stale.begin_transaction()
    produce_all(stale, "expired", ["e0", "e1", "e2"])
    wait_until(lambda: describe(cluster, tid).transaction_state == "CompleteAbort", "the coordinator's abort",
               TIMEOUT_S)
    later = producer(cluster, f"tx-{uuid.uuid4().hex[:8]}")
    later.init_transactions(TIMEOUT_S)
    later.begin_transaction()
    produce_all(later, "expired", ["l0", "l1"])
    later.commit_transaction(TIMEOUT_S)
    assert read_values(cluster, "expired", "read_committed", 2) == ["l0", "l1"]


def test_consume_transform_produce_writes_each_input_once(cluster):
    from confluent_kafka import Consumer, Producer

    inputs = [f"v{i}" for i in range(40)]
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    for i, value in enumerate(inputs):
        plain.produce("src", value=value.encode(), partition=i % 2)
    assert plain.flush(TIMEOUT_S) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": "read_committed"})
    consumer.subscribe(["src"])
    worker = producer(cluster, f"tx-{uuid.uuid4().hex[:8]}")
    worker.init_transactions(TIMEOUT_S)
    done, deadline = 0, time.monotonic() + TIMEOUT_S
    try:
        while done < len(inputs) and time.monotonic() < deadline:
            batch = [m for m in consumer.consume(10, 0.5) if m.error() is None]
            if not batch:
                continue
            worker.begin_transaction()
            for m in batch:
                worker.produce("dst", value=m.value().upper(), partition=0)
            worker.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                               consumer.consumer_group_metadata(), TIMEOUT_S)
            worker.commit_transaction(TIMEOUT_S)
            done += len(batch)
    finally:
        consumer.close()
    assert sorted(read_values(cluster, "dst", "read_committed", len(inputs))) == sorted(v.upper() for v in inputs)
    ends = {0: 20, 1: 20}
    assert committed_after_markers(cluster, group, [0, 1], ends, topic="src") == ends
