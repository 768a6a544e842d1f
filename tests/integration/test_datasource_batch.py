"""Batch reads and writes with Spark (local[2]) against real brokers: exact offset ranges, the write round
trip read back by kafka-python and by the source itself, writeStream, and schema errors at analysis time."""

from __future__ import annotations

import pytest
from pyspark.errors import AnalysisException, PythonException
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from support.spark import COLUMNS, assert_same_rows, expected_df, produce, start_query

pytestmark = pytest.mark.slow


def batch(spark, cluster, **options):
    reader = spark.read.format("sparklog").option("bootstrap.servers", cluster.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_batch_read_returns_exactly_the_json_range(spark, sparklog_cluster, make_topic):
    topic = make_topic(partitions=3)
    produced = produce(sparklog_cluster.bootstrap, [topic], 300)
    latest = {p: max(o for t, q, o, _, _ in produced if q == p) + 1 for p in range(3)}
    df = batch(spark, sparklog_cluster, subscribe=topic, minPartitions=7,
               startingOffsets=f'{{"{topic}":{{"0":10,"1":-2,"2":5}}}}',
               endingOffsets=f'{{"{topic}":{{"0":50,"1":-1,"2":20}}}}')
    want = [r for r in produced if (r[1] == 0 and 10 <= r[2] < 50) or r[1] == 1 or (r[1] == 2 and 5 <= r[2] < 20)]
    assert len(want) == 40 + latest[1] + 15
    assertDataFrameEqual(df.select(*COLUMNS), expected_df(spark, want))
    assert df.rdd.getNumPartitions() >= 7


def test_a_user_schema_reads_the_projection_of_the_whole_rows(spark, sparklog_cluster, make_topic):
    """source.py Rule 3: `.schema(...)` of some columns gives those columns of the same rows; others fail."""
    topic = make_topic(partitions=2)
    produce(sparklog_cluster.bootstrap, [topic], 200)
    reader = spark.read.format("sparklog").option("bootstrap.servers", sparklog_cluster.bootstrap) \
        .option("subscribe", topic)
    whole = reader.load()
    narrow = reader.schema("offset bigint, value binary, partition int").load()
    assert narrow.columns == ["offset", "value", "partition"]
    assertDataFrameEqual(narrow, whole.select("offset", "value", "partition"))
    assert reader.schema("offset bigint").load().count() == 200
    with pytest.raises(Exception, match="is not a column of sparklog's schema"):
        reader.schema("value string").load().collect()


def test_write_100k_rows_round_trip(spark, sparklog_cluster, make_topic, tmp_path):
    from kafka import KafkaConsumer, TopicPartition

    topic, copy = make_topic(partitions=4), make_topic(partitions=4)
    n = 100_000
    source = (spark.range(n).repartition(4)
              .select(F.col("id").cast("string").cast("binary").alias("key"),
                      F.concat(F.lit("value-"), F.col("id").cast("string")).alias("value"),
                      (F.col("id") % 4).cast("int").alias("partition"),
                      F.array(F.struct(F.lit("h").alias("key"), F.col("id").cast("string").cast("binary").alias("value")))
                      .alias("headers")))
    source.write.mode("append").format("sparklog").option("bootstrap.servers", sparklog_cluster.bootstrap) \
        .option("topic", topic).option("sparklog.linger.ms", "5").save()
    want = source.select("key", F.col("value").cast("binary"), "partition", "headers").cache()

    # read back by kafka-python
    consumer = KafkaConsumer(bootstrap_servers=sparklog_cluster.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000, max_partition_fetch_bytes=4 << 20)
    consumer.assign([TopicPartition(topic, p) for p in range(4)])
    rows = []
    for m in consumer:
        rows.append((m.key, m.value, m.partition, [{"key": k, "value": v} for k, v in m.headers]))
        if len(rows) == n:
            break
    consumer.close()
    assert len(rows) == n
    assert_same_rows(spark.createDataFrame(rows, want.schema), want)

    # read back by the sparklog source, and copy it to another topic with writeStream
    got = batch(spark, sparklog_cluster, subscribe=topic, includeHeaders="true")
    assert_same_rows(got.select("key", "value", "partition", "headers"), want)
    stream = (spark.readStream.format("sparklog").option("bootstrap.servers", sparklog_cluster.bootstrap)
              .option("subscribe", topic).option("startingOffsets", "earliest").option("includeHeaders", "true")
              .load().select("key", "value", "partition", "headers"))
    query = start_query(stream.writeStream.format("sparklog").option("bootstrap.servers", sparklog_cluster.bootstrap)
                        .option("topic", copy).option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(availableNow=True))
    query.awaitTermination(300)
    assert query.exception() is None
    copied = batch(spark, sparklog_cluster, subscribe=copy, includeHeaders="true")
    assert_same_rows(copied.select("key", "value", "partition", "headers"), want)
    want.unpersist()


def test_written_keys_land_where_kafka_python_puts_them_and_rows_split_by_the_topic_column(spark, sparklog_cluster,
                                                                                           make_topic):
    """The writer's bulk path (Producer.send_many): murmur2 partitions for keys, every null-key row kept,
    each row in the topic its `topic` column names."""
    from kafka.partitioner.default import murmur2

    first, second = make_topic(partitions=4), make_topic(partitions=4)
    source = (spark.range(2_000).repartition(2)
              .select(F.when(F.col("id") % 3 > 0, F.col("id").cast("string")).alias("key"),
                      F.col("id").cast("string").alias("value"),
                      F.when(F.col("id") % 2 == 0, F.lit(first)).otherwise(F.lit(second)).alias("topic")))
    source.write.mode("append").format("sparklog").option("bootstrap.servers", sparklog_cluster.bootstrap).save()
    got = batch(spark, sparklog_cluster, subscribe=f"{first},{second}").select(
        F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value"), "topic",
        "partition").collect()
    assert len(got) == 2_000
    assert {r.value: (r.key, r.topic) for r in got} == {r.value: (r.key, r.topic) for r in source.collect()}
    for row in got:
        if row.key is not None:
            assert row.partition == (murmur2(row.key.encode()) & 0x7FFFFFFF) % 4


@pytest.mark.parametrize("select, message", [
    (["CAST(id AS STRING) AS key"], "Required attribute 'value' not found"),
    (["id AS value"], "value attribute type must be a string or binary"),
    (["CAST(id AS STRING) AS value", "'x' AS partition"], "partition attribute type must be an int"),
])
def test_wrong_schema_fails_before_writing(spark, sparklog_cluster, make_topic, select, message):
    topic = make_topic(partitions=1)
    with pytest.raises((AnalysisException, PythonException, Exception), match=message):
        spark.range(5).selectExpr(*select).write.mode("append").format("sparklog") \
            .option("bootstrap.servers", sparklog_cluster.bootstrap).option("topic", topic).save()
    assert batch(spark, sparklog_cluster, subscribe=topic).count() == 0


def test_a_write_without_a_topic_fails(spark, sparklog_cluster):
    with pytest.raises(Exception, match="topic option required"):
        spark.range(5).selectExpr("CAST(id AS STRING) AS value").write.mode("append").format("sparklog") \
            .option("bootstrap.servers", sparklog_cluster.bootstrap).save()


def test_every_column_of_the_full_schema_equals_what_was_produced(spark, sparklog_cluster, make_topic):
    """A full-schema read (records decoded straight into the emitted Arrow batch's buffers, arrow.py Rule 5)
    gives every column of every produced record of the range, null keys and values included, with ranges
    that begin and end inside record batches."""
    from chispa import assert_df_equality
    from confluent_kafka import Producer

    topic = make_topic(partitions=2)
    acked, errors = [], []

    def report(err, msg):
        (errors if err is not None else acked).append(err or (msg.partition(), msg.offset(), msg.key(),
                                                               msg.value(), msg.timestamp()[1]))

    producer = Producer({"bootstrap.servers": sparklog_cluster.bootstrap, "linger.ms": 20, "acks": "all"})
    for i in range(600):
        producer.produce(topic, value=None if i % 5 == 0 else b"v%d" % i, key=None if i % 3 == 0 else b"k%d" % i,
                         partition=i % 2, timestamp=1_700_000_000_000 + i, on_delivery=report)
    assert producer.flush(60) == 0 and not errors and len(acked) == 600
    df = batch(spark, sparklog_cluster, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":7,"1":0}}}}',
               endingOffsets=f'{{"{topic}":{{"0":-1,"1":250}}}}')
    assert [f.simpleString() for f in df.schema.fields] == [
        "key:binary", "value:binary", "topic:string", "partition:int", "offset:bigint", "timestamp:timestamp",
        "timestampType:int"]
    got = df.select("key", "value", "topic", "partition", "offset", F.unix_micros("timestamp").alias("micros"),
                    "timestampType")
    want = spark.createDataFrame(
        [(key, value, topic, partition, offset, ts * 1000, 0) for partition, offset, key, value, ts in acked
         if (partition == 0 and offset >= 7) or (partition == 1 and offset < 250)],
        "key binary, value binary, topic string, partition int, offset long, micros long, timestampType int")
    assert want.count() == 300 - 7 + 250
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)
