"""Spark reading and writing sparklog, beside Spark reading the same records from Parquet and JSON lines.

    .venv/bin/python benchmarks/spark_source.py [--records 5000000] [--size 200] [--partitions 4]
                                                [--write-only] [--trials 3]

Starts a ZooKeeper and one broker, produces N records of `size` bytes with sparklog's Python producer
(timed: the baseline for writes), writes the same values as Parquet and JSON lines, then times in one
local[2] Spark session: `count()` (a first, untimed one also starts Spark's Python workers and plans the
DataFrame's input partitions, which Spark does once per DataFrame; then the median of `--trials`) and
`sum(length(value))` (median of `--trials`) over each of the three (sparklog also with a user-supplied
schema of `value` alone, and count() with one of `offset` alone: pyspark gives Python sources no column
pruning), and
`df.write.format("sparklog")` of the same DataFrame, after an untimed write of 1,000 rows that starts the
Python workers (`--write-only` skips the reads). The fixed cost of an action is the median of `--trials`
count()s of 1,000 records, from sparklog and from JSON lines. Prints rows/s and the ratios against the goals
(issue 12: read >= Spark's JSON-lines rate, write >= 80% of the Python producer's own rate).
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

from measure import load, one_broker_cluster  # noqa: E402


FIXED_COST_RECORDS = 1_000  # a read this small measures what an action costs whatever its size


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def produce(bootstrap: str, topic: str, records: int, size: int, partitions: int) -> float:
    from sparklog.client.producer import Producer

    payload = b"x" * size
    producer = Producer(bootstrap_servers=bootstrap, **{"linger.ms": 10, "batch.size": 262_144})
    start = time.perf_counter()
    send = producer.send
    for i in range(records):
        send(topic, payload, partition=i % partitions)
    producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    return elapsed


def wait_end_offsets(bootstrap: str, topic: str, partitions: int, records: int) -> None:
    from sparklog.client.consumer import Consumer

    consumer = Consumer(bootstrap_servers=bootstrap)
    tps = [(topic, p) for p in range(partitions)]
    while sum(consumer.end_offsets(tps).values()) < records:
        time.sleep(0.2)
    consumer.close()


def scan(df, trials: int):
    """(first count() s, median count() s, median sum(length(value)) s, count, total), the medians of
    `trials` of each action (a machine shared with other work makes any single time noisy).

    The first action on a Python data source also starts Spark's Python processes (the data source
    planner and the task workers), which import pyspark from Spark's `pyspark.zip` (no cached bytecode):
    a fixed cost per session, reported apart from the per-row rate.
    """
    from pyspark.sql import functions as F

    first_s, _ = timed(df.count)
    counts = [timed(df.count) for _ in range(trials)]
    sums = [timed(lambda: df.agg(F.sum(F.length("value"))).first()[0]) for _ in range(trials)]
    return (first_s, statistics.median(t for t, _ in counts), statistics.median(t for t, _ in sums),
            counts[-1][1], sums[-1][1])


def read_benchmarks(spark, cluster, work: Path, n: int, size: int, parts: int, trials: int) -> None:
    """count() and sum(length(value)) of Parquet, JSON lines and sparklog, and the fixed cost of an action."""
    from pyspark.sql import functions as F

    results = {}
    results["parquet"] = scan(spark.read.parquet(str(work / "parquet")), trials)
    results["json"] = scan(spark.read.schema("value string").json(str(work / "json")), trials)
    sparklog_df = (spark.read.format("sparklog").option("bootstrap.servers", cluster.bootstrap)
                   .option("subscribe", "bench").load())
    results["sparklog"] = scan(sparklog_df, trials)
    # pyspark gives Python sources no column pruning: a user-supplied schema selects columns
    # (source.py Rule 3). "value" serves both actions; "offset" is the narrowest for count().
    results["sparklog[value]"] = scan(spark.read.format("sparklog").schema("value binary")
                                      .option("bootstrap.servers", cluster.bootstrap)
                                      .option("subscribe", "bench").load(), trials)
    offset_df = (spark.read.format("sparklog").schema("offset bigint")
                 .option("bootstrap.servers", cluster.bootstrap).option("subscribe", "bench").load())
    offset_df.count()  # plans the read (a DataFrame's input partitions are planned once)
    offset_counts = [timed(offset_df.count) for _ in range(trials)]
    offset_count_s = statistics.median(t for t, _ in offset_counts)
    assert all(count == n for _, count in offset_counts), offset_counts
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
    for name, (first_s, count_s, sum_s, count, total) in results.items():
        assert count == n and total == n * size, (name, count, total)
        print(f"read {name:9s} first count(): {first_s:6.1f}s   count() (median of {trials}): {count_s:6.2f}s = "
              f"{n / count_s:>10,.0f} rows/s   sum(length(value)): {sum_s:6.2f}s = {n / sum_s:>10,.0f} rows/s")
    print(f"read sparklog[offset] count() (median of {trials}): {offset_count_s:6.2f}s = "
          f"{n / offset_count_s:>10,.0f} rows/s")
    print(f"read sparklog[offset] count() of {FIXED_COST_RECORDS // parts * parts:,} records (the fixed "
          f"cost of an action, median of {trials}): {fixed_s:.2f}s; JSON lines: {json_fixed_s:.2f}s "
          f"(ratio {json_fixed_s / fixed_s:.2f})")
    for name in ("sparklog", "sparklog[value]"):
        for column, label in ((1, "count"), (2, "sum")):
            ratio = results["json"][column] / results[name][column]
            print(f"{name} read / JSON-lines read ({label}): {ratio:.2f} (goal >= 1.0)")
    print(f"sparklog[offset] read / JSON-lines read (count): {results['json'][1] / offset_count_s:.2f} "
          "(goal >= 1.0)")



def main() -> None:
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
        produce_s = produce(cluster.bootstrap, "bench", n, size, parts)
        wait_end_offsets(cluster.bootstrap, "bench", parts, n)
        print(f"python producer: {n:,} records of {size} B in {produce_s:.1f}s = {n / produce_s:,.0f} rows/s")

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
            write_s, _ = write(to_write)
            print(f"write sparklog: {write_s:.1f}s = {n / write_s:,.0f} rows/s; "
                  f"/ python producer: {(n / write_s) / (n / produce_s):.2f} (goal >= 0.8)")
        finally:
            spark.stop()
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    main()
