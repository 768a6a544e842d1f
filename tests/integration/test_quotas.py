"""Client quotas on a real broker (design notes 4.9, KIP-219), with real clients.

A client-id byte-rate quota holds a confluent-kafka producer to 1 MiB/s and a consumer to 2 MiB/s (each within
±25%, measured in the steady state after the first windows) while an unquoted client beside them runs free;
librdkafka's statistics (`brokers[].throttle`, the throttle_time_ms the broker answered) show the throttle;
a quota set while a producer runs applies within two windows; and a client that ignores throttle_time_ms
(a raw socket pipelining Produce requests, never waiting) is held to the rate all the same by the muted
connection. The broker runs with quota.window.num=4 (1 s windows), so the steady state comes within seconds.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import pytest

from sparklog.coordination import client_quotas as cq
from sparklog.coordination.client_quotas import Entity

MIB = 1024 * 1024
VALUE = b"q" * 10_000
WINDOWS = 4  # quota.window.num; quota.window.size.seconds is 1
STEADY_FROM_S = WINDOWS + 1.0  # the first windows may burst (the rate is measured over at least num-1 windows)
MEASURE_S = 8.0


@pytest.fixture(scope="module")
def broker(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster, cluster_zookeeper

    cluster = Cluster(f"{zookeeper.connect_string}/quotas-{uuid.uuid4().hex}", tmp_path_factory.mktemp("quotas"),
                      brokers=1, overrides={"quota.window.num": str(WINDOWS), "quota.window.size.seconds": "1"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster, cluster_zookeeper(request, cluster)


@pytest.fixture
def topic(broker):
    from sparklog.coordination.topics import create_topic
    from integration.conftest import wait_for_leaders

    cluster, zk = broker
    name = f"q-{uuid.uuid4().hex[:8]}"
    create_topic(zk, name, 1, 1)
    wait_for_leaders(cluster.bootstrap, name, 1)
    return name


def set_quota(zk, client_id: str, key: str, value: str | None) -> None:
    if value is None:
        cq.alter_entity_config(zk, Entity(client=client_id), {}, remove=(key,))
    else:
        cq.alter_entity_config(zk, Entity(client=client_id), {key: value})


class Throttles:
    """librdkafka's statistics: the largest broker throttle (ms) it reported."""

    def __init__(self) -> None:
        self.max_ms = 0
        self.first_at: float | None = None

    def __call__(self, stats: str) -> None:
        for broker in json.loads(stats)["brokers"].values():
            if broker["nodeid"] >= 0 and broker["throttle"]["max"] > 0:
                self.max_ms = max(self.max_ms, broker["throttle"]["max"])
                if self.first_at is None:
                    self.first_at = time.monotonic()


def run_producer(bootstrap: str, topic: str, client_id: str, seconds: float, on_start=None):
    """Produce 10 KB values as fast as the client is let, for `seconds`: [(ack time, bytes)], Throttles."""
    from confluent_kafka import Producer

    throttles = Throttles()
    acked: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "acks": 1, "linger.ms": 5,
                         "batch.size": 65536,  # requests of 64 KB, not librdkafka's 1 MB: a quota's fine grain
                         "statistics.interval.ms": 100, "stats_cb": throttles,
                         "queue.buffering.max.kbytes": 2048})

    def delivered(err, msg):
        if err is None:
            acked.append((time.monotonic(), len(msg.value())))

    started = time.monotonic()
    if on_start is not None:
        on_start(started)
    while time.monotonic() - started < seconds:
        try:
            producer.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            producer.poll(0.02)
            continue
        producer.poll(0)
    producer.purge()
    producer.flush(10)
    return started, acked, throttles


def rate(events: list, start: float, end: float) -> float:
    return sum(size for at, size in events if start <= at < end) / (end - start)


def test_producer_held_to_its_quota_while_an_unquoted_one_runs_free(broker, topic):
    cluster, zk = broker
    set_quota(zk, "quoted-producer", cq.PRODUCER_BYTE_RATE, str(MIB))
    time.sleep(0.5)  # the broker's watch
    results = {}
    free = threading.Thread(target=lambda: results.__setitem__(
        "free", run_producer(cluster.bootstrap, topic, "free-producer", STEADY_FROM_S + MEASURE_S)))
    free.start()
    started, acked, throttles = run_producer(cluster.bootstrap, topic, "quoted-producer", STEADY_FROM_S + MEASURE_S)
    free.join()
    measured = rate(acked, started + STEADY_FROM_S, started + STEADY_FROM_S + MEASURE_S)
    free_started, free_acked, free_throttles = results["free"]
    free_rate = rate(free_acked, free_started + STEADY_FROM_S, free_started + STEADY_FROM_S + MEASURE_S)
    print(f"quoted producer {measured / MIB:.3f} MiB/s (throttle up to {throttles.max_ms} ms); "
          f"unquoted beside it {free_rate / MIB:.3f} MiB/s")
    assert 0.75 * MIB <= measured <= 1.25 * MIB
    assert throttles.max_ms > 0  # librdkafka's statistics show the throttle it was told
    assert free_throttles.max_ms == 0 and free_rate > 1.5 * MIB


def test_consumer_held_to_its_quota_while_an_unquoted_one_runs_free(broker, topic):
    from confluent_kafka import Consumer, Producer, TopicPartition

    cluster, zk = broker
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20})
    for _ in range(int(40 * MIB / len(VALUE))):
        while True:
            try:
                producer.produce(topic, VALUE)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(60) == 0
    set_quota(zk, "quoted-consumer", cq.CONSUMER_BYTE_RATE, str(2 * MIB))
    time.sleep(0.5)

    def consume(client_id: str, seconds: float, out: dict) -> None:
        throttles = Throttles()
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": client_id, "client.id": client_id,
                             "enable.auto.commit": False, "statistics.interval.ms": 100, "stats_cb": throttles})
        consumer.assign([TopicPartition(topic, 0, 0)])
        events = []
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            for msg in consumer.consume(100, 0.2):
                if not msg.error():
                    events.append((time.monotonic(), len(msg.value())))
        consumer.close()
        out.update(started=started, events=events, throttles=throttles)

    free: dict = {}
    quoted: dict = {}
    thread = threading.Thread(target=consume, args=("free-consumer", 6.0, free))
    thread.start()
    consume("quoted-consumer", STEADY_FROM_S + MEASURE_S, quoted)
    thread.join()
    measured = rate(quoted["events"], quoted["started"] + STEADY_FROM_S, quoted["started"] + STEADY_FROM_S + MEASURE_S)
    free_bytes = sum(size for _, size in free["events"])
    print(f"quoted consumer {measured / MIB:.3f} MiB/s (throttle up to {quoted['throttles'].max_ms} ms); "
          f"unquoted beside it read {free_bytes / MIB:.1f} MiB in 6 s")
    assert 1.5 * MIB <= measured <= 2.5 * MIB
    assert quoted["throttles"].max_ms > 0
    assert free["throttles"].max_ms == 0 and free_bytes >= 35 * MIB  # nearly all 40 MiB, unthrottled


def test_a_quota_set_at_runtime_applies_within_two_windows(broker, topic):
    cluster, zk = broker
    client_id = f"late-{uuid.uuid4().hex[:6]}"
    changed = {}

    def set_later(started: float) -> None:
        def go():
            time.sleep(3.0)  # running free until then
            changed["at"] = time.monotonic()
            set_quota(zk, client_id, cq.PRODUCER_BYTE_RATE, str(MIB // 4))
        threading.Thread(target=go).start()

    started, acked, throttles = run_producer(cluster.bootstrap, topic, client_id, 8.0, on_start=set_later)
    assert throttles.first_at is not None, "never throttled"
    delay = throttles.first_at - changed["at"]
    print(f"first throttle reported {delay:.2f} s after the quota was written")
    assert 0 <= delay <= 2.0 + 0.5  # two 1 s windows, plus the statistics interval and the client's poll


def test_a_client_that_ignores_throttle_time_is_held_by_the_muted_connection(broker, topic):
    """A raw socket pipelines Produce requests without ever looking at throttle_time_ms: the broker stops reading
    it while muted, so its requests are answered at the quota's rate, not at the rate it sends them."""
    from sparklog.protocol import ApiKey, PartitionProduceData, ProduceRequest, TopicProduceData
    from sparklog.protocol.registry import encode_request
    from sparklog.records.batch import build_batch

    cluster, zk = broker
    set_quota(zk, "rude", cq.PRODUCER_BYTE_RATE, str(MIB))
    time.sleep(0.5)
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    body = ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(name=topic, partition_data=[
        PartitionProduceData(index=0, records=build_batch([(None, VALUE * 5, None, None)]))])])
    frame = encode_request(ApiKey.PRODUCE, 8, 1, "rude", body)
    answered: list = []
    stop = threading.Event()
    with socket.create_connection((host, int(port))) as sock:
        def read() -> None:
            buffered = b""
            while not stop.is_set():
                try:
                    chunk = sock.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buffered += chunk
                while len(buffered) >= 4 and len(buffered) >= 4 + int.from_bytes(buffered[:4], "big"):
                    buffered = buffered[4 + int.from_bytes(buffered[:4], "big"):]
                    answered.append((time.monotonic(), len(frame)))

        reader = threading.Thread(target=read)
        reader.start()
        sock.settimeout(1.0)
        started = time.monotonic()
        sent = 0
        while time.monotonic() - started < STEADY_FROM_S + MEASURE_S:
            try:
                sock.sendall(frame)  # as fast as the socket takes them: never waits for a throttle
                sent += 1
            except socket.timeout:
                continue
        measured = rate(answered, started + STEADY_FROM_S, started + STEADY_FROM_S + MEASURE_S)
        stop.set()
        sock.shutdown(socket.SHUT_RDWR)
        reader.join()
    print(f"rude client: sent {sent} requests of {len(frame)} B, answered at {measured / MIB:.3f} MiB/s")
    assert 0.5 * MIB <= measured <= 1.25 * MIB


def test_a_throttled_incremental_fetch_keeps_its_session(broker, topic):
    """KIP-219 with KIP-227: a consumer in an incremental fetch session that owes a throttle gets an empty answer
    carrying its session's id (the session took the request; its epoch moved), as Kafka's
    IncrementalFetchContext.getThrottledResponse answers, so the consumer keeps its session instead of starting
    over with a full fetch of every partition. A replayed epoch is still refused."""
    from confluent_kafka import Producer

    from sparklog.broker.handlers.error_codes import INVALID_FETCH_SESSION_EPOCH
    from sparklog.protocol import ApiKey, FetchPartition, FetchRequest, FetchTopic
    from support.wire import exchange

    cluster, zk = broker
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for _ in range(20):
        producer.produce(topic, VALUE)
    assert producer.flush(30) == 0
    set_quota(zk, "sparklog-test", cq.CONSUMER_BYTE_RATE, str(64 * 1024))  # support.wire's client id

    def fetch(sock, session_id: int, epoch: int, topics):
        return exchange(sock, ApiKey.FETCH, 11, FetchRequest(
            replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=MIB, session_id=session_id, session_epoch=epoch,
            topics=topics, forgotten_topics_data=[]))

    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            full = fetch(sock, 0, 0, [FetchTopic(topic=topic, partitions=[
                FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=MIB)])])
            assert full.error_code == 0 and full.session_id != 0
            session_id, epoch, deadline = full.session_id, 1, time.monotonic() + 30
            while True:  # the session's own offset, 0, read again and again until the quota throttles it
                answer = fetch(sock, session_id, epoch, [])
                assert (answer.error_code, answer.session_id) == (0, session_id), (answer.throttle_time_ms, epoch)
                epoch += 1
                if answer.throttle_time_ms > 0:
                    break
                assert time.monotonic() < deadline, "never throttled"
            assert fetch(sock, session_id, epoch - 1, []).error_code == INVALID_FETCH_SESSION_EPOCH
    finally:
        set_quota(zk, "sparklog-test", cq.CONSUMER_BYTE_RATE, None)


# -- sparklog configs: kafka-configs' forms, through DescribeClientQuotas / AlterClientQuotas ----------------


def configs(capsys, *argv) -> tuple[int, str, str]:
    from sparklog.cli import main

    code = main(["configs", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_configs_alters_and_describes_quotas_through_the_brokers(broker, capsys):
    cluster, zk = broker
    server = ["--bootstrap-server", cluster.bootstrap]
    assert configs(capsys, *server, "--entity-type", "clients", "--entity-name", "cli-c", "--alter",
                   "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=2097152")[0] == 0
    assert json.loads(zk.get("/config/clients/cli-c")[0]) == {"version": 1, "config": {
        "producer_byte_rate": "1048576", "consumer_byte_rate": "2097152"}}
    assert configs(capsys, *server, "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients",
                   "--entity-default", "--alter", "--add-config", "request_percentage=12.5")[0] == 0
    assert json.loads(zk.get("/config/users/alice/clients/<default>")[0])["config"] == {"request_percentage": "12.5"}
    code, out, _ = configs(capsys, *server, "--entity-type", "clients", "--entity-name", "cli-c", "--describe")
    assert code == 0 and out == ("Quota configs for client-id 'cli-c' are consumer_byte_rate=2097152.0, "
                                 "producer_byte_rate=1048576.0\n")
    code, out, _ = configs(capsys, *server, "--entity-type", "users", "--entity-name", "alice", "--entity-type",
                           "clients", "--describe")
    assert out == "Quota configs for user 'alice', the default client-id are request_percentage=12.5\n"
    assert configs(capsys, *server, "--entity-type", "clients", "--entity-name", "cli-c", "--alter",
                   "--delete-config", "consumer_byte_rate")[0] == 0
    assert json.loads(zk.get("/config/clients/cli-c")[0])["config"] == {"producer_byte_rate": "1048576"}


@pytest.mark.parametrize("value", ["-1", "0", "abc", "1e300", "nan"])
def test_configs_refuses_bad_values_in_one_line_and_writes_nothing(broker, capsys, value):
    cluster, zk = broker
    code, out, err = configs(capsys, "--bootstrap-server", cluster.bootstrap, "--entity-type", "clients",
                             "--entity-name", "bad-c", "--alter", "--add-config", f"producer_byte_rate={value}")
    assert code == 1 and err.count("\n") == 1 and err.startswith("error: producer_byte_rate=")
    assert zk.exists("/config/clients/bad-c") is None


def test_the_broker_refuses_bad_values_too(broker):
    from sparklog.client.admin import AdminClient
    from sparklog.protocol.errors import KafkaError

    cluster, zk = broker
    with AdminClient(bootstrap_servers=cluster.bootstrap) as admin:
        with pytest.raises(KafkaError, match="producer_byte_rate"):
            admin.alter_client_quotas([("client-id", "raw-c")], {"producer_byte_rate": -5.0})
        with pytest.raises(KafkaError, match="unknown quota entity type"):
            admin.alter_client_quotas([("group", "g")], {"producer_byte_rate": 5.0})
    assert zk.exists("/config/clients/raw-c") is None


def test_configs_stores_and_deletes_scram_credentials_in_zookeeper_and_refuses_the_broker_form(broker, capsys):
    from sparklog.coordination.scram_credentials import read_credentials

    cluster, zk = broker
    add = ["--entity-type", "users", "--entity-name", "alice", "--alter",
           "--add-config", "SCRAM-SHA-256=[iterations=8192,password=alice-secret]"]
    code, _, err = configs(capsys, "--bootstrap-server", cluster.bootstrap, *add)
    assert code == 1 and err.count("\n") == 1 and "--zookeeper" in err
    code, _, err = configs(capsys, "--zookeeper", cluster.zk_connect, *add)
    assert code == 0, err
    assert read_credentials(zk, "alice")["SCRAM-SHA-256"].iterations == 8192
    assert configs(capsys, "--zookeeper", cluster.zk_connect, "--entity-type", "users", "--entity-name", "alice",
                   "--alter", "--delete-config", "SCRAM-SHA-256")[0] == 0
    assert "SCRAM-SHA-256" not in read_credentials(zk, "alice")


def test_configs_zookeeper_form_and_topics(broker, topic, capsys):
    cluster, zk = broker
    assert configs(capsys, "--zookeeper", cluster.zk_connect, "--entity-type", "users", "--entity-default",
                   "--alter", "--add-config", "producer_byte_rate=500000")[0] == 0
    assert json.loads(zk.get("/config/users/<default>")[0])["config"] == {"producer_byte_rate": "500000"}
    code, out, _ = configs(capsys, "--zookeeper", cluster.zk_connect, "--entity-type", "users", "--describe")
    assert "Quota configs for the default user are producer_byte_rate=500000.0" in out
    assert configs(capsys, "--zookeeper", cluster.zk_connect, "--entity-type", "users", "--entity-default",
                   "--alter", "--delete-config", "producer_byte_rate")[0] == 0
    server = ["--bootstrap-server", cluster.bootstrap]
    assert configs(capsys, *server, "--entity-type", "topics", "--entity-name", topic, "--alter",
                   "--add-config", "retention.ms=60000,cleanup.policy=compact")[0] == 0
    code, out, _ = configs(capsys, *server, "--entity-type", "topics", "--entity-name", topic, "--describe")
    assert out == f"Dynamic configs for topic {topic} are:\n  cleanup.policy=compact\n  retention.ms=60000\n"
