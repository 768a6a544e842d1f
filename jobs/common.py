"""What every job shares: topics created if missing, the job's own SparkSession, and the `rich` console."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

DEFAULT_PARTITIONS = 4
LEADER_WAIT_S = 30.0


def ensure_topic(zookeeper: str, topic: str, partitions: int = DEFAULT_PARTITIONS, replication: int = 1,
                 config: dict | None = None) -> bool:
    """Create `topic` unless it exists; wait until every partition has a leader. True when created."""
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import TopicExists, create_topic

    zk = connect(zookeeper)
    try:
        try:
            create_topic(zk, topic, partitions, replication, config)
            created = True
        except TopicExists:
            created = False
        _wait_for_leaders(zookeeper, topic)
        return created
    finally:
        close(zk)


def _wait_for_leaders(zookeeper: str, topic: str) -> None:
    """Until the brokers' metadata lists a leader for every partition (a fresh topic takes a moment)."""
    from sparklog.client.consumer import Consumer

    consumer = Consumer(zookeeper=zookeeper)
    try:
        deadline = time.monotonic() + LEADER_WAIT_S
        while True:
            try:
                consumer.end_offsets([(topic, p) for p in consumer.partitions_for_topic(topic, timeout=5)], timeout=5)
                return
            except Exception:  # noqa: BLE001 - not led yet: retry until the deadline
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()


def run_to_completion(query, what: str, timeout_s: float) -> list[dict]:
    """Wait for an AvailableNow query, stop it if it outlives `timeout_s`, raise its failure; its progress."""
    try:
        query.awaitTermination(timeout_s)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"{what} failed: {query.exception()}")
    return query.recentProgress


def spark_session(app_name: str, master: str = "local[2]", conf: dict | None = None):
    """A SparkSession for a job run as a script (an existing active session is reused when called inside
    one, as in the notebook and the tests)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4").config("spark.sql.session.timeZone", "UTC"))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def job_session(app_name: str, conf: dict | None = None):
    """`spark_session()` for a job's `main`: stopped at the end only if this call started it."""
    from pyspark.sql import SparkSession

    existing = SparkSession.getActiveSession()
    spark = spark_session(app_name, conf=conf)
    try:
        yield spark
    finally:
        if existing is None:
            spark.stop()
