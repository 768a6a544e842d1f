"""Streaming reads with Spark (local[2]) from real brokers: exactly-once reads with Trigger.AvailableNow,
restart from a checkpoint while producing continues, the per-trigger rate limit, and replayed batches.

Every query here names only `kafka.bootstrap.servers` (support.spark.stream): the suite runs with ZooKeeper
absent from the options, except the test of the start kept in ZooKeeper, which is about ZooKeeper."""

from __future__ import annotations

import threading
import uuid

import pytest
from pyspark.testing import assertDataFrameEqual

from support.spark import COLUMNS, expected_df, produce, run_available_now, stream

pytestmark = pytest.mark.slow

def test_available_now_reads_every_record_exactly_once_with_rate_limit(spark, sparklog_cluster, make_topic, tmp_path):
    topics = [make_topic(partitions=4) for _ in range(3)]
    produced = produce(sparklog_cluster.bootstrap, topics, 2000)
    df = stream(spark, sparklog_cluster, subscribe=",".join(topics), startingOffsets="earliest",
                maxOffsetsPerTrigger=2500, **{"sparklog.queryId": str(tmp_path)})
    sizes = run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    assert sum(sizes) == 6000 and max(sizes) <= 2500 and len([s for s in sizes if s]) >= 3
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assertDataFrameEqual(got, expected_df(spark, produced))
    schema = spark.read.parquet(str(tmp_path / "out")).schema.simpleString()
    assert schema == ("struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
                      "timestamp:timestamp,timestampType:int>")


def test_restart_from_checkpoint_while_producing_has_no_duplicates(spark, sparklog_cluster, make_topic, tmp_path):
    topic = make_topic(partitions=4)
    first = produce(sparklog_cluster.bootstrap, [topic], 1500, "a")
    more: list = []
    background = threading.Thread(target=lambda: more.extend(produce(sparklog_cluster.bootstrap, [topic], 3000, "b")))
    options = dict(subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=1000,
                   **{"sparklog.queryId": f"restart-{uuid.uuid4()}"})
    background.start()
    try:
        before = run_available_now(stream(spark, sparklog_cluster, **options), tmp_path / "out", tmp_path / "ckpt")
    finally:
        background.join()
    after_stop = produce(sparklog_cluster.bootstrap, [topic], 500, "c")  # only a resumed query can read these
    resumed = run_available_now(stream(spark, sparklog_cluster, **options), tmp_path / "out", tmp_path / "ckpt")
    assert sum(resumed) >= 500 and sum(before) + sum(resumed) == 1500 + 3000 + 500  # the restart resumed
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assert got.count() == got.dropDuplicates(["topic", "partition", "offset"]).count()
    assertDataFrameEqual(got, expected_df(spark, first + more + after_stop))


def test_latest_start_is_resolved_once_and_replayed_batches_are_identical(spark, sparklog_cluster, make_topic, tmp_path):
    from sparklog.datasource.options import parse_read_options
    from sparklog.datasource.stream_reader import SparklogStreamReader

    topic = make_topic(partitions=2)
    produce(sparklog_cluster.bootstrap, [topic], 100)
    options = parse_read_options({"zookeeper.connect": sparklog_cluster.zk_connect, "subscribe": topic,
                                  "sparklog.queryId": f"q-{uuid.uuid4()}"}, streaming=True)
    first = SparklogStreamReader(options)
    initial = first.initialOffset()
    assert sum(initial[topic].values()) == 100  # "latest"
    produce(sparklog_cluster.bootstrap, [topic], 50)
    again = SparklogStreamReader(options)  # a restart before the first batch committed
    assert again.initialOffset() == initial
    end = again.latestOffset(initial, again.getDefaultReadLimit())
    parts = again.partitions(initial, end)
    reads = [[b for p in parts for b in again.read(p)] for _ in range(2)]
    rows = [[r for b in batches for r in b.to_pylist()] for batches in reads]
    assert len(rows[0]) == 50 and rows[0] == rows[1]
    first.stop()
    again.stop()


def test_a_query_s_progress_is_a_kafka_group_s_offsets_that_kafka_s_tools_read_as_lag(spark, sparklog_cluster,
                                                                                       make_topic, tmp_path):
    """stream_reader Rule 6 without zookeeper.connect: each committed micro-batch's end is committed as the
    `kafka.group.id` group's offsets, which kafka-consumer-groups' protocol path (confluent-kafka's
    list_consumer_group_offsets: FindCoordinator, OffsetFetch) and `sparklog groups describe` read; the lag
    they show is what the query has not yet committed (Spark commits a batch's end when it plans the next)."""
    import os
    import subprocess
    import sys

    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from support.cluster import REPO

    topic, group = make_topic(partitions=3), f"spark-lag-{uuid.uuid4().hex[:8]}"
    produce(sparklog_cluster.bootstrap, [topic], 600)
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets="earliest", maxOffsetsPerTrigger=250,
                **{"kafka.group.id": group})
    admin = AdminClient({"bootstrap.servers": sparklog_cluster.bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(3)])

    def committed() -> int:
        found = admin.list_consumer_group_offsets([request])[group].result(timeout=30)
        return sum(max(0, tp.offset) for tp in found.topic_partitions)

    assert sum(run_available_now(df, tmp_path / "out", tmp_path / "ckpt")) == 600
    # Spark commits a batch's end to its source when it plans the next batch: the last one's waits for more
    assert committed() == 500  # batches of 250, 250 and 100
    produce(sparklog_cluster.bootstrap, [topic], 90)
    assert sum(run_available_now(df, tmp_path / "out", tmp_path / "ckpt")) == 90  # resumed: batch 3 commits 2
    assert committed() == 600
    described = subprocess.run([sys.executable, "-m", "sparklog.cli", "groups", "--bootstrap-server",
                                sparklog_cluster.bootstrap, "--describe", "--group", group], capture_output=True,
                               timeout=60, cwd=str(REPO), env={**os.environ, "COLUMNS": "200"})
    assert described.returncode == 0, described.stderr.decode()
    rows = [line.split() for line in described.stdout.decode().splitlines() if topic in line]
    assert len(rows) == 3 and sum(int(row[5]) for row in rows) == 90, described.stdout.decode()  # LAG
