"""What the exactly-once Spark sink costs: `df.write.format("sparklog")` with
`deliveryGuarantee=exactly-once` (two-phase commit: each task's transaction prepared, the driver's decision
ledger and EndTxn) against the default at-least-once write of the same DataFrame, in one local[2] session on
one broker, alternating the order per round since the machine may be shared (issue 23's goal: >= 0.7x).

    .venv/bin/python benchmarks/spark_sink_eos.py [--rows 1000000] [--size 200] [--partitions 4] [--rounds 3]

Each round writes the same cached DataFrame (`--rows` rows of `--size` bytes over `--partitions` Spark and
topic partitions) to a fresh topic in each mode, after one untimed write of 1,000 rows per mode that starts
the Python workers. A write counts only when it is whole: afterwards a read_committed reader must get exactly
`--rows` records from the topic (read to its end within a deadline), else the row is FAILED and the run exits
1 (measure.py Rule 4). Prints rows/s per mode per round, the medians and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

import measure  # noqa: E402

BROKER_SETTINGS = measure.ONE_BROKER_TRANSACTIONS  # the transaction log on the one broker
MODES = ("at-least-once", "exactly-once")
WRITE_DEADLINE_S = 600.0


def data_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records a read_committed reader gets from `topic` (control batches and aborted data excluded),
    counted by reading it whole within a deadline."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{uuid.uuid4().hex[:6]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    count, done, deadline = 0, set(), time.monotonic() + 120
    try:
        while len(done) < partitions and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error():
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        done.add(msg.partition())
                    continue
                count += 1
    finally:
        consumer.close()
    return count


def write(df, bootstrap: str, topic: str, mode: str) -> float | None:
    """Seconds the write took, or None after WRITE_DEADLINE_S (its jobs cancelled) or an error (printed)."""
    writer = (df.write.format("sparklog").mode("append").option("kafka.bootstrap.servers", bootstrap)
              .option("topic", topic).option("deliveryGuarantee", mode))
    if mode == "exactly-once":
        writer = writer.option("transactionalIdPrefix", f"bench-{topic}")
    failure: list[BaseException] = []

    def save() -> None:
        try:
            activate(df.sparkSession)  # a write from a thread needs the session active there (datasource docs)
            writer.save()
        except BaseException as exc:  # noqa: BLE001 - reported as the row's failure
            failure.append(exc)

    from sparklog.datasource import activate

    start = time.perf_counter()
    thread = threading.Thread(target=save, daemon=True)
    thread.start()
    thread.join(WRITE_DEADLINE_S)
    if thread.is_alive():
        df.sparkSession.sparkContext.cancelAllJobs()
        thread.join(60)
        print(f"{mode} write to {topic}: not done within {WRITE_DEADLINE_S:.0f} s")
        return None
    if failure:
        error = failure[0]
        detail = error.java_exception.toString() if hasattr(error, "java_exception") else str(error)
        print(f"{mode} write to {topic} failed: {detail.splitlines()[0]}")
        return None
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    from pyspark.sql import functions as F
    from confluent_kafka.admin import AdminClient, NewTopic

    from sparklog.broker.launcher import LocalCluster
    from support.spark import new_session

    print(f"load before: {measure.load()}")
    with LocalCluster(Path(tempfile.mkdtemp(prefix="sparklog-bench-eos-")), brokers=1,
                      overrides=BROKER_SETTINGS) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        spark = new_session(conf={"spark.driver.memory": "3g"})
        value = F.lit(measure.payload(args.size))
        df = (spark.range(args.rows).repartition(args.partitions)
              .select(F.col("id").cast("string").cast("binary").alias("key"), value.alias("value"),
                      (F.col("id") % args.partitions).cast("int").alias("partition"))).cache()
        df.count()

        def fresh_topic() -> str:
            topic = f"eos-bench-{uuid.uuid4().hex[:8]}"
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
            return topic

        for mode in MODES:  # untimed: starts the Python workers, and the ledger topic for exactly-once
            write(df.limit(1000), cluster.bootstrap, fresh_topic(), mode)
        rates: dict[str, list[float]] = {mode: [] for mode in MODES}
        for r in range(args.rounds):
            for mode in (MODES if r % 2 == 0 else MODES[::-1]):
                topic = fresh_topic()
                seconds = write(df, cluster.bootstrap, topic, mode)
                if seconds is None:
                    print(f"round {r + 1} {mode:>13}: {measure.shortfall('FAILED: the write did not finish')}")
                    continue
                got = data_records(cluster.bootstrap, topic, args.partitions)
                note = "" if got == args.rows else measure.shortfall(
                    f"; FAILED: {got:,} of {args.rows:,} rows readable read_committed")
                rates[mode].append(args.rows / seconds)
                print(f"round {r + 1} {mode:>13}: {seconds:6.2f} s = {args.rows / seconds:10,.0f} rows/s{note}",
                      flush=True)
        spark.stop()
    if not all(rates.values()):
        return 1
    medians = {mode: statistics.median(rates[mode]) for mode in MODES}
    print(f"median at-least-once {medians['at-least-once']:,.0f} rows/s, exactly-once "
          f"{medians['exactly-once']:,.0f} rows/s: {medians['exactly-once'] / medians['at-least-once']:.2f}x "
          f"(goal >= 0.7x); load after: {measure.load()}")
    return 0


if __name__ == "__main__":
    sys.exit(measure.run(main))
