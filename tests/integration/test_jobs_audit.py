"""jobs/audit.py finds a loss planted by a producer that counts events it never sends, and nothing otherwise;
and the data source's Avro decoding equals fastavro's own."""

from __future__ import annotations

import io
import sys
import uuid
from pathlib import Path

import fastavro

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from jobs import audit as audit_job  # noqa: E402
from jobs.common import ensure_topic  # noqa: E402
from jobs.events import subject  # noqa: E402
from jobs.generate_events import generate  # noqa: E402

WINDOW_MS = 30_000
SPAN_MS = 3 * 60_000  # six audit windows


def _produce(zk, topic, monitoring, server, events, lose=0):
    report = generate(zk, events, topic=topic, monitoring_topic=monitoring, server=server, partitions=2,
                      span_ms=SPAN_MS, window_ms=WINDOW_MS, lose=lose, start_ms=1_700_000_000_000)
    assert report.failed == 0
    return report


def test_audit_finds_the_planted_loss_and_nothing_else(spark, sparklog_cluster):
    zk = sparklog_cluster.zk_connect
    topic, monitoring = f"act_{uuid.uuid4().hex[:8]}", f"mon_{uuid.uuid4().hex[:8]}"
    clean = _produce(zk, topic, monitoring, "fe-clean", 1200)
    lossy = _produce(zk, topic, monitoring, "fe-lossy", 1200, lose=7)
    assert lossy.lost == 7

    report = audit_job.audit(spark, zk, [topic], monitoring)
    assert {(r.producer, r.window_start_ms) for r in report.rows} == (
        {("fe-clean", w) for w in clean.windows} | {("fe-lossy", w) for w in lossy.windows})
    bad = report.discrepancies
    assert bad and {r.producer for r in bad} == {"fe-lossy"}
    assert sum(r.reported - r.received for r in bad) == 7
    assert all(r.ok for r in report.rows if r.producer == "fe-clean")
    assert audit_job.main(["--zookeeper", zk, "--topics", topic, "--monitoring-topic", monitoring]) == 1


def test_audit_passes_when_nothing_is_lost(spark, sparklog_cluster):
    zk = sparklog_cluster.zk_connect
    topic, monitoring = f"act_{uuid.uuid4().hex[:8]}", f"mon_{uuid.uuid4().hex[:8]}"
    produced = _produce(zk, topic, monitoring, "fe-1", 900)
    report = audit_job.audit(spark, zk, [topic], monitoring)
    assert not report.discrepancies and report.received == report.reported == produced.sent == 900
    assert audit_job.main(["--zookeeper", zk, "--topics", topic, "--monitoring-topic", monitoring]) == 0


def test_avro_decoding_in_the_source_equals_fastavro(spark, sparklog_cluster):
    """Old and new writer schemas in one topic: every value, read as the subject's latest schema by the data
    source, equals fastavro's own decoding of the raw bytes with the same writer and reader schemas."""
    from sparklog.client import Producer
    from sparklog.schemas import SchemaRegistry, split

    zk = sparklog_cluster.zk_connect
    topic = f"evolve_{uuid.uuid4().hex[:8]}"
    v1 = {"type": "record", "name": "Click", "fields": [
        {"name": "member_id", "type": "int"}, {"name": "page", "type": "string"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
        {"name": "when", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}
    v2 = {**v1, "fields": [{**v1["fields"][0], "type": "long"}] + v1["fields"][1:] + [
        {"name": "referrer", "type": ["null", "string"], "default": None}]}
    ensure_topic(zk, topic, 2)
    with SchemaRegistry.open(zk) as registry:
        ids = [registry.register_version(subject(topic) + "-x", s).schema_id for s in (v1, v2)]
        producer = Producer(zookeeper=zk)
        try:
            for i in range(400):
                old = i % 2 == 0
                datum = {"member_id": i, "page": f"/p{i % 7}", "tags": [f"t{i % 3}"] * (i % 3),
                         "attrs": {"n": i}, "when": 1_700_000_000_000 + i}
                if not old:
                    datum["referrer"] = None if i % 4 == 1 else f"/r{i}"
                producer.send(topic, registry.encode(ids[0] if old else ids[1], datum), key=str(i).encode())
            producer.flush()
        finally:
            producer.close()
        reader_schema = registry.schema(ids[1])
        raw = (spark.read.format("sparklog").option("zookeeper.connect", zk).option("subscribe", topic)
               .option("startingOffsets", "earliest").load().collect())
        expected = {}
        for row in raw:
            schema_id, body = split(bytes(row["value"]))
            value = fastavro.schemaless_reader(io.BytesIO(body), registry.schema(schema_id), reader_schema)
            expected[(row["partition"], row["offset"])] = value
    decoded = (spark.read.format("sparklog").option("zookeeper.connect", zk).option("subscribe", topic)
               .option("startingOffsets", "earliest").option("valueFormat", "avro")
               .option("subject", subject(topic) + "-x").load())
    assert decoded.schema["value"].dataType.fieldNames() == ["member_id", "page", "tags", "attrs", "when", "referrer"]
    got = {}
    for row in decoded.collect():
        value = row["value"].asDict(recursive=True)
        value["when"] = value["when"].astimezone(expected[(row["partition"], row["offset"])]["when"].tzinfo)
        got[(row["partition"], row["offset"])] = value
    assert len(expected) == 400 and got == expected
