"""read_committed against real brokers (issue 23, the storage and read half): transactional batches taken by
a leader through a raw Produce, markers written by the leader with `append_control_batch` (support/
marker_broker.py: the broker process the coordinator's WriteTxnMarkers will drive), and confluent-kafka's
consumer: read_committed sees only committed and plain data and stops at the last stable offset,
read_uncommitted sees all data and no marker; followers carry the markers and the aborted-transaction index;
a SIGKILLed leader restarts with the same index and LSO."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from support import wire
from support.cluster import wait_until
from support.marker_broker import MarkerBroker
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from sparklog.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records.batch import build_batch

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
IDLE_S = 3  # a consumer that got nothing new for this long has read all it will get
OVERRIDES = {"zookeeper.session.timeout.ms": "6000", "replica.lag.time.max.ms": "3000",
             "log.flush.interval.ms": "20", "auto.create.topics.enable": "false",
             "transaction.partition.verification.enable": "false"}  # the test plays the coordinator by hand
COMMITTED, ABORTED, OPEN = 1000, 1001, 1002  # producer ids
RETRIED = (3, 6)  # UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER: a leader still opening its partition


@pytest.fixture(scope="module")
def brokers(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/txnread-{uuid.uuid4().hex}"
    base = tmp_path_factory.mktemp("txn")
    started = {}
    for i in (1, 2, 3):
        started[i] = MarkerBroker(i, zk_connect, base / f"broker-{i}" / "logs", OVERRIDES)
        request.addfinalizer(started[i].stop)
        started[i].start()
    return started


@pytest.fixture(scope="module")
def zk(request, brokers):
    from sparklog.coordination.connection import close, connect

    client = connect(brokers[1].zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


def bootstrap(brokers) -> str:
    return ",".join(b.address for b in brokers.values() if b.running)


def make_topic(zk, brokers, replicas: int) -> str:
    from sparklog.coordination.topics import create_topic

    name = f"txn-{uuid.uuid4().hex[:8]}"
    create_topic(zk, name, 1, replicas)
    leader(brokers, name)
    return name


def leader(brokers, topic: str) -> MarkerBroker:
    """The broker the metadata names as the partition's leader, once it names a running one."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    found = []

    def named() -> bool:
        try:
            metadata = AdminClient({"bootstrap.servers": bootstrap(brokers)}).list_topics(topic, timeout=10)
        except KafkaException:  # no answer within the call's timeout (a loaded machine): ask again
            return False
        part = metadata.topics[topic].partitions.get(0) if topic in metadata.topics else None
        if part is None or part.error is not None or part.leader not in brokers:
            return False
        found[:] = [brokers[part.leader]]
        return found[0].running

    wait_until(named, f"a running leader of {topic}-0", TIMEOUT_S)
    return found[0]


def produce(brokers, topic: str, value: bytes, producer_id: int = -1, sequence: int = -1) -> None:
    """One batch by a raw Produce (acks=all) to the leader; transactional when it has a producer id. Retried
    while the leader named by the metadata has not opened the partition yet (UNKNOWN_TOPIC_OR_PARTITION,
    NOT_LEADER_OR_FOLLOWER): a retried sequence is a duplicate, appended once."""
    records = build_batch([(None, value, None, None)], producer_id=producer_id, producer_epoch=0 if producer_id >= 0
                          else -1, base_sequence=sequence, is_transactional=producer_id >= 0)
    body = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(index=0, records=records)])])

    def answered() -> bool:
        host, port = leader(brokers, topic).address.split(":")
        response = wire.request(host, int(port), ApiKey.PRODUCE, 8, body, timeout=TIMEOUT_S)
        (part,) = response.responses[0].partition_responses
        assert part.error_code in (0, *RETRIED), (part.error_code, part.error_message)
        return part.error_code == 0

    wait_until(answered, f"the Produce of {value!r} to {topic}", TIMEOUT_S)


def write_history(brokers, topic: str) -> MarkerBroker:
    """Offsets: 0 p0, 1 c1, 2 a1, 3 c2, 4 a2, 5 commit, 6 abort, 7 p1, 8 o1 (left open), 9 p2."""
    produce(brokers, topic, b"p0")
    produce(brokers, topic, b"c1", COMMITTED, 0)
    produce(brokers, topic, b"a1", ABORTED, 0)
    produce(brokers, topic, b"c2", COMMITTED, 1)
    produce(brokers, topic, b"a2", ABORTED, 1)
    lead = leader(brokers, topic)
    assert lead.write_marker(topic, 0, COMMITTED, commit=True) == 5
    assert lead.write_marker(topic, 0, ABORTED, commit=False) == 6
    produce(brokers, topic, b"p1")
    produce(brokers, topic, b"o1", OPEN, 0)
    produce(brokers, topic, b"p2")
    assert leader(brokers, topic) is lead
    return lead


def consume(brokers, topic: str, isolation: str, until: int) -> list[tuple[int, bytes]]:
    """What confluent-kafka's consumer reads from the start: until it holds `until` records and nothing more
    came for IDLE_S (or TIMEOUT_S passed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap(brokers), "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "isolation.level": isolation})
    got, deadline, last = [], time.monotonic() + TIMEOUT_S, time.monotonic()
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        while time.monotonic() < deadline and (len(got) < until or time.monotonic() - last < IDLE_S):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                got.append((message.offset(), message.value()))
                last = time.monotonic()
    finally:
        consumer.close()
    return got


def committed_latest(brokers, topic: str) -> int | None:
    """ListOffsets latest under read_committed, from the leader (None: it cannot answer yet)."""
    lead = leader(brokers, topic)
    body = ListOffsetsRequest(replica_id=-1, isolation_level=1, topics=[ListOffsetsTopic(name=topic, partitions=[
        ListOffsetsPartition(partition_index=0, timestamp=-1)])])
    host, port = lead.address.split(":")
    (part,) = wire.request(host, int(port), ApiKey.LIST_OFFSETS, 5, body).topics[0].partitions
    assert part.error_code in (0, *RETRIED), part.error_code
    return part.offset if part.error_code == 0 else None


def txn_index(broker: MarkerBroker, topic: str) -> dict[str, bytes]:
    directory = broker.log_dir / f"{topic}-0"
    found = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".txnindex"):
            found[name] = (directory / name).read_bytes()
    return found


ALL = [(0, b"p0"), (1, b"c1"), (2, b"a1"), (3, b"c2"), (4, b"a2"), (7, b"p1"), (8, b"o1"), (9, b"p2")]
COMMITTED_BEFORE_THE_LSO = [(0, b"p0"), (1, b"c1"), (3, b"c2"), (7, b"p1")]


def test_read_committed_stops_at_the_lso_and_skips_aborted_data_on_rf3(brokers, zk):
    topic = make_topic(zk, brokers, 3)
    lead = write_history(brokers, topic)
    assert consume(brokers, topic, "read_committed", 4) == COMMITTED_BEFORE_THE_LSO
    assert committed_latest(brokers, topic) == 8  # o1's transaction is open
    assert consume(brokers, topic, "read_uncommitted", 8) == ALL
    wait_until(lambda: all(txn_index(b, topic) == txn_index(lead, topic) for b in brokers.values()),
               "every follower holds the leader's aborted-transaction index", TIMEOUT_S)
    assert len(txn_index(lead, topic)["00000000000000000000.txnindex"]) == 34  # one aborted transaction
    lead.write_marker(topic, 0, OPEN, commit=True)  # offset 10
    assert consume(brokers, topic, "read_committed", 6) == COMMITTED_BEFORE_THE_LSO + [(8, b"o1"), (9, b"p2")]
    assert committed_latest(brokers, topic) == 11


def test_a_sigkilled_or_stopped_leader_restarts_with_the_same_index_and_lso(brokers, zk):
    topic = make_topic(zk, brokers, 1)
    lead = write_history(brokers, topic)
    wait_until(lambda: committed_latest(brokers, topic) == 8, "the LSO at the open transaction", TIMEOUT_S)
    index = txn_index(lead, topic)
    lead.kill()
    lead.start()
    assert leader(brokers, topic) is lead  # RF 1: no other replica could lead it
    assert txn_index(lead, topic) == index
    wait_until(lambda: committed_latest(brokers, topic) == 8, "the LSO rebuilt at the open transaction", TIMEOUT_S)
    assert consume(brokers, topic, "read_committed", 4) == COMMITTED_BEFORE_THE_LSO
    assert consume(brokers, topic, "read_uncommitted", 8) == ALL
    lead.stop()  # a clean restart: the producer state snapshot at the log end, the index files trusted
    lead.start()
    wait_until(lambda: committed_latest(brokers, topic) == 8, "the LSO loaded at the open transaction", TIMEOUT_S)
    assert consume(brokers, topic, "read_committed", 4) == COMMITTED_BEFORE_THE_LSO
    lead.write_marker(topic, 0, OPEN, commit=False)  # the open transaction, reopened by recovery, aborts
    assert consume(brokers, topic, "read_committed", 5) == COMMITTED_BEFORE_THE_LSO + [(9, b"p2")]


def test_sparklogs_consumers_read_committed(brokers, zk):
    """sparklog's consumer with isolation.level=read_committed: aborted data and markers skipped, stopped at the
    LSO, end_offsets the LSO; read_uncommitted gets every data record and no marker."""
    from sparklog.client.consumer import Consumer

    topic = make_topic(zk, brokers, 3)
    write_history(brokers, topic)

    def read(isolation: str, until: int) -> tuple[list, int]:
        with Consumer(bootstrap(brokers), **{"isolation.level": isolation, "auto.offset.reset": "earliest"}) as c:
            c.assign([(topic, 0)])
            got, deadline, last = [], time.monotonic() + TIMEOUT_S, time.monotonic()
            while time.monotonic() < deadline and (len(got) < until or time.monotonic() - last < IDLE_S):
                records = c.poll(0.2)
                got += [(r.offset, r.value) for r in records]
                last = time.monotonic() if records else last
            return got, c.end_offsets([(topic, 0)])[(topic, 0)]

    assert read("read_committed", 4) == (COMMITTED_BEFORE_THE_LSO, 8)
    assert read("read_uncommitted", 8) == (ALL, 10)


def test_the_spark_source_reads_committed(brokers, zk, spark):
    """A batch query with kafka.isolation.level=read_committed: the committed and plain rows up to the LSO (its
    latest offsets are the LSO), never an aborted one; read_uncommitted reads every data row."""
    topic = make_topic(zk, brokers, 3)
    write_history(brokers, topic)

    def rows(isolation: str) -> list[tuple[int, bytes]]:
        df = (spark.read.format("sparklog").option("bootstrap.servers", bootstrap(brokers)).option("subscribe", topic)
              .option("kafka.isolation.level", isolation).load())
        return sorted((r.offset, bytes(r.value)) for r in df.select("offset", "value").collect())

    assert rows("read_committed") == COMMITTED_BEFORE_THE_LSO
    assert rows("read_uncommitted") == ALL
