"""Mirror topics from one sparklog cluster to another: the paper's live-to-offline data-center mirror, as a
Spark streaming query reading one cluster and writing the other.

    python -m jobs.mirror --source-zookeeper live:2181 --target-zookeeper offline:2181 --topics activity

Rule 1: keys, values, headers and partitions are preserved: a record read from partition p of a topic is
written to partition p of the same topic in the target, which is created with the source's partition
count if missing. Each Spark task reads one source partition range in offset order and writes it with one
producer, so each partition's order is kept too.
Rule 2: progress is the query's checkpoint; delivery is at-least-once, as with Kafka's MirrorMaker: a
batch interrupted after some records were acknowledged is written again on restart.
By default the query is `Trigger.AvailableNow` (mirror what is there, then stop); `--interval` keeps it
running with a processing-time trigger.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python jobs/mirror.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common import ensure_topic, job_session, run_to_completion, start_query  # noqa: E402

QUERY_TIMEOUT_S = 1800


@dataclass(frozen=True)
class MirrorReport:
    topics: tuple[str, ...]
    mirrored: int
    batches: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.mirrored / self.seconds if self.seconds else 0.0


def partition_counts(zookeeper: str, topics) -> dict[str, int]:
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import get_topic

    zk = connect(zookeeper)
    try:
        return {t: len(get_topic(zk, t).partitions) for t in topics}
    finally:
        close(zk)


def start(spark, source_zookeeper: str, target_zookeeper: str, topics, checkpoint: str,
          interval: str | None = None, max_offsets_per_trigger: int | None = None):
    """Start the mirror query (creating missing target topics, Rule 1); the caller awaits or stops it."""
    for topic, partitions in partition_counts(source_zookeeper, topics).items():
        ensure_topic(target_zookeeper, topic, partitions)
    reader = (spark.readStream.format("sparklog").option("zookeeper.connect", source_zookeeper)
              .option("subscribe", ",".join(topics)).option("startingOffsets", "earliest")
              .option("includeHeaders", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    writer = (reader.load().select("key", "value", "topic", "partition", "headers").writeStream
              .format("sparklog").option("zookeeper.connect", target_zookeeper)
              .option("checkpointLocation", checkpoint).queryName("mirror"))
    writer = writer.trigger(processingTime=interval) if interval else writer.trigger(availableNow=True)
    return start_query(writer)


def mirror(spark, source_zookeeper: str, target_zookeeper: str, topics, checkpoint: str,
           max_offsets_per_trigger: int | None = None) -> MirrorReport:
    """Mirror everything the topics hold now, then stop (Trigger.AvailableNow)."""
    started = time.perf_counter()
    query = start(spark, source_zookeeper, target_zookeeper, list(topics), checkpoint,
                  max_offsets_per_trigger=max_offsets_per_trigger)
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
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    topics = [t for t in args.topics.split(",") if t]
    with job_session("sparklog-mirror") as spark:
        if args.interval:
            start(spark, args.source_zookeeper, args.target_zookeeper, topics, args.checkpoint,
                  interval=args.interval).awaitTermination()
            return 0
        report = mirror(spark, args.source_zookeeper, args.target_zookeeper, topics, args.checkpoint)
    print(f"mirrored {report.mirrored} records of {', '.join(report.topics)} in {report.seconds:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
