"""The schema registry REST API (`sparklog schema-registry start`) used by Confluent's own Python client
unchanged: SchemaRegistryClient, AvroSerializer and AvroDeserializer from confluent-kafka, through a real broker;
and what they wrote read by the Spark source's `valueFormat=avro` and loaded into the warehouse."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs.load_warehouse import load  # noqa: E402

TIMEOUT_S = 60
V1 = """{"type": "record", "name": "PageView", "namespace": "example", "fields": [
    {"name": "member_id", "type": "long"}, {"name": "page", "type": "string"},
    {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}"""
V2 = V1.replace("]}", ', {"name": "agent", "type": ["null", "string"], "default": null}]}')
NO_DEFAULT = V1.replace("]}", ', {"name": "session", "type": "string"}]}')
START_MS = 1_700_000_000_000


@pytest.fixture(scope="module")
def registry_url(request, sparklog_cluster):
    """`sparklog schema-registry start` as a subprocess on the cluster's ZooKeeper; stopped by SIGTERM after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "sparklog.cli", "schema-registry", "start", "--zookeeper", sparklog_cluster.zk_connect,
         "--listeners", "http://127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=REPO, env={**os.environ, "PYTHONUNBUFFERED": "1"})

    def stop():
        process.send_signal(signal.SIGTERM)
        try:
            assert process.wait(TIMEOUT_S) == 0, process.stderr.read()
        finally:
            process.kill()
            process.wait()
            process.stdout.close()
            process.stderr.close()

    request.addfinalizer(stop)
    line = process.stdout.readline()
    assert "Schema registry is serving at http://" in line, (line, process.stderr.read() if process.poll() else "")
    return line.split("serving at ")[1].split()[0]


def produce(bootstrap, url, topic, schema, records):
    """`records` through confluent-kafka's Producer with its AvroSerializer (auto-registering `schema`)."""
    from confluent_kafka import Producer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    serializer = AvroSerializer(SchemaRegistryClient({"url": url}), schema)
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 30000})
    errors = []
    for record in records:
        value = serializer(record, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, value, key=str(record["member_id"]).encode(),
                         on_delivery=lambda err, msg: errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [None] * len(records)


def consume(bootstrap, url, topic, count):
    """(raw value, AvroDeserializer's record) of `count` records, read from the start."""
    from confluent_kafka import Consumer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    deserializer = AvroDeserializer(SchemaRegistryClient({"url": url}))
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, deadline = [], time.monotonic() + TIMEOUT_S
    try:
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got.append((msg.value(), deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE))))
    finally:
        consumer.close()
    assert len(got) == count
    return got


def views(first, count, with_agent):
    records = [{"member_id": i, "page": f"/p{i % 5}", "timestamp": START_MS + i * 60_000} for i in range(first, first + count)]
    if with_agent:
        for r in records:
            r["agent"] = None if r["member_id"] % 2 else f"agent-{r['member_id']}"
    return records


def test_confluent_client_registry_calls_and_errors(registry_url):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.error import SchemaRegistryError

    client = SchemaRegistryClient({"url": registry_url})
    subject = f"calls-{uuid.uuid4().hex[:8]}-value"
    first = client.register_schema(subject, Schema(V1, "AVRO"))
    second = client.register_schema(subject, Schema(V2, "AVRO"))
    assert second != first and subject in client.get_subjects()
    assert client.get_versions(subject) == [1, 2]
    latest = client.get_latest_version(subject)
    assert (latest.schema_id, latest.version, latest.subject) == (second, 2, subject)
    assert client.lookup_schema(subject, Schema(V1, "AVRO")).version == 1
    fresh = SchemaRegistryClient({"url": registry_url})  # no cache: what the server answers for the id
    assert fresh.get_schema(first).schema_str == fresh.get_version(subject, 1).schema.schema_str
    assert client.test_compatibility(subject, Schema(V2, "AVRO")) is True
    assert client.test_compatibility(subject, Schema(NO_DEFAULT, "AVRO")) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, Schema(NO_DEFAULT, "AVRO"))
    assert (refused.value.http_status_code, refused.value.error_code) == (409, 409)
    assert client.get_compatibility() == "BACKWARD"
    client.set_compatibility(subject, "NONE")
    assert client.get_compatibility(subject) == "NONE"
    assert client.register_schema(subject, Schema(NO_DEFAULT, "AVRO")) not in (first, second)
    for call, code in ((lambda: client.get_schema(999_999), 40403), (lambda: client.get_versions("nope"), 40401),
                       (lambda: client.get_version(subject, 99), 40402),
                       (lambda: client.register_schema(subject, Schema("{\"type\": \"nope\"}", "AVRO")), 42201),
                       (lambda: client.set_compatibility(subject, "SIDEWAYS"), 42203)):
        with pytest.raises(SchemaRegistryError) as failed:
            call()
        assert failed.value.error_code == code


def test_avro_serializer_to_spark_and_the_warehouse(spark, sparklog_cluster, make_topic, registry_url, tmp_path):
    """AvroSerializer (v1, then the evolved v2) -> sparklog -> AvroDeserializer, Spark's valueFormat=avro and
    jobs/load_warehouse.py: the same records everywhere, framed with the ids the REST API handed out."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    from sparklog.schemas import split

    topic = make_topic(f"views_{uuid.uuid4().hex[:8]}", partitions=2)  # a table name too: no dashes
    bootstrap = sparklog_cluster.bootstrap
    old, new = views(0, 150, with_agent=False), views(150, 150, with_agent=True)
    produce(bootstrap, registry_url, topic, V1, old)
    produce(bootstrap, registry_url, topic, V2, new)

    client = SchemaRegistryClient({"url": registry_url})
    ids = {client.get_version(f"{topic}-value", v).schema_id for v in (1, 2)}
    consumed = consume(bootstrap, registry_url, topic, len(old) + len(new))
    assert {split(raw)[0] for raw, _ in consumed} == ids  # Confluent's framing, with the registry's ids
    by_member = {r["member_id"]: r for _, r in consumed}
    expected = {r["member_id"]: {**r, "agent": r.get("agent")} for r in old + new}
    assert {m: {**r, "timestamp": int(r["timestamp"].timestamp() * 1000), "agent": r.get("agent")}
            for m, r in by_member.items()} == expected

    rows = (spark.read.format("sparklog").option("zookeeper.connect", sparklog_cluster.zk_connect)
            .option("subscribe", topic).option("startingOffsets", "earliest").option("valueFormat", "avro")
            .option("subject", f"{topic}-value").load().select("value.*").collect())
    read = {r["member_id"]: {**r.asDict(), "timestamp": int(r["timestamp"].timestamp() * 1000)} for r in rows}
    assert len(rows) == 300 and read == expected  # old records read with the latest schema: agent null

    warehouse, checkpoints = tmp_path / "warehouse", tmp_path / "checkpoints"
    [loaded] = load(spark, sparklog_cluster.zk_connect, str(warehouse), str(checkpoints), topics=[topic],
                    database=f"w{uuid.uuid4().hex[:8]}")
    assert (loaded.loaded, loaded.rows) == (300, 300)
    table = spark.table(loaded.table).collect()
    assert {r["member_id"]: {"member_id": r["member_id"], "page": r["page"], "agent": r["agent"],
                             "timestamp": int(r["timestamp"].timestamp() * 1000)} for r in table} == expected
