"""A Spark streaming read of a topic that the broker's cleaner compacts while the query runs: every key's final
value arrives, no data-loss error (failOnDataLoss=true), and no micro-batch spans more offsets than
maxOffsetsPerTrigger."""

from __future__ import annotations

import json
import time

import pytest

from support.cluster import Cluster
from support.spark import start_query, stream

pytestmark = pytest.mark.slow

TOPIC = "compacted"
KEYS = 20
PER_TRIGGER = 100
TIMEOUT_S = 180
CONFIG = {"cleanup.policy": "compact", "segment.bytes": "2048", "min.cleanable.dirty.ratio": "0.01"}


def produce(bootstrap: str, versions: range, final: dict) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "batch.num.messages": 5})
    for version in versions:
        for k in range(KEYS):
            key, value = b"key-%02d" % k, b"v%02d" % version
            producer.produce(TOPIC, key=key, value=value, partition=0)
            final[key] = value
        producer.poll(0)
    assert producer.flush(30) == 0


def cleans(zk) -> int:
    from sparklog.coordination import log_cleaner

    report = log_cleaner.read_all(zk).get((TOPIC, 0), {}).get(1) or {}
    return (report.get("last_run") or {}).get("end", 0)


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def offset_of(progress_offset) -> int:
    offsets = json.loads(progress_offset) if isinstance(progress_offset, str) else progress_offset
    return int(offsets[TOPIC]["0"]) if offsets else 0


def test_a_topic_compacted_while_the_query_runs_gives_every_final_value(request, spark, zk_connect, zk, tmp_path):
    from sparklog.coordination import topics

    cluster = Cluster(zk_connect, tmp_path / "brokers", brokers=1, overrides={"log.cleaner.backoff.ms": "100"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    topics.create_topic(zk, TOPIC, 1, 1, CONFIG)
    final: dict = {}
    produce(cluster.bootstrap, range(0, 10), final)
    # The query starts on a log already cleaned: its first ranges have gaps whatever the cleaner's pace (at nice
    # 19 on a loaded machine the query could otherwise read every record before the first clean).
    wait_for(lambda: cleans(zk) > 0, "the first clean")
    first_clean = cleans(zk)
    df = stream(spark, cluster, subscribe=TOPIC, startingOffsets="earliest", maxOffsetsPerTrigger=PER_TRIGGER,
                failOnDataLoss="true", **{"sparklog.queryId": f"compaction-{tmp_path.name}"})
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(processingTime="500 milliseconds"), str(tmp_path / "out"))
    try:
        produce(cluster.bootstrap, range(10, 20), final)
        wait_for(lambda: cleans(zk) > first_clean, "a clean while the query runs")
        end = 20 * KEYS
        wait_for(lambda: query.exception() is not None or (
            query.lastProgress is not None and offset_of(query.lastProgress["sources"][0]["endOffset"]) >= end),
            "the query to read to the end")
        assert query.exception() is None, query.exception()
        progress = [p for p in query.recentProgress if p["numInputRows"]]
    finally:
        query.stop()
    spans = [offset_of(p["sources"][0]["endOffset"]) - offset_of(p["sources"][0]["startOffset"]) for p in progress]
    assert spans and max(spans) <= PER_TRIGGER
    rows = spark.read.parquet(str(tmp_path / "out")).select("offset", "key", "value").collect()
    offsets = [r.offset for r in rows]
    assert len(offsets) == len(set(offsets))  # no duplicates
    assert len(rows) < end  # the query read ranges the cleaner had removed records from
    last = {}
    for r in sorted(rows, key=lambda r: r.offset):
        last[bytes(r.key)] = bytes(r.value)
    assert last == final
