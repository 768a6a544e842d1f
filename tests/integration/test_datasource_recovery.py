"""Data the query needs deleted by retention (both failOnDataLoss modes), subscribePattern picking up
a topic created while the query runs, and partitions added to a subscribed topic while it runs."""

from __future__ import annotations

import time
import uuid

import pytest
from pyspark.testing import assertDataFrameEqual

from support.spark import COLUMNS, expected_df, produce, run_available_now, start_query, stream

pytestmark = pytest.mark.slow

RETENTION_MS = 2000  # the trimmed topic's retention.ms
OLD_AGE_MS = 60_000  # how old the trimmed topic's first records are: far past RETENTION_MS


def wait_log_start(bootstrap: str, topic: str, minimum: int, timeout: float = 60.0) -> int:
    from sparklog.client.consumer import Consumer

    consumer = Consumer(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while True:
            start = consumer.beginning_offsets([(topic, 0)])[(topic, 0)]
            if start >= minimum:
                return start
            assert time.monotonic() < deadline, f"retention left the log start of {topic}-0 at {start}"
            time.sleep(0.25)
    finally:
        consumer.close()


@pytest.fixture
def trimmed_topic(sparklog_cluster, make_topic):
    """One partition of 400 records whose first segments retention has deleted; returns (topic, rows, start)."""
    topic = make_topic(partitions=1, config={"segment.bytes": 2048, "retention.ms": RETENTION_MS})
    # the old records carry a CreateTime past retention.ms, so their segments expire without a wait
    old = produce(sparklog_cluster.bootstrap, [topic], 200, "old", timestamp_ms=int(time.time() * 1000) - OLD_AGE_MS)
    # ... and the new ones a CreateTime ahead, so that they outlive the test: retention takes the active
    # segment too once it has expired (as Kafka's does)
    new = produce(sparklog_cluster.bootstrap, [topic], 200, "new", timestamp_ms=int(time.time() * 1000) + OLD_AGE_MS)
    start = wait_log_start(sparklog_cluster.bootstrap, topic, 1)
    assert start <= 200  # the new records are all still there
    return topic, old + new, start


def test_fail_on_data_loss_true_names_the_missing_range(spark, sparklog_cluster, trimmed_topic, tmp_path):
    topic, _, start = trimmed_topic
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":0}}}}')
    with pytest.raises(Exception) as failure:
        run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    text = str(failure.value)
    assert "Offsets [0, " in text and f"of {topic}-0 are missing" in text and "failOnDataLoss" in text


def test_fail_on_data_loss_false_continues_from_earliest(spark, sparklog_cluster, trimmed_topic, tmp_path):
    topic, produced, _ = trimmed_topic
    df = stream(spark, sparklog_cluster, subscribe=topic, failOnDataLoss="false",
                startingOffsets=f'{{"{topic}":{{"0":0}}}}')
    run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    first = got.agg({"offset": "min"}).first()[0]
    assert first > 0
    assertDataFrameEqual(got, expected_df(spark, [r for r in produced if r[2] >= first]))


def test_a_quiet_topic_whose_retention_is_lowered_at_runtime_empties_and_reads_empty(
        spark, sparklog_cluster, make_topic, tmp_path):
    """Kafka's retention takes the active segment too, once all of it has expired: lowering retention.ms of a
    topic nobody writes to any more (kafka-python's AlterConfigs) empties it, its log start reaching its end;
    the last records used to stay until another append."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    topic = make_topic(partitions=1)
    produce(sparklog_cluster.bootstrap, [topic], 30, "quiet", timestamp_ms=int(time.time() * 1000) - OLD_AGE_MS)
    admin = KafkaAdminClient(bootstrap_servers=sparklog_cluster.bootstrap)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "1000"})])
    finally:
        admin.close()
    assert wait_log_start(sparklog_cluster.bootstrap, topic, 30) == 30
    consumer = Consumer({"bootstrap.servers": sparklog_cluster.bootstrap, "group.id": "g"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30) == (30, 30)
    finally:
        consumer.close()
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets="earliest")
    assert sum(run_available_now(df, tmp_path / "out", tmp_path / "ckpt")) == 0


def test_subscribe_pattern_picks_up_a_new_topic(spark, sparklog_cluster, make_topic, tmp_path):
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    first = make_topic(f"{prefix}-a", partitions=2)
    rows = produce(sparklog_cluster.bootstrap, [first], 100)
    df = stream(spark, sparklog_cluster, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(processingTime="500 milliseconds"), str(tmp_path / "out"))
    try:
        query.processAllAvailable()
        second = make_topic(f"{prefix}-b", partitions=3)
        rows += produce(sparklog_cluster.bootstrap, [second], 150)
        deadline = time.monotonic() + 120
        while spark.read.parquet(str(tmp_path / "out")).count() < 250:
            assert query.exception() is None and time.monotonic() < deadline
            time.sleep(1)
    finally:
        query.stop()
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assertDataFrameEqual(got, expected_df(spark, rows))


def test_partitions_added_while_the_query_runs_are_read_from_their_start(spark, sparklog_cluster, make_topic,
                                                                         tmp_path):
    """As Spark's Kafka source: new partitions join the next batch from offset 0. The trigger after the
    partitions came failed ('does not exist or has no leader': the driver's consumer kept stale metadata)."""
    from sparklog.client.admin import AdminClient

    topic = make_topic(partitions=2)
    rows = produce(sparklog_cluster.bootstrap, [topic], 100)
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets="earliest")
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(processingTime="500 milliseconds"), str(tmp_path / "out"))
    try:
        query.processAllAvailable()
        with AdminClient(sparklog_cluster.bootstrap) as admin:
            admin.create_partitions(topic, 4)
            admin.wait_for_leaders(topic, timeout=30, partitions=4)
        rows += produce(sparklog_cluster.bootstrap, [topic], 200, tag="b")
        assert {r[1] for r in rows} == {0, 1, 2, 3}
        deadline = time.monotonic() + 120
        while spark.read.parquet(str(tmp_path / "out")).count() < 300:
            assert query.exception() is None and time.monotonic() < deadline, query.exception()
            time.sleep(1)
    finally:
        query.stop()
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assertDataFrameEqual(got, expected_df(spark, rows))
