"""What every job shares: topics created if missing, the job's own SparkSession, queries started past Spark's
connect-back timeout (`start_query`), and the `rich` console."""

from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager

DEFAULT_PARTITIONS = 4
LEADER_WAIT_S = 30.0


def ensure_topic(zookeeper: str, topic: str, partitions: int = DEFAULT_PARTITIONS, replication: int = 1,
                 config: dict | None = None, security: dict | None = None) -> bool:
    """Create `topic` unless it exists; wait until every partition has a leader (asking the brokers as a client
    with the `security` settings). True when created."""
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import TopicExists, create_topic

    zk = connect(zookeeper)
    try:
        try:
            create_topic(zk, topic, partitions, replication, config)
            created = True
        except TopicExists:
            created = False
        _wait_for_leaders(zookeeper, topic, security)
        return created
    finally:
        close(zk)


def _wait_for_leaders(zookeeper: str, topic: str, security: dict | None = None) -> None:
    """Until the brokers' metadata lists a leader for every partition (a fresh topic takes a moment)."""
    from sparklog.client.consumer import Consumer

    consumer = Consumer(zookeeper=zookeeper, **(security or {}))
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


def security_options(security: dict | None) -> dict[str, str]:
    """The data source's options of a client's security settings (librdkafka's names, `kafka.`-prefixed)."""
    return {f"kafka.{name}": str(value) for name, value in (security or {}).items()}


# What pyspark 4.3's PythonWorkerFactory.createSimpleWorker raises when the Python process it started has not
# connected back within a fixed 10 s (a literal in its bytecode, no setting). PythonStreamingSourceRunner starts
# a query's source process that way while the query initializes its sources, before any micro-batch; the process
# connects back before it imports anything but pyspark (sparklog is unpickled after the connection), so on a
# starved machine (load 10-16 on 2 cores, JVMs starting beside it) the error says nothing about the source.
WORKER_NOT_CONNECTED = "Python worker failed to connect back"
QUERY_STARTS = 3  # starts of a query that Spark's connect-back timeout ends while it initializes its sources
INITIALIZING = "Initializing sources"  # the query's status message until its sources are up
INITIALIZED_TIMEOUT_S = 120.0
INITIALIZED_POLL_S = 0.1


def start_query(writer, *path):
    """`writer.start(*path)`, returned once the query has initialized its sources (its source's Python process
    is up) or has ended. A query that Spark's connect-back timeout (WORKER_NOT_CONNECTED) ended before any
    micro-batch is started again on the same checkpoint, as a user restarts a query, QUERY_STARTS times at most;
    any other end is the caller's to see (`query.exception()`, `awaitTermination`)."""
    for _ in range(QUERY_STARTS):
        query = writer.start(*path)
        deadline = time.monotonic() + INITIALIZED_TIMEOUT_S
        while query.isActive and query.status["message"] == INITIALIZING:
            if time.monotonic() > deadline:
                query.stop()
                raise TimeoutError(f"the query did not initialize its sources in {INITIALIZED_TIMEOUT_S:.0f} s")
            time.sleep(INITIALIZED_POLL_S)
        failure = None if query.isActive else query.exception()
        if failure is None or WORKER_NOT_CONNECTED not in str(failure) or query.recentProgress:
            break
    return query


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
