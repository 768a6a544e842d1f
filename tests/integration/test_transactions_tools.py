"""`sparklog transactions list | describe | describe-producers | abort` through the real command line, against
three real brokers and a confluent-kafka transactional producer whose transaction is left open (hanging):
DescribeProducers gives its first offset, and `abort` at that offset (KIP-664) ends it, so the last stable
offset reaches the high watermark and read_committed readers get past it."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from support.cluster import wait_until
from support.transactions import TIMEOUT_S, producer, transaction_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    return transaction_cluster(request, zookeeper, tmp_path_factory, "txntools", topics=(("hang", 1), ("done", 1)))


def sparklog(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparklog.cli", "transactions", "--bootstrap-server",
                           cluster.bootstrap, *args], capture_output=True, text=True, timeout=120)


def open_transaction(cluster, topic: str, records: int, commit: bool = False):
    """A transactional producer that wrote `records` to partition 0 of `topic`, its transaction left open."""
    p = producer(cluster, f"tx-{uuid.uuid4().hex[:8]}", **{"transaction.timeout.ms": 120000})
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    for i in range(records):
        p.produce(topic, value=f"v{i}".encode(), partition=0)
    assert p.flush(TIMEOUT_S) == 0
    if commit:
        p.commit_transaction(TIMEOUT_S)
    return p


def watermarks(cluster, topic: str, isolation: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "wm", "isolation.level": isolation})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=TIMEOUT_S)[1]
    finally:
        consumer.close()


def rows(done: subprocess.CompletedProcess) -> list[list[str]]:
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()[1:]]


def test_list_describe_and_describe_producers_show_an_open_transaction(cluster):
    p = open_transaction(cluster, "done", 2)
    (row,) = [r for r in rows(sparklog(cluster, "list")) if r[3] == "Ongoing"]
    assert row[0].startswith("tx-")
    described = sparklog(cluster, "describe", "--transactional-id", row[0])
    assert rows(described)[0][4] == "Ongoing" and rows(described)[0][-1] == "done-0", described.stdout
    start = watermarks(cluster, "done", "read_committed")
    (producer_row,) = rows(sparklog(cluster, "describe-producers", "--topic", "done", "--partition", "0"))
    assert producer_row[0] == rows(described)[0][2] and int(producer_row[5]) == start == 0
    p.commit_transaction(TIMEOUT_S)
    (producer_row,) = rows(sparklog(cluster, "describe-producers", "--topic", "done", "--partition", "0"))
    assert int(producer_row[5]) == -1, producer_row


def test_abort_ends_a_hanging_transaction_at_its_start_offset(cluster):
    open_transaction(cluster, "hang", 1, commit=True)
    hanging = open_transaction(cluster, "hang", 3)  # noqa: F841 - alive, its transaction open
    assert watermarks(cluster, "hang", "read_committed") == 2  # one record and its commit marker
    wrong = sparklog(cluster, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "5")
    assert wrong.returncode == 1 and wrong.stderr.count("\n") == 1 and "open transactions start at [2]" in wrong.stderr
    done = sparklog(cluster, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "2")
    assert done.returncode == 0 and "starting at offset 2 of hang-0" in done.stdout, done.stderr
    end = watermarks(cluster, "hang", "read_uncommitted")
    assert end == 6  # the committed record, its marker, the three hanging ones, the abort marker
    wait_until(lambda: watermarks(cluster, "hang", "read_committed") == end, "the LSO past the aborted one", 30)
    assert read_committed(cluster, "hang", end) == [b"v0"]  # the hanging records aborted, not committed


def read_committed(cluster, topic: str, end: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"rc-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values, tp = [], TopicPartition(topic, 0)
    try:
        wait_until(lambda: values.extend(m.value() for m in consumer.consume(100, 0.5) if m.error() is None)
                   or consumer.position([tp])[0].offset >= end, f"{topic}-0 read to {end}", TIMEOUT_S)
    finally:
        consumer.close()
    return values


def test_describe_of_an_unknown_transactional_id_is_one_line(cluster):
    done = sparklog(cluster, "describe", "--transactional-id", "no-such-id")
    assert done.returncode == 1 and done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
