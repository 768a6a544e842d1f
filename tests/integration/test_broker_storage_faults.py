"""Bit rot under a real broker: a flipped byte in a closed segment is fenced, never served; real clients
(librdkafka, kafka-python) read every other message around the gap; `sparklog topics describe` shows it."""

from __future__ import annotations

import argparse
import time

import pytest

from support.cluster import Cluster
from sparklog.records.batch import iter_batches

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
MESSAGES = 3000


def produce(bootstrap: str) -> list[bytes]:
    from confluent_kafka import Producer

    values = [b"rot-%06d-" % i + b"x" * 80 for i in range(MESSAGES)]
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 50})
    for value in values:
        producer.produce("rot", value=value, partition=0)
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return values


def rot_a_middle_batch(partition_dir) -> tuple[int, int]:
    """Flip a byte in the records of a batch in the middle of a closed segment; return its offset range."""
    segments = sorted(partition_dir.glob("*.log"))
    assert len(segments) >= 3
    path = segments[len(segments) // 2]
    data = path.read_bytes()
    batches, position = [], 0
    for batch in iter_batches(data):
        batches.append((position, batch))
        position += batch.size
    position, batch = batches[len(batches) // 2]
    with open(path, "r+b") as f:
        f.seek(position + batch.size - 5)
        f.write(bytes([data[position + batch.size - 5] ^ 0x20]))
    return batch.base_offset, batch.next_offset


def consume(bootstrap: str, expected: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "rot", "enable.auto.commit": False,
                         "check.crcs": True, "enable.partition.eof": True})
    consumer.assign([TopicPartition("rot", 0, OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        while len(got) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            got.append(msg.value())
    finally:
        consumer.close()
    return got


def consume_kafka_python(bootstrap: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", check_crcs=True)
    try:
        consumer.assign([TopicPartition("rot", 0)])
        got, deadline = [], time.monotonic() + TIMEOUT_S
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                got.extend(r.value for r in records)
        return got
    finally:
        consumer.close()


def test_bit_rot_is_fenced_and_real_clients_read_around_it(request, zk_connect, zk, tmp_path, capsys):
    from sparklog.client.topic_commands import _topics_describe
    from sparklog.coordination import log_faults, topics

    cluster = Cluster(zk_connect, tmp_path, brokers=1, overrides={"log.segment.bytes": str(64 * 1024)})
    request.addfinalizer(cluster.stop)
    cluster.start()
    broker = cluster.brokers[1]
    topics.create_topic(zk, "rot", 1, 1)
    values = produce(broker.address)
    broker.stop()  # a clean shutdown: the recovery point covers every segment
    start, end = rot_a_middle_batch(broker.log_dir / "rot-0")
    broker.start()

    got = consume(broker.address, MESSAGES - (end - start))
    assert got == values[:start] + values[end:]  # the damaged batch alone is missing; nothing is corrupt
    assert consume_kafka_python(broker.address, len(got)) == got  # the client that used to spin on a bad CRC

    deadline = time.monotonic() + TIMEOUT_S
    while not log_faults.read_all(zk).by_partition and time.monotonic() < deadline:
        time.sleep(0.1)
    assert log_faults.read_all(zk).by_partition == {("rot", 0): {1: ((start, end),)}}
    assert _topics_describe(argparse.Namespace(zookeeper=zk_connect, name="rot")) == 0
    assert f"1: {start}-{end - 1}" in capsys.readouterr().out
