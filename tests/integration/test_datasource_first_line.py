"""What a Spark user reads first (issue 26): the first line of the error is sparklog's message, not pyspark's
"Traceback (most recent call last):" with the message on line 16, nor pyspark's UnboundLocalError; a starting
offset past the end and a topic deleted under a running query are said as Spark's Kafka source says them."""

from __future__ import annotations

import time

import pytest

from support.spark import produce, run_available_now, start_query, stream

pytestmark = pytest.mark.slow

DELETED_SEEN_TIMEOUT_S = 120  # a processing-time query's next trigger sees the deletion, on a loaded machine


def first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0]


def test_an_option_error_is_the_first_line_of_what_load_raises(spark):
    with pytest.raises(Exception) as raised:
        (spark.read.format("sparklog").option("kafka.bootstrap.servers", "127.0.0.1:1").option("subscribe", "t")
         .option("failOnDataLoss", "maybe").load())
    assert "Option 'failOnDataLoss' must be true or false, not 'maybe'" in first_line(raised.value), str(raised.value)


def test_ending_offsets_on_a_stream_fails_the_query_with_spark_s_refusal_first(spark, tmp_path):
    df = (spark.readStream.format("sparklog").option("kafka.bootstrap.servers", "127.0.0.1:1")
          .option("subscribe", "t").option("endingOffsets", "latest").load())
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt")),
                        str(tmp_path / "out"))  # a sink that a restart (start_query) may recover
    with pytest.raises(Exception) as raised:
        query.awaitTermination(240)
    line = first_line(raised.value)
    assert "ending offset not valid in streaming queries" in line and "UnboundLocalError" not in str(raised.value), \
        str(raised.value)


def test_starting_offsets_past_the_end_say_so_in_spark_s_words(spark, sparklog_cluster, make_topic, tmp_path):
    topic = make_topic(partitions=1)
    produce(sparklog_cluster.bootstrap, [topic], 100)
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":500}}}}')
    with pytest.raises(Exception) as raised:
        run_available_now(df, tmp_path / "out", tmp_path / "ckpt")
    text = str(raised.value)
    assert f"{topic}-0: the starting offset 500 is greater than the latest offset 100" in first_line(raised.value), text
    assert "were deleted" not in text


def test_a_topic_deleted_under_a_running_query_is_data_loss_naming_fail_on_data_loss(
        spark, sparklog_cluster, cluster_zk, make_topic, tmp_path):
    from sparklog.coordination.topics import delete_topic

    topic = make_topic(partitions=1)
    produce(sparklog_cluster.bootstrap, [topic], 10)
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets="earliest")
    query = start_query(df.writeStream.format("memory").queryName("deleted_under_query").trigger(
        processingTime="1 second").option("checkpointLocation", str(tmp_path / "ckpt")))
    deadline = time.monotonic() + DELETED_SEEN_TIMEOUT_S
    while query.isActive and not query.recentProgress and time.monotonic() < deadline:
        time.sleep(0.5)
    delete_topic(cluster_zk, topic)
    with pytest.raises(Exception) as raised:
        query.awaitTermination(DELETED_SEEN_TIMEOUT_S)
        query.stop()
    line = first_line(raised.value)
    assert f"Topic {topic} was deleted while the query read it" in line and "failOnDataLoss" in str(raised.value), \
        str(raised.value)
    assert "create it first" not in str(raised.value)


# -- writes: a row the sink cannot write is the first line of what save() or the query raises -------------------

def write(spark, bootstrap: str, sql: str, **options):
    writer = spark.sql(sql).write.format("sparklog").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()


def refused_first_line(spark, bootstrap: str, sql: str, **options) -> str:
    with pytest.raises(Exception) as raised:
        write(spark, bootstrap, sql, **options)
    assert first_line(raised.value), str(raised.value)
    return first_line(raised.value) + "\n" + str(raised.value)  # the whole text after it, for the failure report


def count(spark, cluster, topic: str) -> int:
    return (spark.read.format("sparklog").option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", topic).option("kafka.isolation.level", "read_committed").load().count())


@pytest.mark.parametrize("partition", [5, -1])
def test_a_partition_the_topic_lacks_is_the_first_line_of_what_save_raises(spark, sparklog_cluster, make_topic,
                                                                            partition):
    topic = make_topic(partitions=2)
    text = refused_first_line(spark, sparklog_cluster.bootstrap, f"SELECT 'v' AS value, {partition} AS partition",
                              topic=topic)
    assert f"Partition {partition} of topic {topic} does not exist: the topic has 2 partitions (0 to 1)" in \
        text.splitlines()[0], text
    assert count(spark, sparklog_cluster, topic) == 0


def test_a_partition_the_topic_lacks_refuses_an_exactly_once_write_with_nothing_visible(
        spark, sparklog_cluster, make_topic):
    topic = make_topic(partitions=2)
    text = refused_first_line(spark, sparklog_cluster.bootstrap,
                              "SELECT CAST(id AS STRING) AS value, IF(id = 7, 9, 0) AS partition FROM range(20)",
                              topic=topic, deliveryGuarantee="exactly-once",
                              transactionalIdPrefix=f"eos-{topic}")
    assert f"Partition 9 of topic {topic} does not exist: the topic has 2 partitions" in text.splitlines()[0], text
    assert count(spark, sparklog_cluster, topic) == 0  # no task's transaction committed
    write(spark, sparklog_cluster.bootstrap, "SELECT 'after' AS value, 0 AS partition", topic=topic)  # where
    # the other task (rows 10-19, partition 0) wrote
    assert count(spark, sparklog_cluster, topic) == 1  # and none left open: the last stable offset moves on


def test_a_partition_column_of_the_wrong_type_is_the_first_line(spark, sparklog_cluster, make_topic):
    text = refused_first_line(spark, sparklog_cluster.bootstrap, "SELECT 'v' AS value, '1' AS partition",
                              topic=make_topic(partitions=1))
    assert "partition attribute type must be an int, not string" in text.splitlines()[0], text


def test_a_null_topic_is_the_first_line_of_what_save_raises(spark, sparklog_cluster):
    text = refused_first_line(spark, sparklog_cluster.bootstrap,
                              "SELECT 'v' AS value, CAST(NULL AS STRING) AS topic")
    assert "Null topic present in the data. Use the topic option for setting a topic." in text.splitlines()[0], text


@pytest.fixture(scope="module")
def no_auto_create_cluster(request, zookeeper, tmp_path_factory):
    import uuid

    from support.cluster import Cluster

    cluster = Cluster(f"{zookeeper.connect_string}/noauto-{uuid.uuid4().hex}", tmp_path_factory.mktemp("noauto"),
                      brokers=1, overrides={"auto.create.topics.enable": "false"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


def test_a_topic_that_does_not_exist_is_the_first_line_of_what_save_raises(spark, no_auto_create_cluster):
    text = refused_first_line(spark, no_auto_create_cluster.bootstrap, "SELECT 'v' AS value", topic="absent-26",
                              **{"kafka.max.block.ms": "2000"})
    assert "Topic absent-26 not present in metadata after 2000 ms: it does not exist" in text.splitlines()[0], text


def test_a_partition_the_topic_lacks_fails_a_streaming_write_with_it_first(spark, sparklog_cluster, make_topic,
                                                                          tmp_path):
    source, sink = make_topic(partitions=1), make_topic(partitions=2)
    produce(sparklog_cluster.bootstrap, [source], 10)
    df = stream(spark, sparklog_cluster, subscribe=source, startingOffsets="earliest").selectExpr(
        "value", "7 AS partition")
    query = start_query(df.writeStream.format("sparklog").option("kafka.bootstrap.servers", sparklog_cluster.bootstrap)
                        .option("topic", sink).option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(availableNow=True))
    with pytest.raises(Exception) as raised:
        query.awaitTermination(240)
    assert f"Partition 7 of topic {sink} does not exist: the topic has 2 partitions (0 to 1)" in \
        first_line(raised.value), str(raised.value)


# -- what Spark says before sparklog is asked (README, "Writing"): pinned, so a pyspark that words them otherwise
# -- is noticed. Neither runs any code of the source (no DataSource is created), so sparklog cannot add to them.

def test_save_without_a_mode_is_refused_by_spark_naming_append(spark):
    with pytest.raises(Exception) as raised:
        (spark.sql("SELECT 'v' AS value").write.format("sparklog").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("topic", "t").save())
    line = first_line(raised.value)
    assert line.startswith("[UNSUPPORTED_DATA_SOURCE_SAVE_MODE]") and '"ErrorIfExists" mode' in line and \
        '"Append"' in line, str(raised.value)


def test_update_mode_is_refused_by_spark_when_the_query_starts(spark, tmp_path):
    counts = spark.readStream.format("rate").load().groupBy("value").count().selectExpr(
        "CAST(value AS STRING) AS value")
    query = (counts.writeStream.outputMode("update").format("sparklog").option("kafka.bootstrap.servers", "127.0.0.1:1")
             .option("topic", "t").option("checkpointLocation", str(tmp_path / "ckpt")).start())
    with pytest.raises(Exception) as raised:
        query.awaitTermination(120)
    assert "sparklog does not support Update mode" in first_line(raised.value), str(raised.value)
