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
