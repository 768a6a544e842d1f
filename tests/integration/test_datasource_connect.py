"""`format("sparklog")` from a Spark Connect client: a Connect server in a subprocess of its own (pyspark's
SparkConnectServer, local mode, its Python workers this interpreter: support/connect.py), a sparklog broker in
another, and the client session in the test process. Streaming reads, batch reads and both sinks (at-least-once
and `deliveryGuarantee=exactly-once`, streaming and batch) run on the server; the client only sends plans.

The source is found on the server without any call (`pyspark_sparklog`, importable by the server's Python
workers); `register(spark)` and `activate(spark)` also work on a Connect session."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from support.cluster import Cluster
from support.connect import ConnectServer, connect_session
from support.spark import produce, start_query

pytestmark = pytest.mark.slow

# One broker hosts the exactly-once sink's transactions and ledger (Kafka's defaults want three replicas).
ONE_BROKER_TRANSACTIONS = {"transaction.state.log.replication.factor": "1", "transaction.state.log.min.isr": "1",
                           "transaction.state.log.num.partitions": "3", "offsets.topic.replication.factor": "1"}
QUERY_TIMEOUT_S = 300
ROWS = 300


@pytest.fixture(scope="module")
def cluster(request, zookeeper, tmp_path_factory):
    cluster = Cluster(f"{zookeeper.connect_string}/connect-{uuid.uuid4().hex}", tmp_path_factory.mktemp("brokers"),
                      brokers=1, overrides={**ONE_BROKER_TRANSACTIONS, "num.partitions": "2"})
    request.addfinalizer(cluster.stop)
    cluster.start()
    return cluster


@pytest.fixture(scope="module")
def remote(request, tmp_path_factory):
    server = ConnectServer(tmp_path_factory.mktemp("connect"))
    request.addfinalizer(server.stop)
    url = server.start()
    with connect_session(url) as session:
        yield session


def reader(spark, cluster, topic: str, **options):
    read = spark.read.format("sparklog").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("subscribe", topic).option("startingOffsets", "earliest")
    for key, value in options.items():
        read = read.option(key, value)
    return read.load()


def pairs(df) -> list[tuple[bytes, bytes]]:
    return sorted((bytes(row.key), bytes(row.value)) for row in df.select("key", "value").collect())


def copy_stream(spark, cluster, source: str, sink: str, checkpoint, **sink_options):
    """An AvailableNow query sparklog -> sparklog over Connect, run to its end; its micro-batches' row counts."""
    df = spark.readStream.format("sparklog").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("subscribe", source).option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 200).load()
    writer = df.selectExpr("key", "value").writeStream.format("sparklog") \
        .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", sink) \
        .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = start_query(writer)
    query.awaitTermination(QUERY_TIMEOUT_S)
    assert not query.isActive and query.exception() is None, query.exception()
    return [progress.numInputRows for progress in query.recentProgress]  # a Connect progress: the JSON keys may be absent


def ledger(spark, cluster, prefix: str) -> list[tuple[int, str]]:
    """The exactly-once sink's decisions (datasource/exactly_once.py Rule 4), oldest first."""
    rows = reader(spark, cluster, f"__sparklog_eos-{prefix}").orderBy("offset").collect()
    decisions = [json.loads(bytes(row.value)) for row in rows]
    return [(decision["batch"], decision["state"]) for decision in decisions]


def test_a_stream_sparklog_to_sparklog_resumes_from_its_checkpoint_over_connect(remote, cluster, tmp_path):
    source, sink = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}"
    first = produce(cluster.bootstrap, [source], ROWS, "a")
    assert sum(copy_stream(remote, cluster, source, sink, tmp_path / "ckpt")) == ROWS
    more = produce(cluster.bootstrap, [source], 100, "b")  # only a query resumed from its checkpoint reads these alone
    assert copy_stream(remote, cluster, source, sink, tmp_path / "ckpt") == [100]
    assert pairs(reader(remote, cluster, sink)) == sorted((key, value) for _, _, _, key, value in first + more)


def test_the_exactly_once_sink_commits_each_micro_batch_over_connect(remote, cluster, tmp_path):
    source, sink, prefix = f"in-{uuid.uuid4().hex[:8]}", f"out-{uuid.uuid4().hex[:8]}", f"eos-{uuid.uuid4().hex[:8]}"
    produced = produce(cluster.bootstrap, [source], ROWS)
    batches = copy_stream(remote, cluster, source, sink, tmp_path / "ckpt",
                          deliveryGuarantee="exactly-once", transactionalIdPrefix=prefix)
    committed = reader(remote, cluster, sink, **{"kafka.isolation.level": "read_committed"})
    assert pairs(committed) == sorted((key, value) for _, _, _, key, value in produced)
    assert ledger(remote, cluster, prefix) == [(b, state) for b in range(len(batches)) for state in ("deciding", "done")]


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_a_batch_write_and_read_over_connect(remote, cluster, guarantee):
    topic, prefix = f"batch-{uuid.uuid4().hex[:8]}", f"eos-{uuid.uuid4().hex[:8]}"
    rows = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(ROWS)]
    remote.createDataFrame(rows, "key binary, value binary").write.format("sparklog") \
        .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", topic) \
        .option("deliveryGuarantee", guarantee).option("transactionalIdPrefix", prefix).mode("append").save()
    assert pairs(reader(remote, cluster, topic, **{"kafka.isolation.level": "read_committed"})) == sorted(rows)
    if guarantee == "exactly-once":  # one job, one decision: the ledger's first batch
        assert ledger(remote, cluster, prefix) == [(0, "deciding"), (0, "done")]


def test_register_and_activate_work_on_a_connect_session_from_any_thread(remote, cluster):
    """`register(spark)` sends the class to the server (pickled by reference: the server's workers import
    sparklog); a write from a thread other than the session's works with or without `activate(spark)`, which
    does nothing there (the server runs each request with its session active), where a classic session's
    fails without it (test_datasource_user.py)."""
    from sparklog.datasource import activate, register

    topic = f"thread-{uuid.uuid4().hex[:8]}"
    register(remote)
    failures: list[BaseException] = []

    def write(use_activate: bool) -> None:
        try:
            if use_activate:
                activate(remote)
            remote.range(50).selectExpr("CAST(id AS STRING) AS value").write.format("sparklog") \
                .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", topic).mode("append").save()
        except BaseException as failure:  # noqa: BLE001 - reported by the test's thread
            failures.append(failure)

    for use_activate in (False, True):
        thread = threading.Thread(target=write, args=(use_activate,))
        thread.start()
        thread.join(QUERY_TIMEOUT_S)
        assert not thread.is_alive()
    assert failures == []
    values = reader(remote, cluster, topic).selectExpr("CAST(value AS STRING) AS v").collect()
    assert sorted(int(row.v) for row in values) == sorted(list(range(50)) * 2)
