"""The idempotent producer end to end (issue 11): real brokers advertised behind TCP proxies that let a Produce
request reach the broker and lose its answer with the connection, so the client retries a batch that landed.
With confluent-kafka (librdkafka) and kafka-python 3 (enable.idempotence=true), and sparklog's own producer,
every message is in the log exactly once and in order: on one broker, across a broker SIGKILL and restart
(the state rebuilt from snapshot and log), and across a leader failover with RF3 (the followers carried it)."""

from __future__ import annotations

import random
import socket
import time
import uuid
from pathlib import Path

import pytest
from kazoo.exceptions import BadVersionError

from support.cluster import BrokerProcess
from support.proxy import TcpProxy
from support.zookeeper import wait_for

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
PRODUCE = 0  # the Produce api key, whose answers the proxies drop
OVERRIDES = {"zookeeper.session.timeout.ms": "6000", "auto.create.topics.enable": "false",
             "replica.lag.time.max.ms": "3000"}


SPARE_PORTS = (20_000, 32_000)  # below Linux's ephemeral range (32768-60999), which outgoing connections use


def _spare_port() -> int:
    """A port nothing listens on, from outside the ephemeral range: a broker restarted on it cannot find it
    taken by some connection's local end (a port from bind(0) could be)."""
    while True:
        port = random.randrange(*SPARE_PORTS)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue


class ProxiedBroker:
    """A broker process that advertises a proxy in front of it: every client and replica goes through it."""

    def __init__(self, broker_id: int, zk_connect: str, base: Path):
        self.proxy = TcpProxy(("127.0.0.1", 0))  # its target is set at start
        self.process = BrokerProcess(broker_id, zk_connect, base / f"broker-{broker_id}" / "logs", {
            **OVERRIDES, "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.proxy.port}"})

    def start(self):
        """Start (again) on a fresh spare port behind the same proxy (the ready line names the proxy)."""
        self.process.port = _spare_port()
        self.proxy.target = ("127.0.0.1", self.process.port)
        self.process.start()

    def stop(self):
        self.process.stop()
        self.proxy.close()


@pytest.fixture(scope="module")
def brokers(request, zookeeper, tmp_path_factory):
    """Three proxied brokers shared by the module's tests (each test makes its own topics)."""
    zk_connect = f"{zookeeper.connect_string}/idem-{uuid.uuid4().hex}"
    base = tmp_path_factory.mktemp("idem")
    started = {i: ProxiedBroker(i, zk_connect, base) for i in (1, 2, 3)}
    for broker in started.values():
        request.addfinalizer(broker.stop)
        broker.start()
    return started


@pytest.fixture(scope="module")
def zk_client(request, brokers):
    from sparklog.coordination.connection import close, connect

    client = connect(next(iter(brokers.values())).process.zk_connect)
    request.addfinalizer(lambda: close(client))
    return client


def _bootstrap(brokers) -> str:
    return ",".join(b.proxy.address for b in brokers.values() if b.process.running)


def _topic(zk, replicas=1, leader=1) -> str:
    from sparklog.coordination import topics

    name = f"idem-{uuid.uuid4().hex[:8]}"
    order = [leader] + [i for i in (1, 2, 3) if i != leader][:replicas - 1]
    topics.create_topic(zk, name, 1, replicas, {"min.insync.replicas": str(min(2, replicas))},
                        assignment={0: order})
    return name


def _confluent(brokers):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": _bootstrap(brokers), "enable.idempotence": True, "linger.ms": 5,
                     "retry.backoff.ms": 50, "message.timeout.ms": 60_000, "batch.num.messages": 20})


def _values(brokers, topic) -> list[bytes]:
    """Every record of partition 0, from the start to the end offset asked first, read with kafka-python."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=_bootstrap(brokers), enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end, got = consumer.end_offsets([tp])[tp], []
        deadline = time.monotonic() + TIMEOUT_S
        while consumer.position(tp) < end:
            assert time.monotonic() < deadline, f"the consumer did not reach offset {end} of {topic}"
            got += [record.value for records in consumer.poll(500).values() for record in records]
        return got
    finally:
        consumer.close()


def _produce_confluent(producer, topic, values) -> list:
    errors = []
    for value in values:
        producer.produce(topic, value=value, partition=0,
                         on_delivery=lambda err, msg: err is not None and errors.append(err))
        producer.poll(0)
        time.sleep(0.002)  # several batches, several requests
    assert producer.flush(TIMEOUT_S * 2) == 0
    return errors


def test_confluent_kafka_retries_lost_answers_and_each_message_is_written_once(brokers, zk_client):
    topic = _topic(zk_client)
    proxy = brokers[1].proxy
    producer = _confluent(brokers)
    values = [b"c-%03d" % i for i in range(150)]
    producer.produce(topic, value=b"first", partition=0)
    assert producer.flush(TIMEOUT_S) == 0  # the producer id and metadata are in place: drops hit Produce
    before = proxy.statistics().dropped_responses
    proxy.drop_responses(PRODUCE, count=3)
    assert _produce_confluent(producer, topic, values) == []
    assert proxy.statistics().dropped_responses - before == 3  # three answers lost: three batches retried
    assert _values(brokers, topic) == [b"first"] + values


def test_kafka_python_retries_lost_answers_and_each_message_is_written_once(brokers, zk_client):
    from kafka import KafkaProducer

    topic = _topic(zk_client)
    proxy = brokers[1].proxy
    producer = KafkaProducer(bootstrap_servers=_bootstrap(brokers), enable_idempotence=True, linger_ms=5,
                             retry_backoff_ms=50, request_timeout_ms=5000)
    try:
        producer.send(topic, value=b"first", partition=0).get(TIMEOUT_S)
        proxy.drop_responses(PRODUCE, count=3)
        values = [b"k-%03d" % i for i in range(100)]
        futures = []
        for value in values:
            futures.append(producer.send(topic, value=value, partition=0))
            time.sleep(0.002)
        producer.flush(TIMEOUT_S * 2)
        assert [f.get(TIMEOUT_S).offset for f in futures] == list(range(1, 101))
    finally:
        producer.close(TIMEOUT_S)
    assert proxy.statistics().dropped_responses >= 3
    assert _values(brokers, topic) == [b"first"] + values


def test_sparklog_producer_is_idempotent_by_default(brokers, zk_client):
    from sparklog.client import Producer

    topic = _topic(zk_client)
    proxy = brokers[1].proxy
    with Producer(_bootstrap(brokers), **{"linger.ms": 5, "retry.backoff.ms": 50, "batch.num.messages": 20}) as p:
        p.send(topic, b"first", partition=0).get(TIMEOUT_S)
        proxy.drop_responses(PRODUCE, count=3)
        values = [b"s-%03d" % i for i in range(150)]
        futures = []
        for value in values:
            futures.append(p.send(topic, value, partition=0))
            time.sleep(0.002)
        p.flush(TIMEOUT_S * 2)
        assert [f.get(0).offset for f in futures] == list(range(1, 151))
    assert proxy.statistics().dropped_responses >= 3
    assert _values(brokers, topic) == [b"first"] + values


def test_a_retry_after_the_broker_was_killed_and_restarted_is_still_deduplicated(brokers, zk_client):
    topic = _topic(zk_client, leader=2)
    broker = brokers[2]
    producer = _confluent(brokers)
    assert _produce_confluent(producer, topic, [b"r-%03d" % i for i in range(20)]) == []
    broker.proxy.drop_responses(PRODUCE, count=1, then_cut=True)  # the answer is lost; the retry must wait
    producer.produce(topic, value=b"landed-once", partition=0)
    producer.poll(0)
    wait_for(lambda: broker.proxy.statistics().dropped_responses, TIMEOUT_S)
    broker.process.kill()  # SIGKILL: the state is rebuilt from the last snapshot and the log
    broker.start()
    broker.proxy.heal()  # now the producer's retry reaches the restarted broker
    assert _produce_confluent(producer, topic, [b"after"]) == []
    assert _values(brokers, topic) == [b"r-%03d" % i for i in range(20)] + [b"landed-once", b"after"]


def test_a_retry_to_the_new_leader_after_a_failover_is_still_deduplicated(brokers, zk_client):
    from sparklog.coordination import topics

    topic = _topic(zk_client, replicas=3, leader=3)
    wait_for(lambda: len(topics.partition_state(zk_client, topic, 0).isr) == 3, TIMEOUT_S)
    old = brokers[3]
    producer = _confluent(brokers)
    assert _produce_confluent(producer, topic, [b"f-%03d" % i for i in range(20)]) == []
    old.proxy.drop_responses(PRODUCE, count=1, then_cut=True)  # acks=all: replicated before the lost answer
    producer.produce(topic, value=b"landed-once", partition=0)
    producer.poll(0)
    wait_for(lambda: old.proxy.statistics().dropped_responses, TIMEOUT_S)
    old.process.kill()
    state = topics.partition_state(zk_client, topic, 0)
    survivors = [b for b in state.isr if b != 3]
    try:  # what the controller does when it sees the leader die (sooner than its session expiry)
        topics.set_partition_state(zk_client, topic, 0, topics.PartitionState(
            survivors[0], tuple(survivors), state.leader_epoch + 1, state.controller_epoch),
            expected_version=state.zk_version)
    except BadVersionError:
        pass  # the controller was first
    try:
        assert _produce_confluent(producer, topic, [b"after"]) == []
        assert _values(brokers, topic) == [b"f-%03d" % i for i in range(20)] + [b"landed-once", b"after"]
    finally:
        old.proxy.heal()
        old.start()
