"""`sparklog transactions find-hanging` (cli/find_hanging.py) through the real command line, against a broker
whose leader verification (KIP-890) is off, so that a zombie write after its transaction's abort can open a
transaction at a partition that no coordinator will end: find-hanging reports that one, by topic and by
broker, and not a live producer's open transaction on the same partition; `abort` at its start offset ends it
and find-hanging then reports nothing."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from support import wire
from support.cluster import started_cluster, wait_until
from support.transactions import SESSION_TIMEOUT_MS, TIMEOUT_S, TXN_SETTINGS, describe, producer
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records.batch import build_batch

pytestmark = pytest.mark.slow

SETTINGS = {**TXN_SETTINGS, "transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
            "offsets.topic.replication.factor": "1", "transaction.partition.verification.enable": "false"}


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    cluster = started_cluster(request, f"{zookeeper.connect_string}/hanging-{uuid.uuid4().hex}",
                              tmp_path_factory.mktemp("hanging"), 1, SESSION_TIMEOUT_MS, **SETTINGS)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept alive until the creation is answered
    admin.create_topics([NewTopic("hang", 1, 1)])["hang"].result(TIMEOUT_S)
    return cluster


def sparklog(cluster, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sparklog.cli", "transactions", "--bootstrap-server",
                           cluster.bootstrap, *args], capture_output=True, text=True, timeout=120)


def rows(done: subprocess.CompletedProcess) -> list[list[str]]:
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()[1:]]


def zombie_write(cluster, topic: str) -> int:
    """A transaction aborted by its producer, then one more batch of it (delayed in the network) taken by the
    leader, which does not verify: the producer id of the transaction left hanging."""
    tid = f"zombie-{uuid.uuid4().hex[:8]}"
    p = producer(cluster, tid)
    p.init_transactions(TIMEOUT_S)
    p.begin_transaction()
    p.produce(topic, b"a0", partition=0)
    assert p.flush(TIMEOUT_S) == 0
    state = describe(cluster, tid)
    p.abort_transaction(TIMEOUT_S)  # answered once PrepareAbort is written; the marker follows
    wait_until(lambda: describe(cluster, tid).transaction_state == "CompleteAbort", "the abort marker", TIMEOUT_S)
    late = build_batch([(None, b"zombie", None, None)], producer_id=state.producer_id,
                       producer_epoch=state.producer_epoch, base_sequence=1, is_transactional=True)
    body = ProduceRequest(transactional_id=tid, acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=late)])])
    broker = cluster.brokers[1]
    (part,) = wire.request(broker.host, broker.port, ApiKey.PRODUCE, 8, body).responses[0].partition_responses
    assert part.error_code == 0, part
    return state.producer_id


def test_find_hanging_reports_the_zombie_transaction_and_not_a_live_one(cluster):
    hanging_pid = zombie_write(cluster, "hang")  # offsets: a0 0, its abort marker 1, the zombie 2
    live = producer(cluster, f"live-{uuid.uuid4().hex[:8]}")
    live.init_transactions(TIMEOUT_S)
    live.begin_transaction()
    live.produce("hang", b"l0", partition=0)
    assert live.flush(TIMEOUT_S) == 0
    by_topic = rows(sparklog(cluster, "find-hanging", "--topic", "hang", "--max-transaction-timeout", "0"))
    assert [(r[0], r[1], r[2], r[5]) for r in by_topic] == [("hang", "0", str(hanging_pid), "2")]
    broker_done = sparklog(cluster, "find-hanging", "--broker-id", "1", "--max-transaction-timeout", "0")
    assert rows(broker_done) == by_topic, (broker_done.stdout, broker_done.stderr)
    assert rows(sparklog(cluster, "find-hanging", "--topic", "hang")) == []  # younger than 15 minutes
    done = sparklog(cluster, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "2")
    assert done.returncode == 0, done.stderr
    assert rows(sparklog(cluster, "find-hanging", "--topic", "hang", "--partition", "0",
                         "--max-transaction-timeout", "0")) == []
    live.commit_transaction(TIMEOUT_S)


def test_find_hanging_needs_a_scope(cluster):
    done = sparklog(cluster, "find-hanging")
    assert done.returncode == 1 and done.stderr.count("\n") == 1 and "--topic or --broker-id" in done.stderr
