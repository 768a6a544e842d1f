"""One Spark input partition read outside Spark: `read()`'s fetch, decode and Arrow build, timed and profiled.

    .venv/bin/python benchmarks/spark_read_profile.py [--records 500000] [--size 200] [--trials 1] [--profile]
    .venv/bin/python benchmarks/spark_read_profile.py --small 1000 [--trials 30]

Starts a ZooKeeper and one broker, produces N records of `size` bytes into one partition, then reads
`[0, N)` with the data source's `read_partition` (what a Spark task runs in its Python worker), once with the
compiled record codec and once with the pure-Python one, and a baseline in the same run: the same read
with the earlier decoding (`columns()` into Python lists, then `pa.array`; compiled codec); prints rows/s of
each (the medians of `--trials` interleaved reads) with the CPU seconds the reading process spent (its reading
thread and the consumer's I/O thread: steadier than wall time on a shared machine), the ratios, and, with
--profile, the cProfile functions that take the most time (cumulative) of the compiled read.

`--small N` measures instead what a task's read costs whatever its size: the median of `--trials` reads of
`[0, N)` with a consumer opened and closed per read (a task outside the pool) and through one
`ConsumerPool` (a task of a reused Python worker), interleaved, and where the fresh consumer's time goes:
open (the constructor, which starts the I/O thread; it connects lazily), the first chunk (connect,
ApiVersions, Metadata, Fetch), close.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from measure import one_broker_cluster  # noqa: E402

TOP_FUNCTIONS = 18  # lines of the profile printed


def produce(bootstrap: str, topic: str, records: int, size: int) -> None:
    from sparklog.client.producer import Producer

    producer = Producer(bootstrap_servers=bootstrap, **{"linger.ms": 10, "batch.size": 262_144})
    payload = b"x" * size
    for i in range(records):
        producer.send(topic, payload, key=b"k%d" % i, partition=0)
    producer.flush()
    producer.close()


def fetch_into_lists(builder, consumer, position: int, end: int, on_gap=None) -> int:
    """The baseline: fetcher._fetch_into as it was, each batch decoded into lists (`columns()`)."""
    from sparklog.records.batch import batches_in_range

    chunk = consumer.next_chunk(0.5)
    if chunk is None:
        return position
    for batch, columns in batches_in_range(chunk[2], position, end, consumer.config["check.crcs"]):
        if columns is not None and columns.offsets:
            builder.append(*columns, batch.timestamp_type)
        position = min(max(position, batch.next_offset), end)
    return position


def read_all(bootstrap: str, topic: str, records: int) -> int:
    from sparklog.datasource.fetcher import read_partition
    from sparklog.datasource.offsets import SparklogInputPartition
    from sparklog.datasource.options import parse_read_options

    options = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False)
    rows = 0
    for batch in read_partition(options, SparklogInputPartition(topic, 0, 0, records, bootstrap)):
        rows += batch.num_rows
    return rows


def timed_read(bootstrap: str, topic: str, records: int, codec_name: str, profile: bool,
               baseline: bool = False) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process: the reading thread and the consumer's I/O thread)."""
    from sparklog.datasource import fetcher
    from support.codecs import switched

    current = fetcher._fetch_into
    fetcher._fetch_into = fetch_into_lists if baseline else current
    with switched(codec_name):
        profiler = cProfile.Profile() if profile else None
        start, cpu = time.perf_counter(), time.process_time()
        if profiler:
            profiler.enable()
        rows = read_all(bootstrap, topic, records)
        if profiler:
            profiler.disable()
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    fetcher._fetch_into = current
    assert rows == records, (rows, records)
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(TOP_FUNCTIONS)
    return elapsed, cpu


def small_reads(bootstrap: str, topic: str, records: int, trials: int) -> None:
    """Rows/s do not matter here: the fixed cost of one read, fresh consumer vs pooled (see the docstring)."""
    from sparklog.client.consumer import Consumer
    from sparklog.datasource.consumer_pool import ConsumerPool
    from sparklog.datasource.fetcher import read_partition
    from sparklog.datasource.offsets import SparklogInputPartition
    from sparklog.datasource.options import parse_read_options

    options = parse_read_options({"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, streaming=False)
    part, pool = SparklogInputPartition(topic, 0, 0, records, bootstrap), ConsumerPool()

    def read(with_pool) -> float:
        start = time.perf_counter()
        assert sum(b.num_rows for b in read_partition(options, part, with_pool)) == records
        return time.perf_counter() - start

    times: dict[str, list] = {"fresh consumer": [], "pooled consumer": []}
    read(None), read(pool)  # warm-up: imports, page cache, the pool's consumer
    for _ in range(trials):
        times["fresh consumer"].append(read(None))
        times["pooled consumer"].append(read(pool))
    pool.close_all()
    steps: dict[str, list] = {"open": [], "first chunk": [], "close": []}
    for _ in range(trials):
        start = time.perf_counter()
        consumer = Consumer(bootstrap_servers=bootstrap, **{"auto.offset.reset": "none"})
        consumer.assign([(topic, 0)])
        consumer.seek((topic, 0), 0)
        opened = time.perf_counter()
        assert consumer.next_chunk(10) is not None
        fetched = time.perf_counter()
        consumer.close()
        for name, seconds in zip(steps, (opened - start, fetched - opened, time.perf_counter() - fetched)):
            steps[name].append(seconds)
    medians = {name: statistics.median(runs) * 1000 for name, runs in {**times, **steps}.items()}
    print(f"read_partition of {records:,} records, median of {trials}: fresh consumer {medians['fresh consumer']:.2f} ms, "
          f"pooled consumer {medians['pooled consumer']:.2f} ms (fresh / pooled "
          f"{medians['fresh consumer'] / medians['pooled consumer']:.2f}); a fresh consumer's open "
          f"{medians['open']:.2f} ms, first chunk (connect, ApiVersions, Metadata, Fetch) "
          f"{medians['first chunk']:.2f} ms, close {medians['close']:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--trials", type=int, default=1, help="reads of each kind, interleaved; medians reported")
    parser.add_argument("--small", type=int, default=0, help="time reads of this many records: fresh vs pooled")
    args = parser.parse_args()
    if args.small:
        with one_broker_cluster(("profile",), 1, chroot="profile") as (cluster, _):
            produce(cluster.bootstrap, "profile", args.small, args.size)
            print(f"load average: {os.getloadavg()[0]:.2f}")
            small_reads(cluster.bootstrap, "profile", args.small, args.trials)
            print(f"load average: {os.getloadavg()[0]:.2f}")
        return

    with one_broker_cluster(("profile",), 1, chroot="profile") as (cluster, _):
        produce(cluster.bootstrap, "profile", args.records, args.size)
        print(f"load average: {os.getloadavg()[0]:.2f}")
        timed_read(cluster.bootstrap, "profile", args.records, "cython", False)  # warm the page cache
        kinds = (("baseline: lists", "cython", True), ("cython", "cython", False), ("python", "python", False))
        times: dict[str, list] = {name: [] for name, _, _ in kinds}
        for _ in range(args.trials):
            for name, codec, baseline in kinds:
                times[name].append(timed_read(cluster.bootstrap, "profile", args.records, codec, False, baseline))
        rates = {}
        for name, runs in times.items():
            elapsed, cpu = statistics.median(t for t, _ in runs), statistics.median(c for _, c in runs)
            rates[name] = args.records / elapsed
            print(f"read_partition, {name}: {args.records:,} records in {elapsed:.2f}s = {rates[name]:,.0f} rows/s; "
                  f"CPU {cpu:.3f}s = {cpu / args.records * 1e6:.2f} us/record (median of {args.trials})")
        print(f"Arrow buffers (compiled) / baseline lists: {rates['cython'] / rates['baseline: lists']:.2f}; "
              f"compiled / pure-Python: {rates['cython'] / rates['python']:.2f}")
        if args.profile:
            timed_read(cluster.bootstrap, "profile", args.records, "cython", True)


if __name__ == "__main__":
    main()
