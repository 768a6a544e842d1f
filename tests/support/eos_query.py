"""Streaming queries sparklog -> sparklog run in one driver process of their own, for the exactly-once sink's
kill tests (test_datasource_exactly_once.py, scripts/eos_kill_run.py): each `--query input,output,guarantee,
prefix` reads `input` from the start in micro-batches of `--per-trigger` records (availableNow) and writes key
and value to `output`, at-least-once or exactly-once; several queries share the process (one kill, one restart).

Their sink is sparklog's, wrapped so that the commit of micro-batch `EOS_PAUSE_BATCH` of a query stops, for the
killer, where `EOS_PAUSE` ("output:stop,...", environment, read where Spark runs the commit) says for its output
topic: "before" the driver decides, "deciding" (the decision recorded, no EndTxn sent yet), or "after" the
commit (before Spark's commit log records the batch); absent, it never stops. At the stop it creates the file
`paused-<output>` in `EOS_MARKERS` and sleeps until killed. Exit status 0 once every query has read everything.
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


def _pause_here(output: str, point: str, batch_id: int) -> None:
    stops = dict(item.split(":") for item in os.environ.get("EOS_PAUSE", "").split(",") if item)
    if stops.get(output) == point and str(batch_id) == os.environ.get("EOS_PAUSE_BATCH"):
        (Path(os.environ["EOS_MARKERS"]) / f"paused-{output}").touch()
        time.sleep(PAUSE_S)


class PausingWriter(DataSourceStreamArrowWriter):
    def __init__(self, inner) -> None:
        self.inner = inner

    def write(self, iterator):
        return self.inner.write(iterator)

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
    args = parser.parse_args(argv)
    from support.spark import new_session

    spark = new_session(app_name="eos-query")
    spark.dataSource.register(PausingSparklog)
    queries = [_start(spark, args, *spec.split(",")) for spec in args.query]
    failures = []
    for query in queries:
        query.awaitTermination()
        if query.exception() is not None:
            failures.append(str(query.exception()))
    print("\n".join(failures), file=sys.stderr)
    return 1 if failures else 0


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
