"""One SparkSession for the whole test session: local[2], few shuffle partitions, no UI.

`PYSPARK_PYTHON` is set to this interpreter first, so Spark's Python workers import the same sparklog (and
find the `pyspark_sparklog` module that registers `format("sparklog")`).
"""

from __future__ import annotations

import os
import sys
import time

from jobs.common import start_query  # noqa: F401 - re-exported for the tests: started past Spark's connect-back timeout

SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.streaming.stopTimeout": "30s",
    "spark.driver.memory": "1g",
    "spark.python.worker.reuse": "true",
}


def new_session(master: str = "local[2]", app_name: str = "sparklog-tests", conf: dict | None = None):
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in {**SPARK_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def executors(spark) -> int:
    """Executors registered with the driver (the driver's own block manager is counted apart)."""
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


# -- helpers shared by the data source integration tests ---------------------------------------------

COLUMNS = ["topic", "partition", "offset", "key", "value"]


def produce(bootstrap: str, topics: list[str], per_topic: int, tag: str = "", timestamp_ms: int = 0) -> list[tuple]:
    """Produce with confluent-kafka; return (topic, partition, offset, key, value) of every acked record.
    `timestamp_ms` is every record's CreateTime (0: now), so a test can make records old without waiting."""
    from confluent_kafka import Producer

    acked, errors = [], []

    def report(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value()))

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for topic in topics:
        for i in range(per_topic):
            producer.produce(topic, value=f"{tag}v{i}".encode(), key=f"k{i}".encode(), on_delivery=report,
                             timestamp=timestamp_ms)
            if i % 1000 == 0:
                producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors
    wait_visible(bootstrap, acked)
    return acked


def wait_visible(bootstrap: str, acked: list[tuple], timeout: float = 30.0) -> None:
    """Until ListOffsets(latest) covers every acked record: the broker moves its high watermark a little
    after it acknowledges (seen up to ~1 s), and a query resolving "latest" must see the whole set."""
    from sparklog.client.consumer import Consumer

    wanted: dict = {}
    for topic, partition, offset, _, _ in acked:
        wanted[(topic, partition)] = max(wanted.get((topic, partition), 0), offset + 1)
    consumer = Consumer(bootstrap_servers=bootstrap)
    try:
        deadline = time.monotonic() + timeout
        while True:
            latest = consumer.end_offsets(list(wanted))
            if all(latest[tp] >= end for tp, end in wanted.items()):
                return
            assert time.monotonic() < deadline, f"high watermarks {latest} still below {wanted}"
            time.sleep(0.1)
    finally:
        consumer.close()


def expected_df(spark, rows):
    return spark.createDataFrame(rows, "topic string, partition int, offset long, key binary, value binary")


DIFF_EXAMPLES = 5  # rows of each difference that a failed assert_same_rows shows


def assert_same_rows(got, want) -> None:
    """`got` holds exactly `want`'s rows, duplicates counted, in any order, and the same column types: what
    assertDataFrameEqual checks, but compared in the JVM (exceptAll both ways); assertDataFrameEqual collects
    both sides into Python, which takes minutes for 100,000 rows on 2 cores."""
    assert got.dtypes == want.dtypes, f"column types differ: {got.dtypes} != {want.dtypes}"
    missing = want.exceptAll(got).limit(DIFF_EXAMPLES).collect()
    unexpected = got.exceptAll(want).limit(DIFF_EXAMPLES).collect()
    assert not missing and not unexpected, f"rows missing (first {DIFF_EXAMPLES}): {missing}; " \
                                           f"rows not expected: {unexpected}"


def stream(spark, cluster, **options):
    """A readStream naming only the brokers (`kafka.bootstrap.servers`) when `cluster` has them, so the
    streaming suite runs with ZooKeeper absent from the options; `zookeeper.connect` otherwise."""
    bootstrap = getattr(cluster, "bootstrap", None)
    reader = spark.readStream.format("sparklog")
    if bootstrap:
        reader = reader.option("kafka.bootstrap.servers", bootstrap)
    else:
        reader = reader.option("zookeeper.connect", cluster.zk_connect)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def run_available_now(df, out, checkpoint):
    """Run an AvailableNow query to its end (start_query); the rows of each micro-batch."""
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(checkpoint))
                        .trigger(availableNow=True), str(out))
    query.awaitTermination(240)  # raises the query's failure
    assert not query.isActive
    return [p["numInputRows"] for p in query.recentProgress]
