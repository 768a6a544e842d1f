"""The Spark writer's producing path without Spark: per-record `send` vs `Producer.send_many` vs the writer's
`produce_batches` over Arrow batches, in one run against one broker.

    .venv/bin/python benchmarks/bulk_send.py [--records 1000000] [--size 200] [--partitions 4] [--rows 10000]
                                             [--keys]

Each producer sends N records of `size` bytes to its own topic and flushes; only acknowledged records count
(every batch or future is checked). `--rows` is the Arrow batch size (Spark's maxRecordsPerBatch is 10,000).
With `--keys` every record has a key (100,000 distinct ones), so each path pays murmur2 partitioning.
Prints rows/s and each bulk rate's ratio to the per-record `send` loop of the same run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from measure import one_broker_cluster  # noqa: E402

SETTINGS = {"linger.ms": 10, "batch.size": 262_144}


KEYS = [b"user-%d" % i for i in range(100_000)]


def keys_for(n: int, keyed: bool) -> list | None:
    return [KEYS[i % len(KEYS)] for i in range(n)] if keyed else None


def per_record(bootstrap: str, topic: str, n: int, payload: bytes, keyed: bool) -> float:
    from sparklog.client.producer import Producer

    with Producer(bootstrap_servers=bootstrap, **SETTINGS) as producer:
        producer.partitions_for(topic)
        start = time.perf_counter()
        send = producer.send
        if keyed:
            futures = [send(topic, payload, key) for key in keys_for(n, True)]
        else:
            futures = [send(topic, payload) for _ in range(n)]
        producer.flush()
        elapsed = time.perf_counter() - start
    assert all(f.succeeded() for f in futures)
    return elapsed


def bulk(bootstrap: str, topic: str, n: int, payload: bytes, rows: int, keyed: bool) -> float:
    from sparklog.client.producer import Producer

    values, keys = [payload] * rows, keys_for(rows, keyed)
    with Producer(bootstrap_servers=bootstrap, **SETTINGS) as producer:
        producer.partitions_for(topic)
        start = time.perf_counter()
        batches = []
        for _ in range(n // rows):
            batches.extend(producer.send_many(topic, values, keys))
        producer.flush()
        elapsed = time.perf_counter() - start
    batches = list(dict.fromkeys(batches))  # an open batch spans two calls and is returned by both
    assert all(b.done() and b.error is None for b in batches)
    assert sum(len(b.records) for b in batches) == n // rows * rows
    return elapsed


def writer(bootstrap: str, topic: str, n: int, payload: bytes, rows: int, keyed: bool) -> float:
    import pyarrow as pa

    from sparklog.datasource.options import parse_write_options
    from sparklog.datasource.writer import produce_batches

    columns = {"value": pa.array([payload] * rows, pa.binary())}
    if keyed:
        columns["key"] = pa.array(keys_for(rows, True), pa.binary())
    batch = pa.RecordBatch.from_pydict(columns)
    options = parse_write_options({"bootstrap.servers": bootstrap, "topic": topic, "sparklog.linger.ms": "10",
                                   "sparklog.batch.size": "262144"})
    start = time.perf_counter()
    written = produce_batches(options, (batch for _ in range(n // rows)))  # raises unless all acknowledged
    elapsed = time.perf_counter() - start
    assert written == n // rows * rows
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--keys", action="store_true", help="give every record a key (murmur2 partitioning)")
    args = parser.parse_args()
    n, payload = args.records // args.rows * args.rows, b"x" * args.size

    from sparklog.records import IMPLEMENTATION

    with one_broker_cluster(("send", "send-many", "writer"), args.partitions) as (cluster, _):
        base = per_record(cluster.bootstrap, "send", n, payload, args.keys)
        many = bulk(cluster.bootstrap, "send-many", n, payload, args.rows, args.keys)
        write = writer(cluster.bootstrap, "writer", n, payload, args.rows, args.keys)
        print(f"codec: {IMPLEMENTATION}; {n:,} records of {args.size} B, Arrow batches of {args.rows:,} rows"
              + (", keyed" if args.keys else ""))
        print(f"per-record send:  {base:6.2f}s = {n / base:>10,.0f} rows/s")
        print(f"send_many:        {many:6.2f}s = {n / many:>10,.0f} rows/s   / send: {base / many:.2f}")
        print(f"produce_batches:  {write:6.2f}s = {n / write:>10,.0f} rows/s   / send: {base / write:.2f}")


if __name__ == "__main__":
    main()
