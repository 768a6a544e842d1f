"""`kill -9` of a broker during a produce with acks=1: after restart every acknowledged message is there, a
torn tail is truncated, and the broker serves again."""

from __future__ import annotations

import threading
import time

import pytest

from support.cluster import Cluster

pytestmark = pytest.mark.slow

TIMEOUT_S = 30
SESSION_TIMEOUT_MS = 4000


@pytest.fixture
def one(request, zk_connect, tmp_path):
    # flush.visibility is "appended": acknowledged messages are visible at once and reach the disk only
    # every few seconds, so what survives the kill is mostly in the page cache, not yet fsynced
    c = Cluster(zk_connect, tmp_path, brokers=1, overrides={
        "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS), "log.flush.interval.ms": "5000",
        "log.flush.visibility": "appended",
        "log.segment.bytes": str(256 * 1024)})
    request.addfinalizer(c.stop)
    return c.start()


def read_all(bootstrap, topic, partitions, at_least) -> list[bytes]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        end = consumer.end_offsets(tps)
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=300).values():
                got.extend(r.value for r in records)
            if len(got) >= max(at_least, sum(end.values())):
                break
        return got
    finally:
        consumer.close()


def test_kill_9_during_acks_1_produce_loses_no_acknowledged_message(one, zk):
    from confluent_kafka import Producer

    from sparklog.coordination import topics

    topics.create_topic(zk, "crash", 2, 1)
    broker = one.brokers[1]
    acked: list[bytes] = []
    stop = threading.Event()

    def produce():
        producer = Producer({"bootstrap.servers": broker.address, "acks": "1", "linger.ms": 2,
                             "message.timeout.ms": 3000, "retries": 0})

        def delivered(err, msg):
            if err is None:
                acked.append(msg.value())

        i = 0
        while not stop.is_set():
            try:
                producer.produce("crash", value=b"m-%08d" % i, partition=i % 2, on_delivery=delivered)
                i += 1
            except BufferError:
                producer.poll(0.01)
            producer.poll(0)
        producer.flush(5)

    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + TIMEOUT_S
    while len(acked) < 20000 and time.monotonic() < deadline:
        time.sleep(0.05)
    broker.kill()  # SIGKILL mid-stream
    stop.set()
    thread.join(TIMEOUT_S)
    acknowledged = list(acked)
    assert len(acknowledged) >= 20000

    # tear the tail of the active segment of partition 0: half a batch header, as a torn write leaves it
    segment = max((broker.log_dir / "crash-0").glob("*.log"))
    with open(segment, "ab") as f:
        f.write(b"\x00" * 8 + b"\x00\x00\x10\x00" + b"\xff" * 20)
    torn_size = segment.stat().st_size

    broker.start()
    assert segment.stat().st_size == torn_size - 32  # recovery truncated the torn tail
    got = read_all(broker.address, "crash", 2, len(acknowledged))
    missing = set(acknowledged) - set(got)
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"

    # and it serves again
    producer = Producer({"bootstrap.servers": broker.address, "acks": "1"})
    producer.produce("crash", value=b"after-restart", partition=0)
    assert producer.flush(TIMEOUT_S) == 0
    assert b"after-restart" in read_all(broker.address, "crash", 2, len(got) + 1)
