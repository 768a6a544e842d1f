"""Real Kafka clients against a real broker subprocess and a real ZooKeeper: confluent-kafka (librdkafka),
kafka-python, aiokafka and kcat (Debian's, librdkafka 2.0) produce and consume; every message is read back
byte for byte. Each test then asks the broker which (api, version) pairs it served to that client and checks
them against what the client must use and what we advertise; the run's matrix is printed at the end
(tests/support/broker_matrix.py)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import subprocess
import time
import uuid

import pytest

from sparklog.broker.network.dispatch import api_name
from sparklog.protocol.produce import FIRST_FLEXIBLE_VERSION
from sparklog.protocol.registry import API_VERSIONS
from support import broker_matrix
from support.cluster import Cluster

pytestmark = pytest.mark.slow

COMPRESSIONS = ["none", "gzip", "snappy", "lz4", "zstd"]
MESSAGES = 300
TIMEOUT_S = 30

# How each client names itself to the broker (ApiVersions v3+ software name, else its client_id), and the
# versions it negotiates against our advertised ranges, as observed; each inside issue 3's table. (Produce: librdkafka
# asks v10 at most, kafka-python's sender v9.)
CONFLUENT = "confluent-kafka-python 2.16"
KAFKA_PYTHON = "kafka-python 3.0"
AIOKAFKA = "aiokafka"
KCAT = "librdkafka 2.0"
NEGOTIATED = {
    CONFLUENT: {"ApiVersions": {3}, "Metadata": {12}, "Produce": {10}, "Fetch": {16}, "FindCoordinator": {2},
                "OffsetCommit": {9}, "OffsetFetch": {9}, "CreatePartitions": {2}, "DescribeConfigs": {1},
                "IncrementalAlterConfigs": {1}, "DeleteRecords": {2}},
    KAFKA_PYTHON: {"ApiVersions": {4}, "Metadata": {12}, "Produce": {9}, "Fetch": {12}, "ListOffsets": {9},
                   "CreateTopics": {7}, "InitProducerId": {4}, "CreatePartitions": {3}, "AlterConfigs": {2},
                   "IncrementalAlterConfigs": {1}, "DescribeConfigs": {4}, "DeleteRecords": {2},
                   "DescribeCluster": {2}},
    AIOKAFKA: {"ApiVersions": {0}, "Metadata": {5}, "Produce": {7}, "Fetch": {11}, "ListOffsets": {3},
               "CreatePartitions": {1}, "AlterConfigs": {1}, "DescribeConfigs": {2}, "DeleteRecords": {2}},
    KCAT: {"ApiVersions": {3}, "Metadata": {4}, "Produce": {7}, "Fetch": {11}, "ListOffsets": {2}},
}


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    zk_connect = f"{zookeeper.connect_string}/interop-{uuid.uuid4().hex}"
    c = Cluster(zk_connect, tmp_path_factory.mktemp("interop"), brokers=1,
                overrides={"num.partitions": "2", "log.flush.interval.ms": "20"})
    request.addfinalizer(c.stop)
    c.start()
    request.addfinalizer(lambda: c.brokers[1].running and broker_matrix.record(c.brokers[1].api_matrix()))
    return c


# Each test's clients carry the test's own tag in the name they give the broker (software version, or client_id
# for clients that send no ApiVersions v3+), so a test checks the versions ITS clients were served, whatever
# ran before it; broker_matrix drops the tag again for the run's table.
_TAG = {"now": ""}


@pytest.fixture(autouse=True)
def own_client_names(monkeypatch):
    from kafka.net.connection import KafkaConnection
    from kafka.net.manager import KafkaConnectionManager

    _TAG["now"] = broker_matrix.new_tag()
    for cls in (KafkaConnection, KafkaConnectionManager):  # kafka-python's clients take no such option
        monkeypatch.setitem(cls.DEFAULT_CONFIG, "client_software_version", f"3.0-{_TAG['now']}")
    yield
    _TAG["now"] = ""


def tagged(name: str) -> str:
    return f"{name}-{_TAG['now']}"


def confluent_names() -> dict:
    return {"client.software.name": "confluent-kafka-python", "client.software.version": f"2.16-{_TAG['now']}"}


def served_to(cluster, software: str) -> dict[str, set[int]]:
    """{api: versions} the broker served to this test's clients of `software`; every version must be inside
    the range we advertise. Records the broker's matrix for the run's table."""
    matrix = cluster.brokers[1].api_matrix()
    broker_matrix.record(matrix)
    merged: dict[str, set[int]] = {}
    for client, apis in matrix["served"].items():
        if client == tagged(software):
            for api, versions in apis.items():
                merged.setdefault(api, set()).update(versions)
    advertised = {api_name(key): rng for key, rng in API_VERSIONS.items()}
    for api, versions in merged.items():
        lo, hi = advertised[api]
        assert all(lo <= v <= hi for v in versions), f"{software} was served {api} {versions}, outside {lo}-{hi}"
    assert merged, f"no requests from a client named {software!r}; clients seen: {sorted(matrix['served'])}"
    return merged


def assert_negotiated(cluster, software: str, *apis: str) -> None:
    """This test's clients of `software` used each of `apis`, each at exactly the versions in NEGOTIATED."""
    served = served_to(cluster, software)
    for api in apis:
        assert served.get(api) == NEGOTIATED[software][api], (software, api, served.get(api))


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
                         "linger.ms": 5, "enable.idempotence": False, **confluent_names()})
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
    assert_negotiated(cluster, CONFLUENT, "ApiVersions", "Metadata", "Produce")
    assert_negotiated(cluster, KAFKA_PYTHON, "ApiVersions", "Metadata", "Fetch", "ListOffsets")


def test_confluent_idempotent_batches_of_one_pipelined_are_grouped_and_read_back_in_order(cluster):
    """Issue 12: librdkafka pipelines one-message Produce requests on one connection; the broker appends those
    it reads together in one group (dispatch.py Rule 5). Every message comes back once and in order,
    and the broker says it grouped some."""
    from confluent_kafka import Producer

    topic = "grouped-b1"
    msgs = messages(topic, 3000)
    errors = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True,
                         "batch.num.messages": 1, "linger.ms": 0, "max.in.flight.requests.per.connection": 5,
                         **confluent_names()})
    for key, value in msgs:
        producer.produce(topic, value=value, key=key, partition=0,
                         on_delivery=lambda err, m: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == []
    got = kafka_python_read_all(cluster.bootstrap, topic, len(msgs))
    assert got[0] == msgs and not got.get(1)
    grouped = cluster.brokers[1].statistics()["produce"]["grouped"]
    assert grouped >= 2
    assert_negotiated(cluster, CONFLUENT, "Produce")  # grouped from a flexible Produce (v9+, the fast path's too)
    assert min(NEGOTIATED[CONFLUENT]["Produce"]) >= FIRST_FLEXIBLE_VERSION


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
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **confluent_names()})
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
    assert_negotiated(cluster, KAFKA_PYTHON, "Produce", "InitProducerId")  # idempotent by default
    assert_negotiated(cluster, CONFLUENT, "Fetch", "FindCoordinator", "OffsetCommit", "OffsetFetch")


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_batches_with_headers_from_confluent_and_kafka_python_pass_the_records_check(cluster, compression):
    """The broker walks every record of a client's batch (records/verify.py): both clients' batches, in every
    codec, with headers (a null header value among them), idempotent and not, are stored and read back."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaProducer

    topic = f"headers-{compression}"
    headers = [("trace", b"t-1"), ("empty", b""), ("none", None)]  # kafka-python sends no null value
    sent = {}
    confluent = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": compression,
                          "linger.ms": 5, "enable.idempotence": True, **confluent_names()})
    errors = []
    for i in range(50):
        sent[b"c%d" % i] = headers
        confluent.produce(topic, key=b"c%d" % i, value=b"v" * i, headers=headers,
                          on_delivery=lambda err, m: err and errors.append(err))
    assert confluent.flush(TIMEOUT_S) == 0 and errors == []
    python = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", enable_idempotence=False,
                           compression_type=None if compression == "none" else compression)
    futures = []
    for i in range(50):
        sent[b"k%d" % i] = headers[:2]
        futures.append(python.send(topic, key=b"k%d" % i, value=b"v" * i, headers=headers[:2]))
    python.flush(TIMEOUT_S)
    assert all(f.get(TIMEOUT_S).offset >= 0 for f in futures)
    python.close()
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"h-{compression}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", **confluent_names()})
    got = {}
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=10).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got[m.key()] = m.headers()
    finally:
        consumer.close()
    assert got == sent


def test_aiokafka_metadata_produce_consume(cluster):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    topic = "aio"
    msgs = messages(topic, 200)

    async def scenario():
        producer = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, compression_type="lz4", acks="all",
                                    client_id=tagged(AIOKAFKA))
        await producer.start()
        try:
            partitions = await producer.partitions_for(topic)  # auto-creates through Metadata
            for key, value in msgs:
                await producer.send(topic, key=key, value=value)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False, client_id=tagged(AIOKAFKA))
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
    assert_negotiated(cluster, AIOKAFKA, "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets")


def test_list_offsets_and_metadata_through_kafka_python_admin(cluster):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id=tagged(KAFKA_PYTHON))
    try:
        admin.create_topics([NewTopic("adm", num_partitions=3, replication_factor=1)])
        assert "adm" in admin.list_topics()
        with pytest.raises(Exception, match="TopicAlreadyExists"):
            admin.create_topics([NewTopic("adm", num_partitions=3, replication_factor=1)])
        with pytest.raises(Exception, match="InvalidReplicationFactor"):
            admin.create_topics([NewTopic("adm-rf", num_partitions=1, replication_factor=5)])
    finally:
        admin.close()
    # acks=all: acknowledged once readable. An acks=1 ack comes at the append, before the flush that exposes the
    # records (flush.visibility "flushed", the paper's rule), so the end offsets read next could still be 0
    confluent_produce(cluster.bootstrap, "adm", messages("adm", 30), "all", "none")
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap)
    try:
        tps = [TopicPartition("adm", p) for p in range(3)]
        begin, end = consumer.beginning_offsets(tps), consumer.end_offsets(tps)
        assert all(begin[tp] == 0 for tp in tps)
        assert sum(end.values()) == 30
    finally:
        consumer.close()
    assert_negotiated(cluster, KAFKA_PYTHON, "CreateTopics", "ListOffsets")


# ---------------------------------------------------------------------------------------------------------
# Older versions, driven by a real client pinned to an older broker version

# kafka-python with `api_version` pinned: the versions it then uses, as observed. It names itself by client_id
# (ApiVersions below v3 carries no software name). Not pinnable here: kafka-python's 0.10.x (it produces with
# Produce v2, served since legacy message sets are up-converted: test_produce_legacy.py; but it fetches with Fetch
# v2-v3, not served), and librdkafka, whose
# `broker.version.fallback` with `api.version.request=false` holds only below 0.10 (message format v0/v1) and
# otherwise negotiates through ApiVersions anyway. Versions no client exercised are "codec-only" in the
# run's matrix (support/broker_matrix.py).
PINNED = {
    (0, 11): {"ApiVersions": {1}, "Metadata": {4}, "Produce": {3}, "Fetch": {5}, "ListOffsets": {2},
              "InitProducerId": {0}},
    (1, 0): {"ApiVersions": {1}, "Metadata": {5}, "Produce": {5}, "Fetch": {6}, "ListOffsets": {2},
             "InitProducerId": {0}},
    (1, 1): {"ApiVersions": {1}, "Metadata": {5}, "Produce": {5}, "Fetch": {7}, "ListOffsets": {2},
             "InitProducerId": {0}},
    (2, 0): {"ApiVersions": {2}, "Metadata": {6}, "Produce": {6}, "Fetch": {8}, "ListOffsets": {3},
             "InitProducerId": {1}},
    (2, 1): {"ApiVersions": {2}, "Metadata": {7}, "Produce": {7}, "Fetch": {10}, "ListOffsets": {4},
             "InitProducerId": {1}},
}


@pytest.mark.parametrize("api_version", sorted(PINNED), ids=lambda v: ".".join(map(str, v)))
def test_kafka_python_pinned_to_an_older_broker_version_produces_and_reads_back(cluster, api_version):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    name = "kafka-python api_version=" + ".".join(map(str, api_version))
    topic = f"pinned-{'-'.join(map(str, api_version))}"
    msgs = messages(topic, 100)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, api_version=api_version, client_id=tagged(name),
                             acks="all", compression_type="gzip")
    futures = [producer.send(topic, key=k, value=v) for k, v in msgs]
    producer.flush(TIMEOUT_S)
    assert all(f.get(TIMEOUT_S).offset >= 0 for f in futures)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, api_version=api_version, client_id=tagged(name),
                             group_id=None, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got, deadline = [], time.monotonic() + TIMEOUT_S
        while len(got) < len(msgs) and time.monotonic() < deadline:
            got += [(r.key, r.value) for rs in consumer.poll(timeout_ms=500).values() for r in rs]
        assert sum(consumer.end_offsets(tps).values()) == len(msgs)
    finally:
        consumer.close()
    assert sorted(got) == sorted(msgs)
    assert served_to(cluster, name) == PINNED[api_version]


# ---------------------------------------------------------------------------------------------------------
# kcat (Debian's: librdkafka 2.0, which enables features only on exact broker versions)

KCAT_FORMAT = "%p %o %K %S|%k%s"  # partition, offset, key length, value length, then the raw key and value
KCAT_KEY_DELIMITER = b"\t"


def kcat(cluster, *args: str, stdin: bytes | None = None) -> bytes:
    """Run kcat against the cluster; it must be installed (scripts/setup.sh) and must succeed."""
    path = shutil.which("kcat")
    assert path, "kcat is not installed: run scripts/setup.sh (apt-get install -y kcat)"
    names = ("-X", "client.software.name=librdkafka", "-X", f"client.software.version=2.0-{_TAG['now']}")
    done = subprocess.run([path, "-b", cluster.bootstrap, *names, *args], input=stdin, capture_output=True,
                          timeout=TIMEOUT_S)
    assert done.returncode == 0, f"kcat {' '.join(args)} failed: {done.stderr.decode(errors='replace')}"
    return done.stdout


def kcat_messages(tag: str, n: int = MESSAGES) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs with every byte but kcat's delimiters (tab between key and value, newline after)."""
    rng = random.Random(tag)
    alphabet = bytes(b for b in range(256) if b not in b"\t\n")
    out = []
    for i in range(n):
        value = bytes(rng.choice(alphabet) for _ in range(i % 211)) + f"{tag}-{i}".encode()
        out.append((f"k{i % 7}".encode(), value))
    return out


def kcat_produce(cluster, topic: str, msgs, *extra: str) -> None:
    lines = b"".join(k + KCAT_KEY_DELIMITER + v + b"\n" for k, v in msgs)
    kcat(cluster, "-P", "-t", topic, "-K", KCAT_KEY_DELIMITER.decode(), "-X", "acks=all", *extra, stdin=lines)


def wait_visible(cluster, topic: str, count: int) -> None:
    """Until the topic's end offsets (high watermarks) add up to `count`: an acknowledged message becomes
    visible once flushed (flush.visibility "flushed", the paper's rule), and `kcat -e` stops at the end."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        text = kcat(cluster, "-Q", *[a for p in range(2) for a in ("-t", f"{topic}:{p}:-1")]).decode()
        ends = [int(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(topic)]
        if sum(ends) >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"{topic}: fewer than {count} messages visible after {TIMEOUT_S}s")


def kcat_consume(cluster, topic: str, count: int) -> dict[int, list[tuple[bytes, bytes]]]:
    """Every message of every partition from the beginning, parsed from kcat's length-prefixed format."""
    wait_visible(cluster, topic, count)
    out = kcat(cluster, "-C", "-t", topic, "-o", "beginning", "-e", "-q", "-f", KCAT_FORMAT)
    got: dict[int, list] = {}
    pos = 0
    while pos < len(out):
        bar = out.index(b"|", pos)
        partition, _offset, key_len, value_len = map(int, out[pos:bar].split())
        pos = bar + 1
        key = out[pos:pos + max(key_len, 0)]
        pos += max(key_len, 0)
        value = out[pos:pos + value_len]
        pos += value_len
        got.setdefault(partition, []).append((key, value))
    return got


def assert_same_messages(got: dict[int, list], msgs) -> None:
    """Every message byte for byte, and within each partition in the order produced."""
    assert sorted(m for part in got.values() for m in part) == sorted(msgs)
    for records in got.values():
        order = [msgs.index(m) for m in records]
        assert order == sorted(order)


def test_kcat_lists_metadata(cluster):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id=tagged(KAFKA_PYTHON))
    try:
        admin.create_topics([NewTopic("kcat-meta", num_partitions=3, replication_factor=1)])
    finally:
        admin.close()
    text = kcat(cluster, "-L", "-t", "kcat-meta").decode()
    broker = cluster.brokers[1]
    assert f"broker 1 at {broker.address} (controller)" in text
    assert 'topic "kcat-meta" with 3 partitions' in text
    for p in range(3):
        assert f"partition {p}, leader 1, replicas: 1, isrs: 1" in text
    assert "kcat-meta" in kcat(cluster, "-L").decode()
    assert_negotiated(cluster, KCAT, "ApiVersions", "Metadata")


def test_kafka_python_pinned_to_0_9_lists_topics_with_metadata_v0(cluster):
    """A client pinned to a broker without ApiVersions speaks Metadata v0, in which an empty topic list means
    every topic (v1 made it "none" and null "every"): Kafka 3.x serves v0, so must we."""
    from kafka import KafkaConsumer

    kcat(cluster, "-P", "-t", "metadata-v0", stdin=b"one\n")
    name = "kafka-python api_version=0.9"
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, api_version=(0, 9), client_id=tagged(name),
                             group_id=None, enable_auto_commit=False)
    try:
        assert "metadata-v0" in consumer.topics()
        assert consumer.partitions_for_topic("metadata-v0") == {0, 1}
    finally:
        consumer.close()
    assert served_to(cluster, name) == {"Metadata": {0}}


@pytest.mark.parametrize("compression", COMPRESSIONS)
def test_kcat_produces_and_consumes_byte_for_byte(cluster, compression):
    topic = f"kcat-{compression}"
    msgs = kcat_messages(topic)
    extra = () if compression == "none" else ("-z", compression)
    kcat_produce(cluster, topic, msgs, *extra)
    got = kcat_consume(cluster, topic, len(msgs))
    assert sorted(got) == [0, 1]  # auto-created with num.partitions
    assert_same_messages(got, msgs)
    # the Python client checks CRCs (librdkafka does not): kcat's batches are stored intact
    assert_same_messages(kafka_python_read_all(cluster.bootstrap, topic, len(msgs)), msgs)
    assert_negotiated(cluster, KCAT, "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets")


@pytest.mark.parametrize("compression", ["snappy", "lz4"])
def test_kcat_consumes_what_python_clients_produced(cluster, compression):
    """kafka-python frames snappy the xerial way (librdkafka: raw); kcat must read what is stored as sent."""
    from kafka import KafkaProducer

    topic = f"py2kcat-{compression}"
    msgs = kcat_messages(topic, 200)
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", compression_type=compression)
    for key, value in msgs:
        producer.send(topic, key=key, value=value)
    producer.flush(TIMEOUT_S)
    producer.close()
    assert_same_messages(kcat_consume(cluster, topic, len(msgs)), msgs)


# ---------------------------------------------------------------------------------------------------------
# Admin APIs (issue 14): topic configs, CreatePartitions, DescribeConfigs, (Incremental)AlterConfigs,
# DeleteRecords, DescribeCluster through each client's own admin client

STANDARD_CONFIGS = {"compression.type": "zstd", "message.timestamp.type": "LogAppendTime",
                    "delete.retention.ms": "1000", "cleanup.policy": "compact,delete", "min.insync.replicas": "1",
                    "unclean.leader.election.enable": "false", "message.timestamp.before.max.ms": "86400000"}


def read_with_timestamps(bootstrap, topic, partitions, expected):
    """[(partition, offset, timestamp_type, value)] read by kafka-python from the log start of each partition."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        got, deadline = [], time.monotonic() + TIMEOUT_S
        while len(got) < expected and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got.extend((r.partition, r.offset, r.timestamp_type, r.value) for r in records)
        return got
    finally:
        consumer.close()


def test_confluent_admin_creates_with_standard_configs_alters_grows_and_deletes_records(cluster):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource,
                                       NewPartitions, NewTopic, ResourceType)

    topic = "cfg-confluent"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap, **confluent_names()})
    admin.create_topics([NewTopic(topic, 1, 1, config=STANDARD_CONFIGS)])[topic].result(TIMEOUT_S)
    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(TIMEOUT_S)
    resource = ConfigResource(ResourceType.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert {k: configs[k].value for k in STANDARD_CONFIGS} == STANDARD_CONFIGS
    assert configs["compression.type"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["retention.ms"].is_default and configs["retention.ms"].value == "604800000"

    change = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("delete.retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([change])[change].result(TIMEOUT_S)
    configs = admin.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert (configs["retention.ms"].value, configs["delete.retention.ms"].value) == ("3600000", "86400000")
    bad = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("compression.type", "brotli", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(Exception, match="compression.type"):
        admin.incremental_alter_configs([bad])[bad].result(TIMEOUT_S)

    msgs = [(b"k", b"v%d" % i) for i in range(10)]
    confluent_produce_to(cluster.bootstrap, topic, msgs, partition=1)
    got = read_with_timestamps(cluster.bootstrap, topic, [1], len(msgs))
    assert [(p, o, t, v) for p, o, t, v in got] == [(1, i, 1, v) for i, (_, v) in enumerate(msgs)]  # LogAppendTime
    deleted = admin.delete_records([TopicPartition(topic, 1, 4)])
    assert next(iter(deleted.values())).result(TIMEOUT_S).low_watermark == 4
    assert [o for _, o, _, _ in read_with_timestamps(cluster.bootstrap, topic, [1], 6)] == list(range(4, 10))
    cluster_info = admin.describe_cluster().result(TIMEOUT_S)
    assert cluster_info.cluster_id and [n.id for n in cluster_info.nodes] == [1]
    assert_negotiated(cluster, CONFLUENT, "CreatePartitions", "DescribeConfigs", "IncrementalAlterConfigs",
                      "DeleteRecords")  # librdkafka's DescribeCluster is a Metadata request


def confluent_produce_to(bootstrap, topic, msgs, partition):
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": "lz4"})
    for key, value in msgs:
        producer.produce(topic, value=value, key=key, partition=partition)
    assert producer.flush(TIMEOUT_S) == 0


def test_legacy_alter_configs_takes_the_last_value_of_a_config_listed_twice_as_kafka_does(cluster):
    """librdkafka's 0092_mixed_msgver lists message.format.version twice in one AlterConfigs (the legacy API):
    Kafka builds a Properties of the entries in order, so the last value wins; only IncrementalAlterConfigs
    refuses a config named twice."""
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    from sparklog.protocol import ApiKey
    from sparklog.protocol.alter_configs import AlterableConfig, AlterConfigsRequest, AlterConfigsResource
    from sparklog.protocol.describe_configs import RESOURCE_TOPIC
    from support import wire

    topic = "cfg-twice"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id=tagged(KAFKA_PYTHON))
    try:
        admin.create_topics([NewTopic(topic, 1, 1)])
        twice = AlterConfigsRequest(resources=[AlterConfigsResource(
            resource_type=RESOURCE_TOPIC, resource_name=topic, configs=[
                AlterableConfig(name="message.format.version", value="0.10.0"),
                AlterableConfig(name="retention.ms", value="5000"),
                AlterableConfig(name="message.format.version", value="2.4"),
                AlterableConfig(name="retention.ms", value="7000")])])
        host, port = cluster.bootstrap.rsplit(":", 1)
        (result,) = wire.request(host, int(port), ApiKey.ALTER_CONFIGS, 1, twice, timeout=TIMEOUT_S).responses
        assert (result.error_code, result.error_message) == (0, None)
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert {k: v["value"] for k, v in described.items()} == {"message.format.version": "2.4",
                                                                  "retention.ms": "7000"}
    finally:
        admin.close()


def test_kafka_python_admin_configs_partitions_records_and_cluster(cluster):
    from kafka import TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    topic = "cfg-kp"
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id=tagged(KAFKA_PYTHON))
    try:
        admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"cleanup.policy": "compact"})])
        admin.create_partitions({topic: 2})
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "5000"})],
                            incremental=False)
        every = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        every = every["topic"][topic]
        assert every["message.timestamp.type"]["value"] == "CreateTime"
        assert every["message.timestamp.type"]["config_source"] == "DEFAULT_CONFIG"
        # AlterConfigs replaces every override; kafka-python re-sends the modified ones itself
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert {k: v["value"] for k, v in modified.items()} == {"cleanup.policy": "compact", "retention.ms": "5000"}
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "60000"})])
        modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert modified["segment.ms"]["value"] == "60000" and modified["retention.ms"]["value"] == "5000"
        broker = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all")
        assert broker["broker"]["1"]["log.retention.ms"]["value"] == "604800000"
        confluent_produce_to(cluster.bootstrap, topic, [(b"k", b"v%d" % i) for i in range(5)], partition=0)
        wait_visible(cluster, topic, 5)
        admin.delete_records({TopicPartition(topic, 0): 3})
        assert [o for _, o, _, _ in read_with_timestamps(cluster.bootstrap, topic, [0], 2)] == [3, 4]
        info = admin.describe_cluster()
        assert info["cluster_id"] and [b["broker_id"] if "broker_id" in b else b["node_id"]
                                       for b in info["brokers"]] == [1]
    finally:
        admin.close()
    again = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        with pytest.raises(Exception, match="InvalidPartitions"):
            again.create_partitions({topic: 1})
    finally:
        again.close()
    assert_negotiated(cluster, KAFKA_PYTHON, "CreatePartitions", "AlterConfigs", "IncrementalAlterConfigs",
                      "DescribeConfigs", "DeleteRecords", "DescribeCluster")


def test_aiokafka_admin_configs_partitions_and_records(cluster):
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
    from aiokafka.structs import TopicPartition

    topic = "cfg-aio"

    async def scenario():
        admin = AIOKafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id=tagged(AIOKAFKA))
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 1, topic_configs={"compression.type": "gzip"})])
            await admin.create_partitions({topic: NewPartitions(2)})
            await admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                      configs={"retention.ms": "7000"})])
            (described,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            confluent_produce_to(cluster.bootstrap, topic, [(b"k", b"v%d" % i) for i in range(4)], partition=1)
            wait_visible(cluster, topic, 4)
            deleted = await admin.delete_records({TopicPartition(topic, 1): RecordsToDelete(before_offset=2)})
            return described, deleted
        finally:
            await admin.close()

    described, deleted = asyncio.run(scenario())
    configs = {c[0]: c[1] for r in described.resources for c in r[4]}
    assert configs["retention.ms"] == "7000" and configs["compression.type"] == "producer"  # replaced
    assert list(deleted.values()) == [2]
    assert_negotiated(cluster, AIOKAFKA, "CreatePartitions", "AlterConfigs", "DescribeConfigs", "DeleteRecords")


def test_confluent_consumer_reads_one_partition_through_the_fetch_fast_path(cluster):
    """Issue 12: a consumer's Fetch of one partition with records ready is answered by the Fetch fast path
    (dispatch.py Rule 6: a response head, then the records with one sendfile); librdkafka reads every
    message back once, in order, byte for byte, and the broker says the fast path served its fetches."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = "fetch-fast"
    msgs = messages(topic, 3000)
    errors = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "1", "linger.ms": 5,
                         "batch.num.messages": 100, **confluent_names()})  # batches of at most 100: many fetches
    for key, value in msgs:
        producer.produce(topic, value=value, key=key, partition=0,
                         on_delivery=lambda err, m: err and errors.append(err))
        producer.poll(0)
    assert producer.flush(TIMEOUT_S) == 0 and errors == []
    before = cluster.brokers[1].statistics()["fetch"]["fast"]
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.queue.backoff.ms": 0,
                         "max.partition.fetch.bytes": 64 * 1024, **confluent_names()})  # several fetches
    got = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])  # one partition: each Fetch has the fast path's shape
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < len(msgs) and time.monotonic() < deadline:
            for m in consumer.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                got.append((m.key(), m.value() or b""))
    finally:
        consumer.close()
    assert got == msgs
    assert cluster.brokers[1].statistics()["fetch"]["fast"] - before >= 2


def _error_codes(body) -> list[int]:
    """Every error_code anywhere in a decoded response body."""
    from sparklog.protocol.schema import Struct

    found, todo = [], [body]
    while todo:
        item = todo.pop()
        for name in getattr(type(item), "__slots__", ()):
            value = getattr(item, name, None)
            if name == "error_code":
                found.append(value)
            elif isinstance(value, list):
                todo.extend(v for v in value if isinstance(v, Struct))
            elif isinstance(value, Struct):
                todo.append(value)
    return found


def test_every_advertised_version_of_every_api_gets_a_well_formed_answer(cluster):
    """What ApiVersions advertises must be served: a minimal request (every field at its spec default, acks=1
    for Produce so that it is answered) at every advertised version gets an answer that decodes, and no
    part of it says UNSUPPORTED_VERSION (35) or UNKNOWN_SERVER_ERROR (-1). A client picks the highest
    version both sides know, so a version a handler refuses breaks exactly the clients that pick it."""
    from support.wire import request
    from sparklog.protocol import ApiKey, ApiVersionsRequest
    from sparklog.protocol.registry import REQUESTS, UNADVERTISED

    broker = cluster.brokers[1]
    advertised = request(broker.host, broker.port, ApiKey.API_VERSIONS, 0, ApiVersionsRequest()).api_keys
    assert {ApiKey(a.api_key) for a in advertised} == set(REQUESTS) - set(UNADVERTISED)  # served, not advertised
    refused = []
    for api in advertised:
        for version in range(api.min_version, api.max_version + 1):
            body = REQUESTS[ApiKey(api.api_key)]()
            if api.api_key == ApiKey.PRODUCE:
                body.acks = 1
            try:
                codes = _error_codes(request(broker.host, broker.port, api.api_key, version, body, timeout=10))
            except Exception as exc:  # noqa: BLE001 - collected: every refusal is reported at once
                refused.append((api_name(api.api_key), version, repr(exc)))
                continue
            if {35, -1} & set(codes):
                refused.append((api_name(api.api_key), version, codes))
    assert refused == []
