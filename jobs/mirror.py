"""Mirror topics from one sparklog cluster to another: the paper's live-to-offline data-center mirror, as a
Spark streaming query reading one cluster and writing the other.

    python -m jobs.mirror --source-zookeeper live:2181 --target-zookeeper offline:2181 --topics activity
    python -m jobs.mirror ... --at-least-once          # MirrorMaker's old mode: no transactions in the target

Rule 1: keys, values, headers and partitions are preserved: a record read from partition p of a topic is
written to partition p of the same topic in the target, which is created with the source's partition
count if missing. Each Spark task reads one source partition range in offset order and writes it with one
producer, so each partition's order is kept too.
Rule 2 (exactly once, the default): the source is read `read_committed` (records of aborted or still open
transactions are never mirrored; commit and abort markers are the target's own) and written by the
exactly-once sink (`deliveryGuarantee=exactly-once`, datasource/exactly_once.py): each micro-batch's records
become visible to the target's read_committed readers once, whatever is SIGKILLed when, provided the mirror
is restarted from its checkpoint within the sink's transaction timeout. The checkpoint holds the source
offsets, the sink's decision topic on the target (`__sparklog_eos-<prefix>`) the batch each commit belongs
to: together they are what a consume-transform-produce loop's offsets sent in its transaction are.
Rule 3 (the transactional id prefix): `--transactional-id-prefix`, by default `mirror-<topics>` (sorted,
'.'-joined; `mirror-<sha1>` when that is long), names the tasks' transactional ids and the decision topic.
One mirror per prefix and target cluster: two mirrors of the same topics into one target need their own.
Rule 4 (`--at-least-once`): the old mode, as Kafka's MirrorMaker: plain producers, a batch interrupted after
some records were acknowledged is written again on restart. The source is still read read_committed.
Rule 5: in either mode a record's target offset may differ from its source offset (transaction markers take
offsets in the target, and a topic that already held records starts elsewhere); partition and order are kept.
By default the query is `Trigger.AvailableNow` (mirror what is there, then stop); `--interval` keeps it
running with a processing-time trigger.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python jobs/mirror.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common import ensure_topic, job_session, run_to_completion, security_options, start_query  # noqa: E402

QUERY_TIMEOUT_S = 1800
EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
PREFIX_MAX = 120  # a default prefix longer than this is hashed (the decision topic's name holds it)


@dataclass(frozen=True)
class MirrorReport:
    topics: tuple[str, ...]
    mirrored: int
    batches: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.mirrored / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class MirrorCheck:
    """The target against the source, both read read_committed, as multisets of (topic, partition, key, value)."""
    source: int
    target: int
    missing: int  # records the source holds more often than the target
    extra: int  # records the target holds more often than the source (duplicates, aborted records)

    @property
    def exactly_once(self) -> bool:
        return self.missing == 0 and self.extra == 0 and self.source == self.target


def check(spark, source_zookeeper: str, target_zookeeper: str, topics, security: dict | None = None) -> MirrorCheck:
    """Compare what read_committed readers find in the target with the source (every record exactly once)."""
    def committed(zookeeper: str):
        return (spark.read.format("sparklog").option("zookeeper.connect", zookeeper)
                .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
                .option("kafka.isolation.level", "read_committed").options(**security_options(security)).load()
                .select("topic", "partition", "key", "value").cache())

    source, target = committed(source_zookeeper), committed(target_zookeeper)
    try:
        return MirrorCheck(source.count(), target.count(), source.exceptAll(target).count(),
                           target.exceptAll(source).count())
    finally:
        source.unpersist()
        target.unpersist()


def partition_counts(zookeeper: str, topics) -> dict[str, int]:
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import get_topic

    zk = connect(zookeeper)
    try:
        return {t: len(get_topic(zk, t).partitions) for t in topics}
    finally:
        close(zk)


def default_prefix(topics) -> str:
    """Rule 3: `mirror-<sorted topics, '.'-joined>`, or `mirror-<sha1 of them>` when that is long."""
    joined = ".".join(sorted(topics))
    prefix = f"mirror-{joined}"
    return prefix if len(prefix) <= PREFIX_MAX else f"mirror-{hashlib.sha1(joined.encode()).hexdigest()}"


def start(spark, source_zookeeper: str, target_zookeeper: str, topics, checkpoint: str,
          interval: str | None = None, max_offsets_per_trigger: int | None = None,
          guarantee: str = EXACTLY_ONCE, transactional_id_prefix: str | None = None, security: dict | None = None):
    """Start the mirror query (creating missing target topics, Rule 1); the caller awaits or stops it."""
    if guarantee not in (EXACTLY_ONCE, AT_LEAST_ONCE):
        raise ValueError(f"unknown delivery guarantee {guarantee!r}: {EXACTLY_ONCE} or {AT_LEAST_ONCE}")
    for topic, partitions in partition_counts(source_zookeeper, topics).items():
        ensure_topic(target_zookeeper, topic, partitions, security=security)
    reader = (spark.readStream.format("sparklog").option("zookeeper.connect", source_zookeeper)
              .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
              .option("includeHeaders", "true").option("kafka.isolation.level", "read_committed")
              .options(**security_options(security)))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    writer = (reader.load().select("key", "value", "topic", "partition", "headers").writeStream
              .format("sparklog").option("zookeeper.connect", target_zookeeper)
              .options(**security_options(security)).option("checkpointLocation", checkpoint).queryName("mirror"))
    if guarantee == EXACTLY_ONCE:
        writer = (writer.option("deliveryGuarantee", EXACTLY_ONCE)
                  .option("transactionalIdPrefix", transactional_id_prefix or default_prefix(topics)))
    writer = writer.trigger(processingTime=interval) if interval else writer.trigger(availableNow=True)
    return start_query(writer)


def mirror(spark, source_zookeeper: str, target_zookeeper: str, topics, checkpoint: str,
           max_offsets_per_trigger: int | None = None, guarantee: str = EXACTLY_ONCE,
           transactional_id_prefix: str | None = None, security: dict | None = None) -> MirrorReport:
    """Mirror everything the topics hold now, then stop (Trigger.AvailableNow)."""
    started = time.perf_counter()
    query = start(spark, source_zookeeper, target_zookeeper, list(topics), checkpoint,
                  max_offsets_per_trigger=max_offsets_per_trigger, guarantee=guarantee,
                  transactional_id_prefix=transactional_id_prefix, security=security)
    progress = run_to_completion(query, "mirror", QUERY_TIMEOUT_S)
    return MirrorReport(tuple(topics), sum(p["numInputRows"] for p in progress), len(progress),
                        time.perf_counter() - started)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.mirror", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source-zookeeper", required=True, help="the cluster mirrored from")
    p.add_argument("--target-zookeeper", required=True, help="the cluster mirrored to")
    p.add_argument("--topics", required=True, help="comma-separated topics")
    p.add_argument("--checkpoint", required=True, help="the query's checkpoint directory")
    p.add_argument("--interval", help="keep running with this processing-time trigger (e.g. '10 seconds')")
    p.add_argument("--max-offsets-per-trigger", type=int, help="records per micro-batch at most (default: all)")
    p.add_argument("--at-least-once", action="store_true",
                   help="plain producers, no transactions: a batch interrupted mid-way is written again (Rule 4)")
    p.add_argument("--transactional-id-prefix",
                   help="exactly-once: the tasks' transactional id prefix (default: mirror-<topics>, Rule 3)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    topics = [t for t in args.topics.split(",") if t]
    delivery = {"max_offsets_per_trigger": args.max_offsets_per_trigger,
                "guarantee": AT_LEAST_ONCE if args.at_least_once else EXACTLY_ONCE,
                "transactional_id_prefix": args.transactional_id_prefix}
    with job_session("sparklog-mirror") as spark:
        if args.interval:
            start(spark, args.source_zookeeper, args.target_zookeeper, topics, args.checkpoint,
                  interval=args.interval, **delivery).awaitTermination()
            return 0
        report = mirror(spark, args.source_zookeeper, args.target_zookeeper, topics, args.checkpoint, **delivery)
    print(f"mirrored {report.mirrored} records of {', '.join(report.topics)} in {report.seconds:.1f}s "
          f"({delivery['guarantee']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
