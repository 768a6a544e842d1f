"""Streaming queries sparklog -> sparklog run in one driver process of their own, for the exactly-once sink's
kill tests (test_datasource_exactly_once.py, scripts/eos_kill_run.py): each `--query input,output,guarantee,
prefix` reads `input` from the start in micro-batches of `--per-trigger` records (availableNow) and writes key
and value to `output`, at-least-once or exactly-once; several queries share the process (one kill, one restart).

Their sink is sparklog's, wrapped so that the commit of micro-batch `EOS_PAUSE_BATCH` of a query stops, for the
killer, where `EOS_PAUSE` ("output:stop,...", environment, read where Spark runs the commit) says for its output
topic: "before" the driver decides, "deciding" (the decision recorded, no EndTxn sent yet), or "after" the
commit (before Spark's commit log records the batch); absent, it never stops. At the stop it creates the file
`paused-<output>` in `EOS_MARKERS` and sleeps until killed. Exit status 0 once every query has read everything.

The stop "written" is a task's, on an executor (`--master local-cluster[2,1,1024]`: executor JVMs of their own):
the first task of the query whose rows are all written (acknowledged, or its transaction prepared), before
Spark hears of it, writes its Python worker's pid into `paused-<output>` and sleeps until its executor is
killed (support/eos_kill.py `run_with_executor_kills`); its retry and every other task pass. `EOS_PAUSE_BATCH`
does not apply (a task knows no batch id): it is the query's first written task.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from pyspark.sql.datasource import DataSourceStreamArrowWriter

from sparklog.datasource import exactly_once
from sparklog.datasource.source import SparklogDataSource

PAUSE_S = 600
EXECUTORS_TIMEOUT_S = 180  # executor JVMs start beside the driver: seconds quiet, a minute at load 16


def _pause_here(output: str, point: str, batch_id: int) -> None:
    stops = dict(item.split(":") for item in os.environ.get("EOS_PAUSE", "").split(",") if item)
    if stops.get(output) == point and str(batch_id) == os.environ.get("EOS_PAUSE_BATCH"):
        (Path(os.environ["EOS_MARKERS"]) / f"paused-{output}").touch()
        time.sleep(PAUSE_S)


def _pause_once_written(output: str) -> None:
    """The "written" stop: the pid goes into a file of its own, then is renamed to `paused-<output>`, so the
    killer never reads a half-written pid; a file already there means the stop was taken."""
    stops = dict(item.split(":") for item in os.environ.get("EOS_PAUSE", "").split(",") if item)
    if stops.get(output) != "written":
        return
    markers = Path(os.environ["EOS_MARKERS"])
    try:
        fd = os.open(markers / f"taken-{output}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.link(markers / f"taken-{output}", markers / f"paused-{output}")
    time.sleep(PAUSE_S)


class PausingWriter(DataSourceStreamArrowWriter):
    def __init__(self, inner) -> None:
        self.inner = inner

    def write(self, iterator):
        message = self.inner.write(iterator)
        _pause_once_written(self.inner.options.topic)
        return message

    def commit(self, messages, batchId):
        output = self.inner.options.topic
        _pause_here(output, "before", batchId)
        original = exactly_once.end_all

        def end_all(options, transactions, commit):
            if commit:
                _pause_here(output, "deciding", batchId)
            return original(options, transactions, commit)

        exactly_once.end_all = end_all
        try:
            self.inner.commit(messages, batchId)
        finally:
            exactly_once.end_all = original
        _pause_here(output, "after", batchId)

    def abort(self, messages, batchId):
        self.inner.abort(messages, batchId)


class PausingSparklog(SparklogDataSource):
    @classmethod
    def name(cls) -> str:
        return "sparklog_pausing"

    def streamWriter(self, schema, overwrite):
        return PausingWriter(super().streamWriter(schema, overwrite))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--checkpoints", required=True)
    parser.add_argument("--query", action="append", required=True, help="input,output,guarantee,prefix")
    parser.add_argument("--per-trigger", type=int, default=100)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--one-at-a-time", action="store_true",
                        help="start each query once the one before ended (on a starved machine a query's source "
                        "process started beside another query's tasks misses Spark's 10 s to connect back)")
    args = parser.parse_args(argv)
    spark = _session(args.master)
    spark.dataSource.register(PausingSparklog)
    if args.one_at_a_time:
        failures = [_failure(_start(spark, args, *spec.split(","))) for spec in args.query]
    else:
        failures = [_failure(q) for q in [_start(spark, args, *spec.split(",")) for spec in args.query]]
    failures = [f for f in failures if f]
    print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


def _failure(query) -> str:
    """Wait for the query's end; its failure, or "" when it completed."""
    query.awaitTermination()
    return "" if query.exception() is None else str(query.exception())


def _session(master: str):
    """A session on `master`; on local-cluster, once its executors registered (support/spark.py: a query's
    source process must connect back within Spark's fixed 10 s, so it is not started beside executor JVMs)."""
    from support.cluster import wait_until
    from support.spark import executors, new_session

    spark = new_session(master, "eos-query", {"spark.executor.memory": "512m"} if "cluster" in master else None)
    if master.startswith("local-cluster["):
        wanted = int(master[len("local-cluster["):].split(",")[0])
        wait_until(lambda: executors(spark) == wanted, f"{wanted} executors registered", EXECUTORS_TIMEOUT_S)
    return spark


def _start(spark, args, input_topic: str, output: str, guarantee: str, prefix: str):
    from jobs.common import start_query

    source = (spark.readStream.format("sparklog").option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", input_topic).option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", str(args.per_trigger)).load())
    writer = (source.select("key", "value").writeStream.format("sparklog_pausing")
              .option("kafka.bootstrap.servers", args.bootstrap).option("topic", output)
              .option("checkpointLocation", str(Path(args.checkpoints) / output)).trigger(availableNow=True))
    if guarantee == "exactly-once":
        writer = (writer.option("deliveryGuarantee", "exactly-once").option("transactionalIdPrefix", prefix)
                  .option("kafka.transaction.timeout.ms", "60000"))
    return start_query(writer)


if __name__ == "__main__":
    sys.exit(main())
