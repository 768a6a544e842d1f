"""Real Kafka clients against a real broker subprocess and a real ZooKeeper: confluent-kafka (librdkafka),
kafka-python and aiokafka produce and consume; every message is read back byte for byte."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
MESSAGES = 300
TIMEOUT_S = 30


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/interop-{uuid.uuid4().hex}"
    c = Cluster(zk_connect, tmp_path_factory.mktemp("interop"), brokers=1,
                overrides={"num.partitions": "2", "log.flush.interval.ms": "20"})
    request.addfinalizer(c.stop)
    return c.start()


def messages(tag: str, n: int = MESSAGES) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs; values of varied size, some binary, one empty."""
    out = []
    for i in range(n):
        value = os.urandom(i % 97) + f"{tag}-{i}".encode() * (1 + i % 13)
        out.append((f"k{i % 11}".encode(), value if i != 5 else b""))
    return out


def confluent_produce(bootstrap, topic, msgs, acks, compression):
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks, "compression.type": compression,
                         "linger.ms": 5, "enable.idempotence": False})
    for key, value in msgs:
        producer.produce(topic, value=value, key=key, on_delivery=lambda err, m: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []


def kafka_python_read_all(bootstrap, topic, expected_count) -> list[tuple[bytes, bytes]]:
    """Read every partition from the earliest offset with assign() (no group), in partition order."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", check_crcs=True)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        partitions = None
        while not partitions and time.monotonic() < deadline:
            partitions = consumer.partitions_for_topic(topic)
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: dict[int, list] = {p: [] for p in partitions}
        while sum(map(len, got.values())) < expected_count and time.monotonic() < deadline:
            for tp, records in consumer.poll(timeout_ms=500).items():
                got[tp.partition].extend((r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_confluent_produces_kafka_python_reads_back(cluster, acks, compression):
    topic = f"c2k-{acks}-{compression}"
    msgs = messages(topic)
    confluent_produce(cluster.bootstrap, topic, msgs, acks, compression)
    got = kafka_python_read_all(cluster.bootstrap, topic, len(msgs))
    assert sum(map(len, got.values())) == len(msgs)
    # per partition, the order of production; together, every message byte for byte
    assert sorted(m for part in got.values() for m in part) == sorted(msgs)
    for records in got.values():
        order = [msgs.index(m) for m in records]
        assert order == sorted(order)


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_kafka_python_produces_confluent_reads_back_and_commits(cluster, compression):
    from confluent_kafka import Consumer, TopicPartition
    from kafka import KafkaProducer

    topic = f"k2c-{compression}"
    msgs = messages(topic)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                             compression_type=None if compression == "none" else compression)
    futures = [producer.send(topic, key=k, value=v) for k, v in msgs]
    producer.flush(TIMEOUT_S)
    assert all(f.get(TIMEOUT_S).offset >= 0 for f in futures)
    producer.close()

    group = f"g-{compression}"
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(msgs) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append((m.key(), m.value() or b""))
        assert sorted(got) == sorted(msgs)
        # member-less commit and fetch through the offset registry
        committed = [TopicPartition(topic, p, 7 + p) for p in partitions]
        consumer.commit(offsets=committed, asynchronous=False)
        fetched = consumer.committed([TopicPartition(topic, p) for p in partitions], timeout=10)
        assert [(tp.partition, tp.offset) for tp in fetched] == [(p, 7 + p) for p in partitions]
    finally:
        consumer.close()


def test_aiokafka_metadata_produce_consume(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = "aio"
    msgs = messages(topic, 200)

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, compression_type="lz4", acks="all")
        await producer.start()
        try:
            partitions = await producer.partitions_for(topic)  # auto-creates through Metadata
            for key, value in msgs:
                await producer.send(topic, key=key, value=value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            assert topic in await consumer.topics()
            consumer.assign([TopicPartition(topic, p) for p in partitions])
            await consumer.seek_to_beginning()
            got = []
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < len(msgs) and time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=500)
                got.extend((r.key, r.value) for records in batch.values() for r in records)
            return got, partitions
        finally:
            await consumer.stop()

    got, partitions = asyncio.run(scenario())
    assert len(partitions) == 2  # auto-created with num.partitions
    assert sorted(got) == sorted(msgs)


def test_list_offsets_and_metadata_through_kafka_python_admin(cluster):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([NewTopic("adm", num_partitions=3, replication_factor=1)])
        assert "adm" in admin.list_topics()
        with pytest.raises(Exception, match="TopicAlreadyExists"):
            admin.create_topics([NewTopic("adm", num_partitions=3, replication_factor=1)])
        with pytest.raises(Exception, match="InvalidReplicationFactor"):
            admin.create_topics([NewTopic("adm-rf", num_partitions=1, replication_factor=5)])
    finally:
        admin.close()
    confluent_produce(cluster.bootstrap, "adm", messages("adm", 30), "1", "none")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        tps = [TopicPartition("adm", p) for p in range(3)]
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        assert all(begin[tp] == 0 for tp in tps)
        assert sum(end.values()) == 30
    finally:
        consumer.close()
