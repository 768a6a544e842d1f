"""Log compaction under real brokers: a topic made compact is cleaned in the background, real clients
(librdkafka, kafka-python, sparklog's Consumer) read every key's final value (tombstones too, in batches with
a KIP-534 delete horizon) over the offset gaps, a null key
is refused with INVALID_RECORD, a follower that starts after the clean replicates the cleaned log, and
`sparklog topics describe` shows the dirty ratio and the cleaner's last run."""

from __future__ import annotations

import time

import pytest

from support.cluster import Cluster
from sparklog.records.batch import iter_batches

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
KEYS, VERSIONS = 40, 15
DELETED = 5  # keys deleted by a tombstone after the last version
TOPIC = "table"
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
          "delete.retention.ms": "600000"}


def produce(bootstrap: str) -> tuple[dict[bytes, bytes | None], int]:
    """Every key's final value (None: deleted) and how many records were written."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 7})
    final, count = {}, 0
    for version in range(VERSIONS + 2):
        if version == VERSIONS:  # delete some keys: their tombstones get a delete horizon (KIP-534) when cleaned
            for k in range(DELETED):
                producer.produce(TOPIC, key=b"key-%03d" % k, value=None, partition=0)
                final[b"key-%03d" % k] = None
            count += DELETED
        for k in range(0 if version < VERSIONS else DELETED, KEYS):  # then 2 more rounds: closed segments
            key, value = b"key-%03d" % k, b"v%02d-" % version + b"x" * 60
            producer.produce(TOPIC, key=key, value=value, partition=0)
            final[key] = value
            count += 1
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    return final, count


def refused_null_key(bootstrap: str):
    from confluent_kafka import Producer

    errors = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0})
    producer.produce(TOPIC, value=b"no key", partition=0, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(TIMEOUT_S)
    assert len(errors) == 1 and errors[0] is not None
    return errors[0]


def consume_confluent(bootstrap: str, until: int) -> list[tuple[int, bytes, bytes]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "c", "enable.auto.commit": False,
                         "enable.partition.eof": True, "check.crcs": True})
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
    got, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        while (not got or got[-1][0] < until - 1) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            got.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.close()
    return got


def consume_kafka_python(bootstrap: str, until: int) -> list[tuple[int, bytes, bytes]]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", check_crcs=True)
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        got, deadline = [], time.monotonic() + TIMEOUT_S
        while (not got or got[-1][0] < until - 1) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                got.extend((r.offset, r.key, r.value) for r in records)
        return got
    finally:
        consumer.close()


def consume_sparklog(bootstrap: str, until: int) -> list[tuple[int, bytes, bytes]]:
    from sparklog.client.consumer import Consumer

    consumer = Consumer(bootstrap_servers=bootstrap, **{"auto.offset.reset": "earliest"})
    try:
        consumer.assign([(TOPIC, 0)])
        consumer.seek((TOPIC, 0), 0)
        got, deadline = [], time.monotonic() + TIMEOUT_S
        while (not got or got[-1][0] < until - 1) and time.monotonic() < deadline:
            for message in consumer.poll(0.3):
                got.append((message.offset, message.key, message.value))
        return got
    finally:
        consumer.close()


def file_records(partition_dir) -> list[tuple[int, bytes, bytes]]:
    out = []
    for path in sorted(partition_dir.glob("*.log")):
        for batch in iter_batches(path.read_bytes()):
            out.extend((r.offset, r.key, r.value) for r in batch.records())
    return out


def horizons(partition_dir) -> list[int]:
    """The delete horizons written into the batches of a partition's files (cleaner.py Rule:
    tombstone-delete-horizon)."""
    return [b.delete_horizon_ms for path in sorted(partition_dir.glob("*.log"))
            for b in iter_batches(path.read_bytes()) if b.delete_horizon_ms is not None]


def wait_cleaned(zk, broker_id: int) -> dict:
    from sparklog.coordination import log_cleaner

    deadline, report = time.monotonic() + TIMEOUT_S, None
    while time.monotonic() < deadline:
        report = log_cleaner.read_all(zk).get((TOPIC, 0), {}).get(broker_id)
        if report and report["last_run"] and report["last_run"]["records_removed"]:
            return report
        time.sleep(0.2)
    raise AssertionError(f"broker {broker_id} did not report a clean of {TOPIC}-0 that removed records within "
                         f"{TIMEOUT_S} s; its last report: {report}")


def test_a_compacted_topic_is_cleaned_and_read_by_real_clients_and_a_late_follower(
        request, zk_connect, zk, tmp_path, capsys, monkeypatch):
    from sparklog.cli import main
    from sparklog.coordination import topics

    cluster = Cluster(zk_connect, tmp_path, brokers=2, overrides={"log.cleaner.backoff.ms": "100",
                                                                  "replica.lag.time.max.ms": "1000"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    leader, follower = cluster.brokers[1], cluster.brokers[2]
    follower.stop()
    topics.create_topic(zk, TOPIC, 1, 2, CONFIG, live_broker_ids=[1, 2], assignment={0: (1, 2)})
    final, end = produce(leader.address)
    from confluent_kafka import KafkaError

    assert refused_null_key(leader.address).code() == KafkaError.INVALID_RECORD  # Kafka's answer, 87

    report = wait_cleaned(zk, 1)
    assert 0 <= report["dirty_ratio"] < 1
    deadline = time.monotonic() + TIMEOUT_S  # the clients read batches whose tombstones carry a delete horizon
    while time.monotonic() < deadline and not horizons(leader.log_dir / f"{TOPIC}-0"):
        time.sleep(0.2)
    assert horizons(leader.log_dir / f"{TOPIC}-0")
    for consume in (consume_confluent, consume_kafka_python, consume_sparklog):
        got = consume(leader.address, end)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)) and len(got) < end, consume.__name__  # gaps, order kept
        assert {k: v for _, k, v in got} == final, consume.__name__  # every key's final value

    follower.start()  # replicates the cleaned log: batches with offset gaps inside, appended verbatim
    partition_dir = follower.log_dir / f"{TOPIC}-0"
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and (not partition_dir.exists() or
                                           {k: v for _, k, v in file_records(partition_dir)} != final):
        time.sleep(0.2)
    assert {k: v for _, k, v in file_records(partition_dir)} == final

    monkeypatch.setenv("COLUMNS", "250")
    assert main(["topics", "--zookeeper", zk_connect, "describe", TOPIC]) == 0
    out = capsys.readouterr().out
    assert "dirty ratio" in out and "1: 0." in out and "removed" in out
