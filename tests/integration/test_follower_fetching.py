"""KIP-392 follower fetching on real brokers (broker/replica_selector.py, broker/handlers/follower_reads.py,
client/read_replica.py): three brokers in subprocesses, in racks a, b and c, with Kafka's rack-aware
replica.selector.class, a real ZooKeeper, topics of replication factor 3 led by the rack-a broker. A
confluent-kafka consumer and sparklog's consumer with client.rack=b read every record, and the record bytes
come from the rack-b broker (each broker's sparklog_broker_topic_bytes_out_total, scraped from its Prometheus
endpoint: the leader's and the rack-c broker's stay 0); without client.rack they come from the leader, as before
KIP-392; the Spark source with kafka.client.rack=b reads from the rack-b broker too. Raw Fetch v11 requests show the leader's redirect and a follower's rules (what it serves, its epoch
check, OFFSET_OUT_OF_RANGE past the leader's high watermark, NOT_LEADER_OR_FOLLOWER to a fetch naming no rack).
The rack-b broker SIGKILLed under both readers sends them back to the leader with nothing lost or duplicated.
An unknown replica.selector.class stops a broker at start with one line."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from support.broker_metrics import total

from sparklog.broker.replica_selector import RACK_AWARE_SELECTOR
from sparklog.client.consumer import Consumer
from sparklog.protocol import ApiKey, FetchPartition, FetchRequest
from sparklog.protocol.fetch import FetchTopic
from support import wire
from support.cluster import BrokerProcess, BrokerStartError, Cluster, wait_until, wait_until_every_broker_knows_all

pytestmark = pytest.mark.slow

SESSION_MS = 3000
LAG_MS = 2000
TIMEOUT_S = 90
RECORDS = 300
VALUE_BYTES = 200
RACKS = {1: "a", 2: "b", 3: "c"}
LEADER, REPLICA_B, REPLICA_C = 1, 2, 3
OVERRIDES = {"zookeeper.session.timeout.ms": str(SESSION_MS), "replica.lag.time.max.ms": str(LAG_MS),
             "log.flush.interval.ms": "20", "auto.create.topics.enable": "false",
             "metrics.listener": "http://127.0.0.1:0", "replica.selector.class": RACK_AWARE_SELECTOR}
NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE, UNKNOWN_LEADER_EPOCH = 6, 1, 75


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    racked = Cluster(f"{zookeeper.connect_string}/kip392-{uuid.uuid4().hex}", tmp_path_factory.mktemp("kip392"),
                     brokers=3, overrides=OVERRIDES)
    for broker_id, rack in RACKS.items():
        racked.brokers[broker_id].overrides["broker.rack"] = rack
    request.addfinalizer(racked.stop)
    racked.start()
    wait_until_every_broker_knows_all(racked)
    return racked


def _value(i: int) -> bytes:
    return f"{i:08d}".encode().ljust(VALUE_BYTES, b".")


def _topic_led_by_a(cluster, records: int = RECORDS, partitions: int = 1) -> str:
    """A new topic on brokers 1, 2, 3 (leader 1, rack a), `records` records in (round robin), ISR full."""
    topic = f"kip392-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, partitions, replica_assignment=[[LEADER, REPLICA_B, REPLICA_C]] * partitions)
                         ])[topic].result(TIMEOUT_S)
    _produce(cluster, topic, range(records), partitions)
    wait_until(lambda: _isrs(admin, topic) == [(LEADER, (1, 2, 3))] * partitions, f"{topic}'s ISRs to be full",
               TIMEOUT_S)
    return topic


def _isrs(admin, topic: str):
    parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
    return [(part.leader, tuple(sorted(part.isrs))) for _, part in sorted(parts.items())]


def _produce(cluster, topic: str, indexes, partitions: int = 1) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for i in indexes:
        producer.produce(topic, _value(i), partition=i % partitions)
    assert producer.flush(TIMEOUT_S) == 0


def _bytes_out(broker: BrokerProcess, topic: str) -> float:
    return total(broker, "sparklog_broker_topic_bytes_out_total", topic=topic)


def _bytes_out_by_broker(cluster, topic: str) -> dict[int, float]:
    return {broker_id: _bytes_out(broker, topic) for broker_id, broker in cluster.brokers.items() if broker.running}


def _confluent(cluster, **settings) -> ConfluentConsumer:
    return ConfluentConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": uuid.uuid4().hex,
                              "enable.auto.commit": False, "auto.offset.reset": "earliest", **settings})


def _read_confluent(consumer: ConfluentConsumer, topic: str, count: int, seen: list | None = None) -> list[int]:
    seen = [] if seen is None else seen
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen.append(int(message.value()[:8]))
    return seen


def _read_sparklog(consumer: Consumer, count: int, seen: list | None = None) -> list[int]:
    seen = [] if seen is None else seen
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen) < count and time.monotonic() < deadline:
        seen += [int(record.value[:8]) for record in consumer.poll(0.5)]
    return seen


def test_confluent_kafka_with_client_rack_reads_every_record_from_the_rack_b_broker(cluster):
    topic = _topic_led_by_a(cluster)
    consumer = _confluent(cluster, **{"client.rack": "b"})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _read_confluent(consumer, topic, RECORDS) == list(range(RECORDS))
    finally:
        consumer.close()
    out = _bytes_out_by_broker(cluster, topic)
    assert out[REPLICA_B] >= RECORDS * VALUE_BYTES and out[LEADER] == 0 and out[REPLICA_C] == 0, out


def test_sparklog_consumer_with_client_rack_reads_every_record_from_the_rack_b_broker(cluster):
    """Two partitions: the consumer's fetch session with each broker carries the rack (fetch_sessions.py)."""
    topic = _topic_led_by_a(cluster, partitions=2)
    with Consumer(bootstrap_servers=cluster.bootstrap, **{"client.rack": "b", "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        assert sorted(_read_sparklog(consumer, RECORDS)) == list(range(RECORDS))
    out = _bytes_out_by_broker(cluster, topic)
    assert out[REPLICA_B] >= RECORDS * VALUE_BYTES and out[LEADER] == 0 and out[REPLICA_C] == 0, out


def test_the_spark_source_with_kafka_client_rack_reads_from_the_rack_b_broker(cluster, spark):
    topic = _topic_led_by_a(cluster)
    rows = (spark.read.format("sparklog").option("bootstrap.servers", cluster.bootstrap).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("kafka.client.rack", "b").load().select("value").collect())
    assert sorted(int(bytes(row.value)[:8]) for row in rows) == list(range(RECORDS))
    out = _bytes_out_by_broker(cluster, topic)
    assert out[REPLICA_B] >= RECORDS * VALUE_BYTES and out[LEADER] == 0 and out[REPLICA_C] == 0, out


def test_without_client_rack_both_consumers_read_from_the_leader(cluster):
    topic = _topic_led_by_a(cluster)
    consumer = _confluent(cluster)
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert _read_confluent(consumer, topic, RECORDS) == list(range(RECORDS))
    finally:
        consumer.close()
    with Consumer(bootstrap_servers=cluster.bootstrap, **{"auto.offset.reset": "earliest"}) as ours:
        ours.assign([(topic, 0)])
        assert _read_sparklog(ours, RECORDS) == list(range(RECORDS))
    out = _bytes_out_by_broker(cluster, topic)
    assert out[LEADER] >= 2 * RECORDS * VALUE_BYTES and out[REPLICA_B] == 0 and out[REPLICA_C] == 0, out


def _fetch(broker: BrokerProcess, topic: str, offset: int, rack: str, epoch: int = -1):
    host, port = broker.address.rsplit(":", 1)
    body = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0,
                        session_id=0, session_epoch=-1, rack_id=rack, forgotten_topics_data=[],
                        topics=[FetchTopic(topic=topic, partitions=[FetchPartition(
                            partition=0, current_leader_epoch=epoch, fetch_offset=offset, log_start_offset=-1,
                            partition_max_bytes=1 << 20)])])
    return wire.request(host, int(port), ApiKey.FETCH, 11, body).responses[0].partitions[0]


def test_raw_fetch_v11_leader_redirects_and_follower_serves_to_its_high_watermark(cluster):
    topic = _topic_led_by_a(cluster)
    leader, follower = cluster.brokers[LEADER], cluster.brokers[REPLICA_B]
    redirected = _fetch(leader, topic, 0, "b")
    assert (redirected.error_code, redirected.preferred_read_replica, len(redirected.records),
            redirected.high_watermark) == (0, REPLICA_B, 0, RECORDS)
    for rack in ("a", "z", ""):  # the leader's own rack, a rack of no broker, no rack: the leader serves
        own = _fetch(leader, topic, 0, rack)
        assert (own.error_code, own.preferred_read_replica) == (0, -1) and len(own.records) > 0, rack
    served = wait_until(lambda: (p := _fetch(follower, topic, 0, "b")).high_watermark == RECORDS and p,
                        "the rack-b follower to know the high watermark", TIMEOUT_S)
    assert (served.error_code, served.preferred_read_replica) == (0, -1) and len(served.records) > 0
    at_end = _fetch(follower, topic, RECORDS, "b")
    assert (at_end.error_code, len(at_end.records)) == (0, 0)
    assert _fetch(follower, topic, RECORDS + 10, "b").error_code == OFFSET_OUT_OF_RANGE
    assert _fetch(follower, topic, 0, "").error_code == NOT_LEADER_OR_FOLLOWER
    assert _fetch(follower, topic, 0, "b", epoch=1000).error_code == UNKNOWN_LEADER_EPOCH


def test_an_unknown_replica_selector_class_stops_the_broker_at_start_with_one_line(cluster, tmp_path):
    broker = BrokerProcess(9, cluster.zk_connect, tmp_path / "logs",
                           {**OVERRIDES, "replica.selector.class": "com.example.NearestReplicaSelector"})
    with pytest.raises(BrokerStartError) as failed:
        broker.start()
    broker.stop()
    assert "replica.selector.class" in str(failed.value) and "com.example.NearestReplicaSelector" in str(failed.value)


def test_the_rack_b_broker_sigkilled_under_both_readers_sends_them_to_the_leader_losing_nothing(cluster):
    """Last in the module: the rack-b broker is restarted at the end."""
    topic = _topic_led_by_a(cluster, RECORDS // 2)
    confluent = _confluent(cluster, **{"client.rack": "b", "fetch.error.backoff.ms": 100})
    ours = Consumer(bootstrap_servers=cluster.bootstrap, **{"client.rack": "b", "auto.offset.reset": "earliest"})
    try:
        confluent.assign([TopicPartition(topic, 0, 0)])
        ours.assign([(topic, 0)])
        theirs = _read_confluent(confluent, topic, RECORDS // 2)
        mine = _read_sparklog(ours, RECORDS // 2)
        assert _bytes_out(cluster.brokers[REPLICA_B], topic) >= RECORDS // 2 * VALUE_BYTES
        cluster.brokers[REPLICA_B].kill()
        _produce(cluster, topic, range(RECORDS // 2, RECORDS))
        _read_confluent(confluent, topic, RECORDS, theirs)
        _read_sparklog(ours, RECORDS, mine)
        assert theirs == list(range(RECORDS)) and mine == list(range(RECORDS))
        assert _bytes_out(cluster.brokers[LEADER], topic) >= RECORDS // 2 * VALUE_BYTES * 2
    finally:
        confluent.close()
        ours.close()
        cluster.brokers[REPLICA_B].start()
