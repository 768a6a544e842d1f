"""The producer and the consumer against real brokers, and both against kafka-python and confluent-kafka."""

from __future__ import annotations

import random
import time
import uuid

import pytest

from sparklog.client import Consumer, ConsumerRecord, Message, MessageSet, Producer
from sparklog.client.admin import AdminClient
from sparklog.client.consumer import NoOffsetForPartition, OffsetOutOfRange
from sparklog.client.partitioner import partition_for_key

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    from support.cluster import Cluster

    zk_connect = f"{zookeeper.connect_string}/pc-{uuid.uuid4().hex}"
    cluster = Cluster(zk_connect, tmp_path_factory.mktemp("brokers"), brokers=2)
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


@pytest.fixture
def make_topic(cluster):
    def make(partitions: int = 4) -> str:
        name = f"pc-{uuid.uuid4().hex[:10]}"
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topic(name, partitions)
        return name

    return make


def sample_records(n: int, seed: int = 1) -> list[tuple]:
    """(key, value, headers, timestamp): null keys, empty and null values, headers with null values."""
    rnd = random.Random(seed)
    base = 1_700_000_000_000
    out = []
    for i in range(n):
        key = None if i % 3 == 0 else b"key-%d" % rnd.randrange(50)
        value = None if i % 97 == 5 else (b"" if i % 89 == 3 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 300))))
        headers = [("h", b"%d" % i), ("null", None)] if i % 4 == 0 else []
        out.append((key, value, headers, base + i))
    return out


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int, **settings) -> list[ConsumerRecord]:
    settings.setdefault("auto.offset.reset", "earliest")
    settings.setdefault("consumer.timeout.ms", 10_000)
    with Consumer(bootstrap, **settings) as consumer:
        consumer.assign([(topic, p) for p in range(partitions)])
        out = []
        for record in consumer:
            out.append(record)
            if len(out) >= expected:
                break
    return out


def wait_visible(consumer, tp, end: int, timeout: float = 20.0) -> None:
    """Until the high watermark reaches `end`: the broker exposes records once flushed (paper 3.1)."""
    deadline = time.monotonic() + timeout
    while consumer.end_offsets([tp])[tp] < end:
        assert time.monotonic() < deadline, f"{tp} high watermark stays below {end}"
        time.sleep(0.05)


def by_key_value(records) -> list:
    return sorted((r.key or b"", r.value or b"", tuple(r.headers), r.timestamp, r.partition) for r in records)


@pytest.mark.parametrize("codec", CODECS)
def test_roundtrip_with_every_codec_headers_null_keys_and_murmur2_partitions(cluster, make_topic, codec):
    topic = make_topic(5)
    records = sample_records(1500, seed=len(codec))
    with Producer(cluster.bootstrap, **{"compression.type": codec, "linger.ms": 2}) as producer:
        futures = [producer.send(topic, v, key=k, headers=h, timestamp=ts) for k, v, h, ts in records]
        producer.flush(30)
        metadata = [f.get(0) for f in futures]
    for (key, *_), md in zip(records, metadata):
        if key is not None:
            assert md.partition == partition_for_key(key, 5)
    assert len({(m.partition, m.offset) for m in metadata}) == len(records)
    got = consume_all(cluster.bootstrap, topic, 5, len(records))
    for record in got:
        assert isinstance(record, ConsumerRecord)
    expected = sorted((k or b"", v or b"", tuple(h), ts, md.partition) for (k, v, h, ts), md in zip(records, metadata))
    assert by_key_value(got) == expected
    offsets = {(r.partition, r.offset) for r in got}
    assert offsets == {(m.partition, m.offset) for m in metadata}
    nulls = [r for r in got if r.value is None]
    assert nulls and all(r.key is None or r.key.startswith(b"key-") for r in got)


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(cluster, make_topic, acks):
    topic = make_topic(1)
    with Producer(cluster.bootstrap, acks=acks) as producer:
        futures = [producer.send(topic, b"v%d" % i) for i in range(100)]
        producer.flush(30)
        offsets = [f.get(0).offset for f in futures]
    assert offsets == ([-1] * 100 if acks == 0 else list(range(100)))
    assert len(consume_all(cluster.bootstrap, topic, 1, 100)) == 100


def test_the_papers_sample_api_and_keyless_records_stick_per_batch(cluster, make_topic):
    topic = make_topic(4)
    with Producer(cluster.bootstrap, **{"batch.num.messages": 10, "linger.ms": 1000}) as producer:
        futures = producer.send(topic, MessageSet(Message(b"test message str"), Message(b"second")))
        spread = [producer.send(topic, b"x%d" % i) for i in range(200)]
        producer.flush(30)
    assert [f.get(0).partition for f in futures][0] == futures[1].get(0).partition
    parts = [f.get(0).partition for f in spread]
    # Sticky: each batch of 10 keyless records goes to one partition; over 20 batches, several partitions.
    for i in range(0, 200, 10):
        assert len(set(parts[i:i + 10])) <= 2
    assert len(set(parts)) > 1


def test_confluent_kafka_murmur2_random_puts_each_key_where_we_do(cluster, make_topic):
    from confluent_kafka import Producer as CProducer

    topic = make_topic(7)
    rnd = random.Random(11)
    keys = [bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 40))) for _ in range(300)]
    delivered = {}
    producer = CProducer({"bootstrap.servers": cluster.bootstrap, "partitioner": "murmur2_random"})
    for i, key in enumerate(keys):
        producer.produce(topic, value=b"%d" % i, key=key,
                         on_delivery=lambda err, msg, i=i: delivered.__setitem__(i, (err, msg.partition())))
    assert producer.flush(30) == 0
    with Producer(cluster.bootstrap) as ours:
        mine = [ours.send(topic, b"%d" % i, key=key) for i, key in enumerate(keys)]
        ours.flush(30)
    for i, key in enumerate(keys):
        err, partition = delivered[i]
        assert err is None
        assert partition == partition_for_key(key, 7) == mine[i].get(0).partition


@pytest.mark.parametrize("codec", ["none", "lz4", "gzip"])
def test_kafka_python_and_confluent_read_what_we_wrote(cluster, make_topic, codec):
    from confluent_kafka import Consumer as CConsumer, TopicPartition
    from kafka import KafkaConsumer

    topic = make_topic(2)
    records = sample_records(500, seed=7)
    with Producer(cluster.bootstrap, **{"compression.type": codec}) as producer:
        for k, v, h, ts in records:
            producer.send(topic, v, key=k, headers=h, timestamp=ts)
        producer.flush(30)
    expected = sorted((k or b"", v or b"", tuple(h), ts) for k, v, h, ts in records)

    kp = KafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest", enable_auto_commit=False,
                       consumer_timeout_ms=10_000, api_version=(2, 5))
    try:
        from kafka import TopicPartition as KTP

        kp.assign([KTP(topic, 0), KTP(topic, 1)])
        got_kp = []
        for m in kp:
            got_kp.append((m.key or b"", m.value or b"", tuple(m.headers), m.timestamp))
            if len(got_kp) == len(records):
                break
    finally:
        kp.close()
    assert sorted(got_kp) == expected

    cc = CConsumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused", "enable.auto.commit": False})
    try:
        cc.assign([TopicPartition(topic, p, 0) for p in (0, 1)])
        got_cc = []
        deadline = time.monotonic() + 30
        while len(got_cc) < len(records) and time.monotonic() < deadline:
            msg = cc.poll(0.5)
            if msg is None or msg.error():
                continue
            got_cc.append((msg.key() or b"", msg.value() or b"", tuple(msg.headers() or ()), msg.timestamp()[1]))
    finally:
        cc.close()
    assert sorted(got_cc) == expected


@pytest.mark.parametrize("codec", CODECS)
def test_we_read_what_kafka_python_and_confluent_wrote(cluster, make_topic, codec):
    from confluent_kafka import Producer as CProducer
    from kafka import KafkaProducer

    topic = make_topic(2)
    # kafka-python takes neither null header values nor a record with both key and value null.
    records = [(k, b"" if k is None and v is None else v, [(hk, hv or b"") for hk, hv in h], ts)
               for k, v, h, ts in sample_records(400, seed=3)]
    kp = KafkaProducer(bootstrap_servers=cluster.bootstrap, compression_type=None if codec == "none" else codec,
                       api_version=(2, 5), linger_ms=5)
    for k, v, h, ts in records:
        kp.send(topic, value=v, key=k, headers=h, timestamp_ms=ts)
    kp.flush(30)
    kp.close()
    cp = CProducer({"bootstrap.servers": cluster.bootstrap, "compression.type": codec, "linger.ms": 5})
    for k, v, h, ts in records:
        cp.produce(topic, value=v, key=k, headers=h or None, timestamp=ts)
    assert cp.flush(30) == 0
    got = consume_all(cluster.bootstrap, topic, 2, 2 * len(records))
    expected = sorted(2 * [(k or b"", v or b"", tuple(h), ts) for k, v, h, ts in records])
    assert sorted((r.key or b"", r.value or b"", tuple(r.headers), r.timestamp) for r in got) == expected


def test_positions_seek_offsets_lookups_and_poll(cluster, make_topic):
    topic = make_topic(1)
    tp = (topic, 0)
    with Producer(cluster.bootstrap) as producer:
        for i in range(300):
            producer.send(topic, b"v%d" % i, timestamp=1_000_000 + i * 10)
        producer.flush(30)
    with Consumer(cluster.bootstrap, **{"auto.offset.reset": "earliest", "max.poll.records": 50}) as consumer:
        consumer.assign([tp])
        wait_visible(consumer, tp, 300)
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 300}
        assert consumer.offsets_for_times({tp: 1_000_000 + 1005}) == {tp: (101, 1_000_000 + 1010)}
        assert consumer.offsets_for_times({tp: 10**13}) == {tp: None}
        assert consumer.position(tp, timeout=10) == 0
        batch = consumer.poll(10)
        assert [r.offset for r in batch] == list(range(50))
        assert consumer.position(tp) == 50
        consumer.seek(tp, 250)
        rest = []
        while len(rest) < 50:
            rest += consumer.poll(10)
        assert [r.offset for r in rest] == list(range(250, 300))
        assert rest[0].value == b"v250" and consumer.position(tp) == 300
        assert consumer.poll(0.2) == []
        consumer.seek_to_beginning()
        assert next(iter(consumer)).offset == 0


def test_auto_offset_reset_latest_and_none(cluster, make_topic):
    topic = make_topic(1)
    tp = (topic, 0)
    with Producer(cluster.bootstrap) as producer:
        for i in range(10):
            producer.send(topic, b"old")
        producer.flush(30)
    with Consumer(cluster.bootstrap, **{"auto.offset.reset": "largest"}) as consumer:
        wait_visible(consumer, tp, 10)
        consumer.assign([tp])
        assert consumer.position(tp, timeout=10) == 10
        with Producer(cluster.bootstrap) as producer:
            producer.send(topic, b"new").get(10)
        assert [r.value for r in consumer.poll(10)] == [b"new"]
    with Consumer(cluster.bootstrap, **{"auto.offset.reset": "none"}) as consumer:
        consumer.assign([tp])
        with pytest.raises(NoOffsetForPartition):
            consumer.poll(5)
    with Consumer(cluster.bootstrap, **{"auto.offset.reset": "none"}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)
        with pytest.raises(OffsetOutOfRange):
            consumer.poll(5)
    with Consumer(cluster.bootstrap, **{"auto.offset.reset": "smallest"}) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 1000)  # out of range: reset to the smallest
        assert consumer.poll(10)[0].offset == 0


def test_the_next_fetch_is_in_flight_while_the_application_iterates(cluster, make_topic):
    topic = make_topic(1)
    with Producer(cluster.bootstrap) as producer:
        for i in range(20_000):
            producer.send(topic, b"x" * 100)
        producer.flush(30)
    settings = {"auto.offset.reset": "earliest", "max.partition.fetch.bytes": 64 * 1024}
    with Consumer(cluster.bootstrap, **settings) as consumer:
        consumer.assign([(topic, 0)])
        records = iter(consumer)
        next(records)
        deadline = time.monotonic() + 10
        while consumer.queued_chunks() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        # While the application holds the first chunk, later fetches were answered and queued.
        assert consumer.queued_chunks() >= 1
        assert consumer._fetcher.fetches >= 2
        count = 1 + sum(1 for _, r in zip(range(19_999), records))
        assert count == 20_000


def test_a_producer_with_zookeeper_bootstrap(cluster, make_topic):
    topic = make_topic(1)
    with Producer(zookeeper=cluster.zk_connect) as producer:
        assert producer.send(topic, b"via zk").get(10).offset == 0
    assert consume_all(None, topic, 1, 1, **{"bootstrap.servers": cluster.bootstrap})[0].value == b"via zk"


def test_a_plain_consumer_commits_through_the_broker_and_resumes_there(cluster, make_topic):
    topic = make_topic(2)
    with Producer(cluster.bootstrap) as producer:
        for i in range(40):
            producer.send(topic, b"%d" % i, partition=i % 2)
        producer.flush(30)
    settings = {"group.id": "plain", "auto.offset.reset": "earliest", "consumer.timeout.ms": 10_000}
    with Consumer(cluster.bootstrap, **settings) as consumer:
        consumer.assign([(topic, 0), (topic, 1)])
        assert consumer.committed([(topic, 0), (topic, 1)]) == {}
        got = [next(iter(consumer)) for _ in range(10)]
        positions = {(topic, p): consumer.position((topic, p), timeout=10) for p in (0, 1)}
        consumer.commit()
        assert sum(positions.values()) == 10
        assert consumer.committed([(topic, 0), (topic, 1)]) == positions
    with Consumer(cluster.bootstrap, **settings) as again:
        again.assign([(topic, 0), (topic, 1)])
        rest = []
        for record in again:
            rest.append(record)
            if len(rest) == 30:
                break
    assert {(r.partition, r.offset) for r in got}.isdisjoint({(r.partition, r.offset) for r in rest})
    assert len({(r.partition, r.offset) for r in got + rest}) == 40


def test_a_request_of_several_batches_per_partition_is_acknowledged_batch_by_batch(cluster, make_topic):
    """The sender packs a partition's ready batches into one request; the broker takes such a record set
    whole, each batch at its own offsets (a refusal of it, as Kafka's v3+ check, failed every send here)."""
    topic = make_topic(1)
    with Producer(cluster.bootstrap, **{"batch.num.messages": 5, "linger.ms": 20, "acks": 1}) as producer:
        futures = [producer.send(topic, b"v%d" % i, partition=0) for i in range(600)]
        producer.flush(30)
        offsets = [f.get(10).offset for f in futures]
        metrics = producer.metrics()
        assert metrics["batches"] > metrics["requests"], metrics
    assert offsets == list(range(600))
    assert [r.value for r in consume_all(cluster.bootstrap, topic, 1, 600)] == [b"v%d" % i for i in range(600)]


def test_offsets_lookups_find_partitions_added_after_the_consumer_learned_the_topic(cluster, make_topic):
    """A consumer that already knows a topic asks again when a lookup names a partition its metadata lacks
    (partitions added since): a Spark stream's latest-offsets call failed with 'does not exist or has no
    leader' on the new partitions instead of reading them."""
    topic = make_topic(2)
    with Consumer(cluster.bootstrap) as consumer:
        assert consumer.end_offsets([(topic, 0), (topic, 1)], timeout=10) == {(topic, 0): 0, (topic, 1): 0}
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_partitions(topic, 4)
            admin.wait_for_leaders(topic, timeout=30, partitions=4)
        grown = [(topic, p) for p in range(4)]
        assert consumer.end_offsets(grown, timeout=10) == dict.fromkeys(grown, 0)
        assert consumer.beginning_offsets(grown, timeout=10) == dict.fromkeys(grown, 0)
        assert consumer.partitions_for_topic(topic, timeout=10) == [0, 1, 2, 3]


def test_a_producer_sends_to_a_partition_added_after_it_learned_the_topic(cluster, make_topic):
    """send(partition=p) and send_many(partitions=...) with p past the cached partition count ask for metadata
    before refusing: they were refused at once ('has 2 partitions, not partition 3') until the metadata aged
    out, five minutes; the Spark sink's `partition` column takes the send_many path."""
    topic = make_topic(2)
    with Producer(cluster.bootstrap) as producer:
        assert producer.send(topic, b"before", partition=1).get(10).offset == 0
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_partitions(topic, 4)
            admin.wait_for_leaders(topic, timeout=30, partitions=4)
        assert producer.send(topic, b"after", partition=3).get(10).partition == 3
    with Producer(cluster.bootstrap) as producer:  # the Spark writer's path, with the partition column
        producer.send(topic, b"warm", partition=0).get(10)
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_partitions(topic, 5)
            admin.wait_for_leaders(topic, timeout=30, partitions=5)
        batches = producer.send_many(topic, [b"many"], partitions=[4])
        producer.flush(10)
        assert [b.error for b in batches] == [None]
        with pytest.raises(ValueError, match="has 5 partitions, not partition 5"):
            producer.send(topic, b"never", partition=5)
        with pytest.raises(ValueError, match="has no partition 5"):
            producer.send_many(topic, [b"never"], partitions=[5])
    records = consume_all(cluster.bootstrap, topic, 5, 4)
    assert sorted((r.partition, r.value) for r in records) == [(0, b"warm"), (1, b"before"), (3, b"after"),
                                                                (4, b"many")]
