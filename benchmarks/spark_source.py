"""Spark reading and writing sparklog, beside Spark reading the same records from Parquet and JSON lines.

    .venv/bin/python benchmarks/spark_source.py [--records 5000000] [--size 200] [--partitions 4]
                                                [--write-only] [--trials 3]

Starts a ZooKeeper and one broker, produces N records of `size` bytes with sparklog's Python producer
(timed: the baseline for writes), writes the same values as Parquet and JSON lines, then times in one
local[2] Spark session `count()` and `sum(length(value))` over each of the three (sparklog also with a
user-supplied schema of `value` alone, and with one of `offset` alone for count(): pyspark gives Python
sources no column pruning). Each DataFrame gets one untimed count() (planning, and Python workers
starting); then `--trials` rounds time one action of every DataFrame in turn (`Scans`), and each figure is
the median of the rounds, in wall seconds and in CPU seconds of the Spark session (its JVM and Python
workers; the broker serving sparklog's reads is not counted). Then `df.write.format("sparklog")` of the same
DataFrame, after an untimed write of 1,000 rows that starts the Python workers (`--write-only` skips the
reads), with the CPU seconds of the session and of the Python producer. The fixed cost of an action is the
median of `--trials` count()s of 1,000 records, from sparklog and from JSON lines. Prints rows/s and the
ratios against the goals (issue 12: read >= Spark's JSON-lines rate, write >= 80% of the Python producer's
own rate).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from measure import load, one_broker_cluster, run, shortfall, sparklog_produce, tree_cpu_seconds  # noqa: E402


FIXED_COST_RECORDS = 1_000  # a read this small measures what an action costs whatever its size
PRODUCE_DEADLINE_S = 1200.0  # the producer's sends and flush
END_OFFSETS_DEADLINE_S = 120.0  # after the flush: the acknowledged records' end offsets are there


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> tuple[float, float]:
    """(wall s, CPU s of this process: the caller's sends and the producer's I/O thread). Only acknowledged
    records count (measure.sparklog_produce); fewer than `records` is FAILED, and the script exits 1."""
    from sparklog.client.producer import Producer

    producer = Producer(bootstrap_servers=bootstrap, **{"linger.ms": 10, "batch.size": 262_144})
    cpu = time.process_time()
    done = sparklog_produce(producer, topic, records, b"x" * size, partitions=partitions,
                            deadline_s=PRODUCE_DEADLINE_S)
    cpu = time.process_time() - cpu
    producer.close()
    if done.acked != records:
        raise SystemExit(shortfall(f"python producer: FAILED {done.failed}, unacknowledged {done.unacknowledged} "
                                   f"of {records:,} (first error: {done.first_error}): every figure would be of "
                                   f"fewer records than the reads are asked for"))
    return done.seconds, cpu


def wait_end_offsets(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    """Wait until the partitions' end offsets add up to `records`, or fail at END_OFFSETS_DEADLINE_S."""
    from sparklog.client.consumer import Consumer

    consumer = Consumer(bootstrap_servers=bootstrap)
    tps = [(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + END_OFFSETS_DEADLINE_S
    try:
        while (total := sum(consumer.end_offsets(tps).values())) < records:
            if time.monotonic() > deadline:
                raise SystemExit(shortfall(f"SHORT: the end offsets add up to {total:,}, not {records:,}, "
                                           f"{END_OFFSETS_DEADLINE_S:g} s after the acknowledgements"))
            time.sleep(0.2)
    finally:
        consumer.close()


class Scans:
    """count() and sum(length(value)) of several DataFrames, timed in interleaved rounds.

    Each DataFrame gets one untimed count() first: it plans the read (once per DataFrame) and, for the
    first Python data source, starts Spark's Python processes (the planner and the task workers, which
    import pyspark from Spark's `pyspark.zip`): a fixed cost per session, reported apart. Then every round
    times one action of each DataFrame in turn, so the JVM's JIT compiling its hot paths during the first
    millions of rows, and the load of a shared machine drifting, weigh on all of them alike instead of on
    whichever is measured first; each figure is the median of `trials` rounds. Beside the wall time, the CPU
    seconds the Spark session spent (its JVM and the Python workers it forks, `tree_cpu_seconds`), which on
    a machine shared with other work moves less than wall time does.
    """

    def __init__(self, spark, trials: int) -> None:
        self.jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        self.trials = trials
        self.frames: dict[str, object] = {}
        self.first: dict[str, float] = {}
        self.times: dict[tuple[str, str], list[tuple[float, float, object]]] = {}

    def add(self, name: str, df) -> None:
        self.frames[name] = df
        self.first[name] = timed(df.count)[0]

    def action(self, name: str, kind: str):
        from pyspark.sql import functions as F

        df = self.frames[name]
        run = df.count if kind == "count" else (lambda: df.agg(F.sum(F.length("value"))).first()[0])
        cpu = tree_cpu_seconds(self.jvm_pid)
        wall, result = timed(run)
        self.times.setdefault((name, kind), []).append((wall, tree_cpu_seconds(self.jvm_pid) - cpu, result))

    def run(self, sums: tuple[str, ...]) -> None:
        for _ in range(self.trials):
            for name in self.frames:
                self.action(name, "count")
            for name in sums:
                self.action(name, "sum")

    def median(self, name: str, kind: str) -> tuple[float, float]:
        """(median wall s, median CPU s) of one action."""
        runs = self.times[(name, kind)]
        return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

    def results(self, name: str, kind: str) -> list:
        return [r[2] for r in self.times[(name, kind)]]


def read_benchmarks(spark, cluster, work: Path, n: int, size: int, parts: int, trials: int) -> None:
    """count() and sum(length(value)) of Parquet, JSON lines and sparklog, and the fixed cost of an action."""
    from pyspark.sql import functions as F

    def sparklog(schema: str | None = None):
        reader = spark.read.format("sparklog")
        if schema:
            reader = reader.schema(schema)
        return reader.option("bootstrap.servers", cluster.bootstrap).option("subscribe", "bench").load()

    scans = Scans(spark, trials)
    scans.add("parquet", spark.read.parquet(str(work / "parquet")))
    scans.add("json", spark.read.schema("value string").json(str(work / "json")))
    scans.add("sparklog", sparklog())
    # pyspark gives Python sources no column pruning: a user-supplied schema selects columns
    # (source.py Rule 3). "value" serves both actions; "offset" is the narrowest for count().
    scans.add("sparklog[value]", sparklog("value binary"))
    scans.add("sparklog[offset]", sparklog("offset bigint"))
    scans.run(sums=("parquet", "json", "sparklog", "sparklog[value]"))
    for name in scans.frames:
        assert all(count == n for count in scans.results(name, "count")), (name, scans.results(name, "count"))
    for name in ("parquet", "json", "sparklog", "sparklog[value]"):
        assert all(total == n * size for total in scans.results(name, "sum")), (name, scans.results(name, "sum"))
    # The cost of an action that does not grow with the rows: planning in a Python process
    # (options, offsets from the broker), a consumer per task: count() of FIXED_COST_RECORDS.
    ends = ",".join(f'"{p}":{FIXED_COST_RECORDS // parts}' for p in range(parts))
    small_df = (spark.read.format("sparklog").schema("offset bigint")
                .option("bootstrap.servers", cluster.bootstrap).option("subscribe", "bench")
                .option("endingOffsets", f'{{"bench":{{{ends}}}}}').load())
    fixed_s = statistics.median(timed(small_df.count)[0] for _ in range(trials))
    # Spark's own fixed cost, for comparison: count() of FIXED_COST_RECORDS JSON lines, same trials
    small_json = work / "json-small"
    spark.range(FIXED_COST_RECORDS).select(F.expr(f"repeat('x', {size})").alias("value")).repartition(parts) \
        .write.json(str(small_json))
    small_json_df = spark.read.schema("value string").json(str(small_json))
    json_fixed_s = statistics.median(timed(small_json_df.count)[0] for _ in range(trials))
    for name in scans.frames:
        count_s, count_cpu = scans.median(name, "count")
        line = (f"read {name:16s} first count(): {scans.first[name]:5.1f}s   count() (median of {trials}): "
                f"{count_s:5.2f}s = {n / count_s:>10,.0f} rows/s, CPU {count_cpu:5.2f}s")
        if (name, "sum") in scans.times:
            sum_s, sum_cpu = scans.median(name, "sum")
            line += f"   sum(length(value)): {sum_s:5.2f}s = {n / sum_s:>10,.0f} rows/s, CPU {sum_cpu:5.2f}s"
        print(line)
    print(f"read sparklog[offset] count() of {FIXED_COST_RECORDS // parts * parts:,} records (the fixed "
          f"cost of an action, median of {trials}): {fixed_s:.2f}s; JSON lines: {json_fixed_s:.2f}s "
          f"(ratio {json_fixed_s / fixed_s:.2f})")
    for name in ("sparklog", "sparklog[value]", "sparklog[offset]"):
        for kind in ("count", "sum"):
            if (name, kind) in scans.times:
                (json_s, json_cpu), (own_s, own_cpu) = scans.median("json", kind), scans.median(name, kind)
                print(f"{name} read / JSON-lines read ({kind}): {json_s / own_s:.2f} (goal >= 1.0); "
                      f"by CPU seconds: {json_cpu / own_cpu:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--write-only", action="store_true", help="time the producer and the write alone")
    parser.add_argument("--trials", type=int, default=3, help="trials of each timed read action (the median is "
                        "reported)")
    args = parser.parse_args()
    n, size, parts = args.records, args.size, args.partitions

    from support.spark import new_session

    print(f"load average at the start: {load()}")
    with one_broker_cluster(("bench", "bench-out"), parts) as (cluster, work):
        produce_s, produce_cpu = produce(cluster.bootstrap, "bench", n, size, parts)
        wait_end_offsets(cluster.bootstrap, "bench", parts, n)
        print(f"python producer: {n:,} records of {size} B in {produce_s:.1f}s = {n / produce_s:,.0f} rows/s, "
              f"CPU {produce_cpu:.1f}s")

        spark = new_session(conf={"spark.driver.memory": "3g"})
        try:
            from pyspark.sql import functions as F

            values = spark.range(n).select(F.expr(f"repeat('x', {size})").alias("value"))
            values.repartition(parts).write.parquet(str(work / "parquet"))
            if not args.write_only:
                values.repartition(parts).write.json(str(work / "json"))
                read_benchmarks(spark, cluster, work, n, size, parts, args.trials)

            def write(df):
                return timed(lambda: df.write.mode("append").format("sparklog")
                             .option("bootstrap.servers", cluster.bootstrap).option("topic", "bench-out")
                             .option("sparklog.linger.ms", "10").option("sparklog.batch.size", "262144").save())

            to_write = spark.read.parquet(str(work / "parquet")).select(F.col("value").cast("binary"))
            write(to_write.limit(FIXED_COST_RECORDS))  # untimed: starts the Python workers (--write-only)
            jvm_pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
            cpu = tree_cpu_seconds(jvm_pid)
            write_s, _ = write(to_write)
            write_cpu = tree_cpu_seconds(jvm_pid) - cpu
            print(f"write sparklog: {write_s:.1f}s = {n / write_s:,.0f} rows/s, CPU {write_cpu:.1f}s (Spark session); "
                  f"/ python producer: {(n / write_s) / (n / produce_s):.2f} (goal >= 0.8)")
        finally:
            spark.stop()
    print(f"load average at the end: {load()}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    sys.exit(run(main))
