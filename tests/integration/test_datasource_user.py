"""The source as a Spark Kafka user meets it (issue 13), with Spark local[2] and real brokers: the default
`latest` stream over a live producer, errors instead of empty results (unreachable brokers, a broker down, a
missing topic), options checked at `load()`, queries sharing a group id, pattern discovery without
ZooKeeper, update mode, and the offsets-behind-latest figures of the progress."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from support.spark import COLUMNS, expected_df, produce, run_available_now, start_query

pytestmark = pytest.mark.slow

FAST_TIMEOUT_MS = 3000  # kafkaConsumer.pollTimeoutMs for the failure cases
# kafkaConsumer.pollTimeoutMs where a live broker must answer the metadata that names the failure (the read waits
# this long for the dead broker's partitions, then names them): at load 20 a 3 s bound ran out before broker 1
# answered, and the read said "could not reach the brokers" instead
LIVE_ANSWER_TIMEOUT_MS = 10000
# Each failure must come well before the default pollTimeoutMs (120 s, which the old code waited out, up to
# four times): the fast timeout plus Spark's own worker start-up and planning on a loaded machine.
FAILURE_BUDGET_S = 60
STOPPED_SEEN_TIMEOUT_S = 30  # until a stopped broker is gone from the other broker's metadata
PRODUCER_PAUSE_S = 0.1  # between the live producer's rounds: a steady trickle that leaves Spark the CPU


def read(spark, bootstrap: str, streaming: bool = False, **options):
    """A reader with only `kafka.bootstrap.servers` for connection: ZooKeeper is absent."""
    reader = (spark.readStream if streaming else spark.read).format("sparklog")
    reader = reader.option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def test_default_latest_stream_over_a_live_producer_reads_exactly_what_follows_its_start(spark, sparklog_cluster,
                                                                                          make_topic):
    """Item 1: only `kafka.bootstrap.servers` and `subscribe`; batch 0 must not fail with a data-loss error."""
    bootstrap = sparklog_cluster.bootstrap
    topic = make_topic(partitions=2)
    for run in range(3):
        before = produce(bootstrap, [topic], 50, f"before{run}-")
        produced, stop = [], threading.Event()

        def producing(run=run):
            i = 0
            while not stop.wait(PRODUCER_PAUSE_S):
                produced.extend(produce(bootstrap, [topic], 10, f"during{run}-{i}-"))
                i += 1

        name = f"live_{uuid.uuid4().hex[:8]}"
        # the producer starts once the source runs (start_query): Spark calls initialOffset() per trigger
        query = start_query(read(spark, bootstrap, streaming=True, subscribe=topic).writeStream.format("memory")
                            .queryName(name).trigger(processingTime="300 milliseconds"))
        producer = threading.Thread(target=producing)
        producer.start()
        try:
            deadline = time.monotonic() + 60
            while sum(p["numInputRows"] for p in query.recentProgress) < 20 and query.isActive:
                assert time.monotonic() < deadline, "the stream read nothing while the producer ran"
                time.sleep(0.2)
        finally:
            stop.set()
            producer.join()
        query.processAllAvailable()
        query.stop()
        assert query.exception() is None
        table = spark.table(name).select(*COLUMNS)
        got = table.collect()
        first = {}
        for row in got:
            first[row.partition] = min(first.get(row.partition, row.offset), row.offset)
        want = [r for r in produced if r[1] in first and r[2] >= first[r[1]]]
        assert not {r[4] for r in before} & {row.value for row in got}  # "latest": nothing from before the start
        assert len(got) >= 20 and len(got) == len(want)
        assertDataFrameEqual(table, expected_df(spark, want))


@pytest.mark.parametrize("servers", ["127.0.0.1:1", "no-such-host.invalid:9092"])
def test_unreachable_brokers_fail_within_the_timeout_never_with_zero_rows(spark, servers, tmp_path):
    """Item 2: nothing listens there, or the name does not resolve: batch and AvailableNow both fail."""
    options = {"subscribe": "t", "kafkaConsumer.pollTimeoutMs": FAST_TIMEOUT_MS}
    began = time.monotonic()
    with pytest.raises(Exception, match=f"Could not reach the brokers at {servers}"):
        read(spark, servers, startingOffsets="earliest", **options).count()
    assert time.monotonic() - began < FAILURE_BUDGET_S
    began = time.monotonic()
    with pytest.raises(Exception, match=f"Could not reach the brokers at {servers}"):
        run_available_now(read(spark, servers, streaming=True, **options), tmp_path / "out", tmp_path / "ckpt")
    assert time.monotonic() - began < FAILURE_BUDGET_S


def test_a_broker_down_fails_the_read_naming_its_partitions(spark, zookeeper, tmp_path):
    """Item 2: with one of two brokers down, its partitions have no leader: an error, not the other half."""
    from sparklog.client.admin import AdminClient
    from support.cluster import Cluster, wait_until, wait_until_every_broker_knows_all

    cluster = Cluster(f"{zookeeper.connect_string}/down-{uuid.uuid4().hex}", tmp_path / "brokers", brokers=2)
    try:
        cluster.start()
        both = cluster.bootstrap
        # a broker that does not know the other yet places every partition on itself, and then stopping
        # broker 2 leaves every partition led (a fresh-clone run read all 200 rows with broker 2 stopped)
        wait_until_every_broker_knows_all(cluster)
        with AdminClient(both) as admin:
            admin.create_topic("halves", partitions=4)
            leaders = admin.wait_for_leaders("halves", partitions=4)
        assert set(leaders.values()) == {1, 2}, leaders
        produce(both, ["halves"], 200)
        assert read(spark, both, subscribe="halves").count() == 200
        cluster.brokers[2].stop()
        one = cluster.brokers[1]
        with AdminClient(f"{one.host}:{one.port}") as admin:  # broker 1 hears of the stop through ZooKeeper, later
            wait_until(lambda: {b.node_id for b in admin.metadata(["halves"]).brokers} == {1},
                       "broker 1's metadata without broker 2", STOPPED_SEEN_TIMEOUT_S)
        options = {"subscribe": "halves", "kafkaConsumer.pollTimeoutMs": LIVE_ANSWER_TIMEOUT_MS}
        began = time.monotonic()
        with pytest.raises(Exception, match=r"Partitions halves-\d(, halves-\d)* have no live leader"):
            rows = read(spark, both, **options).groupBy("partition").count().collect()
            pytest.fail(f"with broker 2 stopped the read gave {sorted(map(tuple, rows))} (partition, rows), no error")
        assert time.monotonic() - began < FAILURE_BUDGET_S
        began = time.monotonic()
        with pytest.raises(Exception, match="have no live leader"):
            run_available_now(read(spark, both, streaming=True, startingOffsets="earliest", **options),
                              tmp_path / "out", tmp_path / "ckpt")
        assert time.monotonic() - began < FAILURE_BUDGET_S
    finally:
        cluster.stop()


def test_a_missing_topic_is_an_error_unless_the_query_waits_for_it(spark, sparklog_cluster, tmp_path):
    """Item 13: batch and stream fail naming the topic and the option; `sparklog.waitForTopics` opts in."""
    from sparklog.client.admin import AdminClient

    bootstrap, topic = sparklog_cluster.bootstrap, f"absent-{uuid.uuid4().hex[:8]}"
    message = f"Topic {topic} does not exist .* set the option 'sparklog.waitForTopics'"
    with pytest.raises(Exception, match=message):
        read(spark, bootstrap, subscribe=topic).count()
    with pytest.raises(Exception, match=message):
        run_available_now(read(spark, bootstrap, streaming=True, subscribe=topic), tmp_path / "out", tmp_path / "ck")
    assert read(spark, bootstrap, subscribe=topic, **{"sparklog.waitForTopics": "true"}).count() == 0
    with AdminClient(bootstrap) as admin:
        assert topic not in admin.describe([topic])  # looking never created it


def test_two_queries_sharing_a_group_id_each_start_where_they_asked(spark, sparklog_cluster, make_topic, tmp_path):
    """Item 3: the group id names where progress is shown; it never keys a query's initial offsets."""
    topic = make_topic(partitions=2)
    first = produce(sparklog_cluster.bootstrap, [topic], 100, "a")
    options = {"subscribe": topic, "kafka.group.id": f"shared-{uuid.uuid4().hex[:6]}",
               "zookeeper.connect": sparklog_cluster.zk_connect}
    latest = read(spark, sparklog_cluster.bootstrap, streaming=True, startingOffsets="latest", **options)
    assert sum(run_available_now(latest, tmp_path / "out1", tmp_path / "ckpt1")) == 0
    more = produce(sparklog_cluster.bootstrap, [topic], 40, "b")
    earliest = read(spark, sparklog_cluster.bootstrap, streaming=True, startingOffsets="earliest", **options)
    assert sum(run_available_now(earliest, tmp_path / "out2", tmp_path / "ckpt2")) == 140
    got = spark.read.parquet(str(tmp_path / "out2")).select(*COLUMNS)
    assertDataFrameEqual(got, expected_df(spark, first + more))


def test_options_are_checked_at_load_with_what_to_do(spark, sparklog_cluster):
    """Items 5, 7 and 8: a bad option fails at `load()`, before any query starts, saying what to do."""
    bootstrap = sparklog_cluster.bootstrap
    with pytest.raises(Exception, match=r"minOffsetPerTrigger\(100\) is higher than the maxOffsetsPerTrigger\(10\)"):
        read(spark, bootstrap, streaming=True, subscribe="t", minOffsetsPerTrigger=100, maxOffsetsPerTrigger=10)
    with pytest.raises(Exception, match="Option 'kafka.sasl.mechanism' cannot be used: sasl.mechanism=GSSAPI"):
        read(spark, bootstrap, subscribe="t", **{"kafka.security.protocol": "SASL_SSL"})  # SASL_SSL is spoken now
    with pytest.raises(Exception, match="One of the following options must be specified"):
        read(spark, bootstrap)
    with pytest.raises(Exception, match="No brokers to connect to: set the option 'kafka.bootstrap.servers'"):
        spark.read.format("sparklog").option("subscribe", "t").load()


def test_known_kafka_settings_pass_through_to_the_client(spark, sparklog_cluster, make_topic):
    """Item 7: `kafka.max.poll.records`, `kafka.fetch.max.bytes` reach the consumer, whose own checks refuse
    a bad value at load(); good values read as usual."""
    with pytest.raises(Exception, match="Option 'kafka.max.poll.records' has a value the client refuses"):
        read(spark, sparklog_cluster.bootstrap, subscribe="t", **{"kafka.max.poll.records": "many"})
    topic = make_topic(partitions=2)
    produced = produce(sparklog_cluster.bootstrap, [topic], 300)
    df = read(spark, sparklog_cluster.bootstrap, subscribe=topic,
              **{"kafka.max.poll.records": 7, "kafka.fetch.max.bytes": 1024, "kafka.client.id": "spark-test"})
    assertDataFrameEqual(df.select(*COLUMNS), expected_df(spark, produced))


def test_subscribe_pattern_discovers_topics_through_the_brokers(spark, sparklog_cluster, make_topic):
    """Item 6: no `zookeeper.connect`; the pattern is found anywhere in a name, as Spark 4's source does."""
    tag = uuid.uuid4().hex[:8]
    topics = [make_topic(f"pat{tag}_a", partitions=2), make_topic(f"pat{tag}_b", partitions=1)]
    make_topic(f"other{tag}", partitions=1)
    produced = produce(sparklog_cluster.bootstrap, topics + [f"other{tag}"], 30)
    df = read(spark, sparklog_cluster.bootstrap, subscribePattern=f"pat{tag}")
    assertDataFrameEqual(df.select(*COLUMNS), expected_df(spark, [r for r in produced if r[0] in topics]))


def test_overwrite_is_refused_and_nothing_is_written(spark, sparklog_cluster, make_topic):
    """Item 4."""
    topic = make_topic(partitions=1)
    with pytest.raises(Exception, match=r'Save mode "overwrite" is not allowed for sparklog.*Use .mode\("append"\)'):
        (spark.range(3).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog").mode("overwrite")
         .option("kafka.bootstrap.servers", sparklog_cluster.bootstrap).option("topic", topic).save())
    assert read(spark, sparklog_cluster.bootstrap, subscribe=topic).count() == 0


def test_an_aggregation_in_update_mode_is_written_to_a_topic(spark, sparklog_cluster, make_topic, tmp_path):
    """Item 9: `foreachBatch(to_sparklog(...))` in output mode update; the last record per key is its count."""
    from sparklog.datasource.writer import to_sparklog

    bootstrap = sparklog_cluster.bootstrap
    source, sink = make_topic(partitions=2), make_topic(partitions=1)
    for i in range(3):
        produce(bootstrap, [source], 10, f"round{i}-")  # keys k0..k9, three records each
    counts = (read(spark, bootstrap, streaming=True, subscribe=source, startingOffsets="earliest",
                   maxOffsetsPerTrigger=10)
              .groupBy("key").count().select(F.col("key"), F.col("count").cast("string").alias("value")))
    query = start_query(counts.writeStream.outputMode("update")
                        .foreachBatch(to_sparklog(**{"kafka.bootstrap.servers": bootstrap, "topic": sink}))
                        .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True))
    query.awaitTermination(240)
    assert query.exception() is None
    rows = read(spark, bootstrap, subscribe=sink).orderBy("offset").collect()
    last = {row.key: row.value for row in rows}
    assert len(rows) > 10  # several batches, each with the keys it updated
    assert last == {f"k{i}".encode(): b"3" for i in range(10)}


def test_ending_offsets_past_the_end_are_reported_at_once(spark, sparklog_cluster, make_topic):
    """Item 11: with the default pollTimeoutMs (120 s) the error still comes from planning, fast."""
    topic = make_topic(partitions=1)
    produce(sparklog_cluster.bootstrap, [topic], 10)
    began = time.monotonic()
    with pytest.raises(Exception, match=f"{topic}-0 asks 1000 but ends at 10"):
        read(spark, sparklog_cluster.bootstrap, subscribe=topic, endingOffsets=f'{{"{topic}":{{"0":1000}}}}').count()
    assert time.monotonic() - began < FAILURE_BUDGET_S


def test_progress_reports_the_real_latest_offset_and_offsets_behind_it(spark, sparklog_cluster, make_topic, tmp_path):
    """Item 12: rate-limited batches still show the log's latest offset; behind-latest is derived from it."""
    from sparklog.datasource import offsets_behind_latest

    topic = make_topic(partitions=1)
    produce(sparklog_cluster.bootstrap, [topic], 200)
    df = read(spark, sparklog_cluster.bootstrap, streaming=True, subscribe=topic, startingOffsets="earliest",
              maxOffsetsPerTrigger=50)
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(availableNow=True), str(tmp_path / "out"))
    query.awaitTermination(240)
    assert query.exception() is None
    first = query.recentProgress[0]["sources"][0]
    assert json.loads(first["latestOffset"]) == {topic: {"0": 200}}
    assert json.loads(first["endOffset"]) == {topic: {"0": 50}}
    assert offsets_behind_latest(first) == {"minOffsetsBehindLatest": "150", "maxOffsetsBehindLatest": "150",
                                            "avgOffsetsBehindLatest": "150.0"}


def test_a_write_from_another_python_thread_works_once_the_session_is_active_there(spark, sparklog_cluster,
                                                                                     make_topic):
    """Item 10: Spark finds Python sinks through the thread's active session; `activate(spark)` sets it."""
    from sparklog.datasource import activate

    topic, failures = make_topic(partitions=1), []

    def write(use_activate: bool) -> None:
        try:
            if use_activate:
                activate(spark)
            (spark.range(5).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog").mode("append")
             .option("kafka.bootstrap.servers", sparklog_cluster.bootstrap).option("topic", topic).save())
        except Exception as exc:  # noqa: BLE001 - reported to the test thread
            failures.append(exc)

    for use_activate in (False, True):
        thread = threading.Thread(target=write, args=(use_activate,))
        thread.start()
        thread.join()
    assert len(failures) == 1 and "DATA_SOURCE_NOT_FOUND" in str(failures[0])  # Spark's limit, shown
    assert read(spark, sparklog_cluster.bootstrap, subscribe=topic).count() == 5
