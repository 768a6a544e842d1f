"""What a small Spark action and a streaming micro-batch cost on sparklog, with the worker's consumer pool off
and on, beside Spark's own JSON-lines reader: the fixed cost of an action (issue 12).

    .venv/bin/python benchmarks/spark_fixed_cost.py [--trials 15] [--batches 12] [--trigger-ms 1000]

Starts a ZooKeeper and one broker, and one local[2] Spark session; then, in that session:
- count() of 1,000 records (schema `offset bigint`) from one partition and from four (250 each), with the
  pool off (`sparklog.consumer.cache.enabled=false`: every task opens and closes its consumer) and on, the
  two interleaved; beside count() of 1,000 JSON lines in one file and in four, and of the floor of any
  Python data source: one that yields its rows from memory as one Arrow batch per partition, without I/O. Each DataFrame's first action
  is untimed (it plans the read and starts the Python workers); the medians of `--trials` are printed.
- streaming queries (4 partitions, `trigger(processingTime=...)`, the noop sink) while a producer thread
  adds 100 records every 100 ms (acknowledged ones counted): an untimed warm-up query (the first query of a
  session is slower, whatever it reads), then pool off, on, off, on: the median over batches 3.. with rows
  of each pair's `durationMs` triggerExecution and addBatch (the tasks run in addBatch).
Run from an older tree, the pool options are ignored (unknown `sparklog.` options are): both rows are that
tree's fresh-consumer reads. Every loop has a deadline; everything started is stopped.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from measure import load, one_broker_cluster, run, shortfall  # noqa: E402

SMALL = 1_000  # records of the small count()
PARTITIONS = 4
STREAM_RECORDS_PER_TICK = 100
STREAM_TICK_S = 0.1
BATCH_DEADLINE_S = 120.0  # a streaming run that does not reach its batches by then fails


def produce(bootstrap: str, topic: str, per_partition: int) -> None:
    from sparklog.client.producer import Producer

    producer = Producer(bootstrap_servers=bootstrap, **{"linger.ms": 5})
    futures = [producer.send(topic, b"x" * 200, partition=p) for p in range(PARTITIONS) for _ in range(per_partition)]
    producer.flush()
    producer.close()
    for future in futures:
        future.get(30)  # acknowledged, or raises


def wait_latest(bootstrap: str, topic: str, per_partition: int) -> None:
    from sparklog.client.consumer import Consumer

    consumer = Consumer(bootstrap_servers=bootstrap)
    deadline = time.monotonic() + 60
    try:
        tps = [(topic, p) for p in range(PARTITIONS)]
        while min(consumer.end_offsets(tps).values()) < per_partition:
            if time.monotonic() > deadline:
                raise TimeoutError("records not visible after 60 s")
            time.sleep(0.1)
    finally:
        consumer.close()


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def small_counts(spark, bootstrap: str, work: Path, trials: int) -> None:
    from pyspark.sql import functions as F

    frames = {}
    for parts in (1, PARTITIONS):
        ends = ",".join(f'"{p}":{SMALL // parts if p < parts else 0}' for p in range(PARTITIONS))
        for cache in ("false", "true"):
            frames[(parts, cache)] = (spark.read.format("sparklog").schema("offset bigint")
                                      .option("bootstrap.servers", bootstrap).option("subscribe", "small")
                                      .option("endingOffsets", f'{{"small":{{{ends}}}}}')
                                      .option("sparklog.consumer.cache.enabled", cache).load())
        frames[(parts, "floor")] = spark.read.format("sparklog_floor").option("partitions", parts).load()
        path = work / f"json-{parts}"
        spark.range(SMALL).select(F.expr("repeat('x', 200)").alias("value")).repartition(parts).write.json(str(path))
        frames[(parts, "json")] = spark.read.schema("value string").json(str(path))
    times: dict = {key: [] for key in frames}
    for key, df in frames.items():
        assert df.count() == SMALL, key  # untimed: plans the read, starts the workers
    for _ in range(trials):
        for key, df in frames.items():
            times[key].append(timed(df.count))
    for parts in (1, PARTITIONS):
        off, on, json, floor = (statistics.median(times[(parts, k)]) for k in ("false", "true", "json", "floor"))
        print(f"count() of {SMALL:,} records from {parts} partition(s), median of {trials}: pool off {off:.3f}s, "
              f"pool on {on:.3f}s, JSON lines {json:.3f}s, in-memory Python source {floor:.3f}s; off/on "
              f"{off / on:.2f}, JSON/on {json / on:.2f}, JSON/off {json / off:.2f}, in-memory/on {floor / on:.2f}")


def floor_source():
    """A Python data source with no I/O: what any Python source's action costs in pyspark (defined in a
    function, so cloudpickle ships the classes to the workers by value)."""
    import pyarrow as pa
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    class FloorReader(DataSourceReader):
        def __init__(self, partitions: int) -> None:
            self.partitions_ = partitions

        def partitions(self):
            return [InputPartition(i) for i in range(self.partitions_)]

        def read(self, partition):
            yield pa.RecordBatch.from_pydict({"offset": pa.array(range(SMALL // self.partitions_), pa.int64())})

    class Floor(DataSource):
        @classmethod
        def name(cls) -> str:
            return "sparklog_floor"

        def schema(self) -> str:
            return "offset bigint"

        def reader(self, schema):
            return FloorReader(int(self.options.get("partitions", 1)))

    return Floor


class Feeder:
    """A thread producing STREAM_RECORDS_PER_TICK records every STREAM_TICK_S over the partitions; counts acks."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        from sparklog.client.producer import Producer

        self.producer = Producer(bootstrap_servers=bootstrap, **{"linger.ms": 5})
        self.topic, self.acked, self.failed = topic, 0, 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        sent = 0
        while not self.stopping.wait(STREAM_TICK_S):
            futures = [self.producer.send(self.topic, b"y" * 200, partition=(sent + i) % PARTITIONS)
                       for i in range(STREAM_RECORDS_PER_TICK)]
            sent += STREAM_RECORDS_PER_TICK
            self.producer.flush()
            for future in futures:
                try:
                    future.get(30)
                    self.acked += 1
                except Exception:
                    self.failed += 1

    def __enter__(self) -> "Feeder":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(60)
        self.producer.close()


def stream(spark, bootstrap: str, work: Path, cache: str, batches: int, trigger_ms: int) -> list[dict]:
    """The progress of batches 3..`batches` (those with rows) of one query reading from the latest offsets."""
    df = (spark.readStream.format("sparklog").option("bootstrap.servers", bootstrap).option("subscribe", "stream")
          .option("startingOffsets", "latest").option("sparklog.consumer.cache.enabled", cache).load())
    query = (df.writeStream.format("noop").trigger(processingTime=f"{trigger_ms} milliseconds")
             .option("checkpointLocation", str(work / "checkpoint")).start())
    try:
        deadline = time.monotonic() + BATCH_DEADLINE_S
        while len([p for p in query.recentProgress if p["numInputRows"]]) < batches:
            if time.monotonic() > deadline or query.exception() is not None:
                raise RuntimeError(f"the query did not reach {batches} batches: {query.exception()}")
            time.sleep(0.2)
        return [p for p in query.recentProgress if p["numInputRows"]][2:batches]
    finally:
        query.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=15)
    parser.add_argument("--batches", type=int, default=12)
    parser.add_argument("--trigger-ms", type=int, default=1000)
    args = parser.parse_args()
    from support.spark import new_session

    print(f"tree: {REPO}; load average at the start: {load()}")
    with one_broker_cluster(("small", "stream"), PARTITIONS) as (cluster, work):
        produce(cluster.bootstrap, "small", SMALL)
        wait_latest(cluster.bootstrap, "small", SMALL)
        spark = new_session(conf={"spark.sql.shuffle.partitions": "2"})
        try:
            spark.dataSource.register(floor_source())
            small_counts(spark, cluster.bootstrap, work, args.trials)
            with Feeder(cluster.bootstrap, "stream") as feeder:
                stream(spark, cluster.bootstrap, work / "warm-up", "true", 4, args.trigger_ms)
                runs: dict = {"false": [], "true": []}
                for cache in ("false", "true", "false", "true"):
                    runs[cache] += stream(spark, cluster.bootstrap, work / f"{cache}-{len(runs[cache])}", cache,
                                          args.batches, args.trigger_ms)
                for cache, progress in runs.items():
                    trigger = statistics.median(p["durationMs"]["triggerExecution"] for p in progress)
                    add = statistics.median(p["durationMs"]["addBatch"] for p in progress)
                    print(f"micro-batch, pool {'on' if cache == 'true' else 'off'}: median of {len(progress)} batches "
                          f"(two queries): triggerExecution {trigger:.0f} ms, addBatch {add:.0f} ms")
            print(f"feeder: {feeder.acked:,} records acknowledged, {feeder.failed} failed"
                  + (shortfall(f"; FAILED: the feeder's {feeder.failed} sends") if feeder.failed else ""))
        finally:
            spark.stop()
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(run(main))
