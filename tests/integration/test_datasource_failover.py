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
KILL_AFTER_S = 0.5  # the jobs are planned and running (metadata and offsets asked) when the leader dies


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


def test_batch_read_and_write_finish_exactly_while_a_leader_is_sigkilled(spark, three, three_zk):
    source, sink = "failover-src", "failover-dst"
    for topic in (source, sink):
        _create(three_zk, topic)
    produced = produce(three.bootstrap, [source], READ_ROWS)
    states = wait_until(lambda: _full_isr(three_zk, source) and _full_isr(three_zk, sink), "full ISRs", 60)
    victim = states[0].leader

    def read():
        return (spark.read.format("sparklog").option("bootstrap.servers", three.bootstrap)
                .option("subscribe", source).load().select(*COLUMNS).collect())

    def write():
        activate(spark)  # a write from a thread other than the session's needs its active session
        rows = spark.range(WRITE_ROWS, numPartitions=2).select(F.col("id").cast("string").alias("value"))
        rows.write.mode("append").format("sparklog").option("bootstrap.servers", three.bootstrap) \
            .option("topic", sink).save()

    outcome: dict = {}
    jobs = [_in_thread(outcome, "read", read), _in_thread(outcome, "write", write)]
    try:
        threading.Event().wait(KILL_AFTER_S)
        three.brokers[victim].kill()
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
