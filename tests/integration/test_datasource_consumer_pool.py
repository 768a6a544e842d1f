"""The worker's consumer pool with real brokers: reads through one pool reuse one consumer and its connections,
and a parked consumer fetches nothing; in Spark (local[2]), a streaming query's later micro-batches read
through the consumers its Python workers already opened (one per worker, never reopened), with the same rows as with
the pool off."""

from __future__ import annotations

import time

import psutil
import pytest
from chispa import assert_df_equality

from sparklog.datasource.consumer_pool import ConsumerPool
from sparklog.datasource.fetcher import read_partition
from sparklog.datasource.offsets import SparklogInputPartition
from sparklog.datasource.options import parse_read_options
from support.spark import COLUMNS, expected_df, produce, start_query, stream

pytestmark = pytest.mark.slow

IDLE_S = 1.2  # longer than fetch.max.wait.ms (500): a fetch left waiting at the log's end would show
BATCH_DEADLINE_S = 90.0


def test_reads_through_a_pool_share_one_consumer_that_fetches_nothing_while_parked(sparklog_cluster, make_topic,
                                                                                  client_opens):
    topic = make_topic(partitions=1)
    produced = produce(sparklog_cluster.bootstrap, [topic], 3_000)
    connects, consumers = client_opens()
    options = parse_read_options({"bootstrap.servers": sparklog_cluster.bootstrap, "subscribe": topic}, False)
    pool = ConsumerPool()
    try:
        rows = []
        for start, end in ((0, 1_000), (1_000, 3_000), (500, 600)):  # the last one reads to the log's end
            batches = list(read_partition(options, SparklogInputPartition(topic, 0, start, end), pool))
            rows += [(r["offset"], r["value"]) for b in batches for r in b.to_pylist()]
            fetches = consumers[0]._fetcher.fetches
            time.sleep(IDLE_S)
            assert consumers[0]._fetcher.fetches == fetches, "a parked consumer fetched"
            assert consumers[0]._fetcher.in_flight_nodes == set(), "a fetch waits at the log's end"
        assert len(consumers) == 1 and pool.statistics().reused == 2
        assert len(connects) <= 2, connects  # a bootstrap broker (metadata), then the leader: once
        want = [(o, v) for _, _, o, _, v in produced]
        assert rows == want + want[500:600]
    finally:
        pool.close_all()
    assert not consumers[0]._thread.is_alive()


def broker_connections(cluster) -> set[tuple[int, int]]:
    """(pid, local port) of every TCP connection to a broker from a Spark Python worker of this test."""
    ports = {int(address.rsplit(":", 1)[1]) for address in cluster.bootstrap.split(",")}
    found = set()
    for process in psutil.Process().children(recursive=True):
        try:
            if "pyspark.daemon" not in " ".join(process.cmdline()):
                continue
            for conn in process.net_connections(kind="tcp"):
                if conn.raddr and conn.raddr.port in ports and conn.status == psutil.CONN_ESTABLISHED:
                    found.add((process.pid, conn.laddr.port))
        except psutil.NoSuchProcess:
            continue
    return found


def batches_with_rows(query, rows: int) -> None:
    deadline = time.monotonic() + BATCH_DEADLINE_S
    while sum(p["numInputRows"] for p in query.recentProgress) < rows:
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, f"the query read {query.recentProgress} by the deadline"
        time.sleep(0.2)


@pytest.mark.parametrize("cache", ["true", "false"])
def test_later_micro_batches_read_through_the_consumers_of_the_first(spark, sparklog_cluster, make_topic, tmp_path,
                                                                       cache):
    topic = make_topic(partitions=1)
    produced = produce(sparklog_cluster.bootstrap, [topic], 300, "a")
    df = stream(spark, sparklog_cluster, subscribe=topic, startingOffsets="earliest",
                **{"sparklog.consumer.cache.enabled": cache})
    earlier = broker_connections(sparklog_cluster)  # consumers other tests left idle in the workers
    query = start_query(df.writeStream.format("parquet").option("checkpointLocation", str(tmp_path / "ckpt"))
                        .trigger(processingTime="300 milliseconds"), str(tmp_path / "out"))
    seen = []
    try:
        batches_with_rows(query, 300)
        for tag in "bcd":
            seen.append(broker_connections(sparklog_cluster) - earlier)
            produced += produce(sparklog_cluster.bootstrap, [topic], 100, tag)
            batches_with_rows(query, len(produced))
        seen.append(broker_connections(sparklog_cluster) - earlier)
    finally:
        query.stop()
    if cache == "true":  # each worker's pooled consumer carries every later batch that worker runs
        assert seen[0], seen
        assert all(a <= b for a, b in zip(seen, seen[1:])), seen  # no pooled connection closes between batches
        workers = {pid for pid, _ in seen[-1]}
        # Spark hands a task to whichever idle Python worker it dequeues first, so a later batch may open the
        # second worker's consumer once (local[2]: two workers at most); a worker's connections never change after.
        assert len(workers) <= 2, seen
        for later in seen:
            for pid in {pid for pid, _ in later}:
                assert {c for c in later if c[0] == pid} == {c for c in seen[-1] if c[0] == pid}, seen
    else:  # every task closes its consumer: no connection outlives its batch
        assert not any(seen), seen
    got = spark.read.parquet(str(tmp_path / "out")).select(*COLUMNS)
    assert_df_equality(got, expected_df(spark, produced), ignore_row_order=True, ignore_nullable=True)
