"""The Spark source and sink fail over with no application error (issue 9, "Clients"): a batch read and a
batch write run while a partition leader is SIGKILLed; the controller elects from the ISR, sparklog's
consumer and producer refresh metadata and retry, and both jobs finish with exactly the expected rows (the
write every row once: the sink's producer is idempotent, so its retries leave no copy).

One three-broker cluster for the module, RF 3; the killed broker is restarted and rejoins every ISR."""

from __future__ import annotations

import threading

import pytest
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from sparklog.datasource import activate
from support.cluster import wait_until
from support.spark import COLUMNS, expected_df, produce

pytestmark = pytest.mark.slow

SESSION_TIMEOUT_MS = 3000  # the killed leader's partitions move after this
LAG_MS = 1500  # replica.lag.time.max.ms
PARTITIONS = 3
READ_ROWS = 3000
WRITE_ROWS = 5000
JOB_TIMEOUT_S = 60


def _create(zk, name):
    from sparklog.coordination import topics

    topics.create_topic(zk, name, PARTITIONS, 3, {"min.insync.replicas": "2"}, live_broker_ids=[1, 2, 3])


def _full_isr(zk, topic):
    from sparklog.coordination import topics

    states = topics.get_topic(zk, topic).states
    return states if len(states) == PARTITIONS and all(len(s.isr) == 3 and s.leader > 0
                                                       for s in states.values()) else None


def _in_thread(outcome: dict, name: str, job) -> threading.Thread:
    def run():
        try:
            outcome[name] = job()
        except BaseException as exc:  # noqa: BLE001 - the test asserts on it
            outcome[name] = exc
    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _running_group(spark, group: str) -> bool:
    """Whether a Spark job of job group `group` is running now."""
    tracker = spark.sparkContext.statusTracker()
    return any((info := tracker.getJobInfo(job)) is not None and info.status == "RUNNING"
               for job in tracker.getJobIdsForGroup(group))


def test_batch_read_and_write_finish_exactly_while_a_leader_is_sigkilled(spark, three, zookeeper, three_zk):
    """The fault overlaps what it means to hit: the victim leads a partition of both topics, its negotiated
    session is SESSION_TIMEOUT_MS, and it dies once a Spark job runs, before the read or the write ends."""
    from sparklog.coordination import topics
    from support.zookeeper import failover_session_s

    source, sink = "failover-src", "failover-dst"
    for topic in (source, sink):
        _create(three_zk, topic)
    produced = produce(three.bootstrap, [source], READ_ROWS)
    states = wait_until(lambda: _full_isr(three_zk, source) and _full_isr(three_zk, sink), "full ISRs", 60)
    victim = states[0].leader
    assert victim in {s.leader for s in topics.get_topic(three_zk, sink).states.values()}, "the victim leads no sink partition"
    session_s = failover_session_s(zookeeper, three_zk, victim, SESSION_TIMEOUT_MS)

    def read():
        spark.sparkContext.setJobGroup("failover-read", "the read under a leader's SIGKILL")
        return (spark.read.format("sparklog").option("bootstrap.servers", three.bootstrap)
                .option("subscribe", source).load().select(*COLUMNS).collect())

    def write():
        activate(spark)  # a write from a thread other than the session's needs its active session
        spark.sparkContext.setJobGroup("failover-write", "the write under a leader's SIGKILL")
        rows = spark.range(WRITE_ROWS, numPartitions=2).select(F.col("id").cast("string").alias("value"))
        rows.write.mode("append").format("sparklog").option("bootstrap.servers", three.bootstrap) \
            .option("topic", sink).save()

    outcome: dict = {}
    jobs = [_in_thread(outcome, "read", read), _in_thread(outcome, "write", write)]
    try:
        # The SIGKILL lands once the first Spark job runs (not while both are still being planned), and neither
        # the read nor the write has ended by then (a job done before the fault proves nothing about failover).
        wait_until(lambda: any(_running_group(spark, g) for g in ("failover-read", "failover-write")),
                   "a running Spark job of the read or of the write", JOB_TIMEOUT_S)
        three.brokers[victim].kill()
        ended = [job.name for job in jobs if not job.is_alive()]
        assert ended == [], f"ended before the SIGKILL: {ended}"
        wait_until(lambda: all(s.leader not in (victim, -1) for t in (source, sink)
                               for s in topics.get_topic(three_zk, t).states.values()),
                   "the victim's leaderships moved", session_s + JOB_TIMEOUT_S)
        for job in jobs:
            job.join(JOB_TIMEOUT_S)
        assert not any(job.is_alive() for job in jobs), "a Spark job did not finish"
        for name in ("read", "write"):
            assert not isinstance(outcome[name], BaseException), f"{name}: {str(outcome[name])[:4000]}"
        assertDataFrameEqual(spark.createDataFrame(outcome["read"], expected_df(spark, []).schema),
                             expected_df(spark, produced))
        written = (spark.read.format("sparklog").option("bootstrap.servers", three.bootstrap)
                   .option("subscribe", sink).load().select(F.col("value").cast("string").alias("value")))
        assertDataFrameEqual(written, spark.range(WRITE_ROWS).select(F.col("id").cast("string").alias("value")))
    finally:
        if not three.brokers[victim].running:
            three.brokers[victim].start()
        wait_until(lambda: _full_isr(three_zk, source) and _full_isr(three_zk, sink), "the victim back in every ISR",
                   60)
