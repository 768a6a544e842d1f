"""Produce v0-v2 with legacy message sets (magic 0 and 1) on a real broker: kafka-python pinned to an old
release's protocol produces, plain and gzip-compressed, and a current consumer reads every record with its key
and timestamp from the up-converted batches; a set with a bad CRC is refused with CORRUPT_MESSAGE and nothing
is appended."""

from __future__ import annotations

import uuid

import pytest

from sparklog.protocol.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from sparklog.records import compression, legacy

TIMEOUT_S = 30

SESSION_TIMEOUT_MS = 18000  # Kafka's default


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import started_cluster

    return started_cluster(request, f"{zookeeper.connect_string}/legacy-{uuid.uuid4().hex}",
                           tmp_path_factory.mktemp("legacy"), 1, SESSION_TIMEOUT_MS)


def new_topic(cluster) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    from integration.conftest import wait_for_leaders

    name = f"legacy-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(30)
    wait_for_leaders(cluster.bootstrap, name, 1)
    return name


def read_all(cluster, topic: str, count: int) -> list:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, 0)])
    found = []
    try:
        while len(found) < count:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"only {len(found)} of {count} records read"
            assert message.error() is None, message.error()
            found.append((message.offset(), message.key(), message.value(), message.timestamp()[1]))
    finally:
        consumer.close()
    return found


@pytest.mark.parametrize("api_version, magic", [((0, 10, 0), 1), ((0, 9), 0), ((0, 8, 2), 0)])
@pytest.mark.parametrize("codec", [None, "gzip"])
def test_kafka_python_pinned_to_an_old_protocol_produces_and_a_current_consumer_reads_it(cluster, api_version,
                                                                                        magic, codec):
    from kafka import KafkaProducer

    topic = new_topic(cluster)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, api_version=api_version, compression_type=codec,
                             linger_ms=50)
    try:
        futures = [producer.send(topic, key=b"k%d" % i, value=b"v%d" % i, partition=0, timestamp_ms=1_700_000_000_000 + i)
                   for i in range(10)]
        producer.flush(TIMEOUT_S)
        offsets = [f.get(TIMEOUT_S).offset for f in futures]
    finally:
        producer.close()
    assert sorted(offsets) == list(range(10))
    found = read_all(cluster, topic, 10)
    timestamps = [1_700_000_000_000 + i for i in range(10)] if magic == 1 else [-1] * 10
    assert found == [(i, b"k%d" % i, b"v%d" % i, timestamps[i]) for i in range(10)]


def test_a_legacy_set_with_a_bad_crc_is_refused_and_nothing_is_appended(cluster):
    from support.wire import request

    from sparklog.protocol.api_keys import ApiKey

    topic = new_topic(cluster)
    good = legacy.encode([(b"k", b"kept", 5)], 1, compression.GZIP)
    bad = bytearray(legacy.encode([(b"k", b"lost", 5)], 1))
    bad[-1] ^= 0xFF  # the value's last byte: the CRC no longer matches
    host, port = cluster.bootstrap.split(",")[0].rsplit(":", 1)
    for records, code in ((bytes(bad), 2), (good, 0)):  # CORRUPT_MESSAGE, then NONE
        body = ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
            TopicProduceData(name=topic, partition_data=[PartitionProduceData(index=0, records=records)])])
        response = request(host, int(port), ApiKey.PRODUCE, 2, body, timeout=TIMEOUT_S)
        (part,) = response.responses[0].partition_responses
        assert part.error_code == code, part
    assert part.base_offset == 0
    assert [(o, v) for o, _, v, _ in read_all(cluster, topic, 1)] == [(0, b"kept")]
