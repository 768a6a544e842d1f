"""Event-time windowed page-view counts per page, with a watermark: a streaming aggregation whose results
go back to a sparklog topic (a derived feed) and to a warehouse table.

    python -m jobs.pageview_counts --zookeeper localhost:2181 --warehouse /data/warehouse

Rule 1: windows are tumbling, of `window` event time, over page-view events only; the watermark trails the
largest event time seen by `watermark`, and a window's count is emitted once (append mode) when the
watermark passes its end — late events for an emitted window are dropped, as Spark's watermark defines. So
a finite run (`Trigger.AvailableNow`) emits the windows that closed, and a later run with newer events
emits the rest.
Rule 2: each micro-batch writes its windows to the feed topic (key = page, value = JSON; at-least-once like
Spark's Kafka sink) and to the table, partitioned by the batch id and written with dynamic partition
overwrite: a batch replayed after a crash replaces its own rows, so the table holds each window once.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python jobs/pageview_counts.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common import ensure_topic, job_session, run_to_completion, security_options, start_query  # noqa: E402
from jobs.events import ACTIVITY_TOPIC, subject  # noqa: E402

FEED_TOPIC = "pageview_counts"
DEFAULT_WINDOW = "1 minute"
DEFAULT_WATERMARK = "1 minute"
QUERY_TIMEOUT_S = 1800


@dataclass(frozen=True)
class CountsReport:
    windows: int  # (window, page) rows emitted this run
    views: int  # page views counted in them
    batches: int
    seconds: float
    table: str
    path: str


def counts(spark, zookeeper: str, topic: str = ACTIVITY_TOPIC, window: str = DEFAULT_WINDOW,
           watermark: str = DEFAULT_WATERMARK, security: dict | None = None):
    """The streaming DataFrame of (window_start, window_end, page, views) (Rule 1)."""
    from pyspark.sql import functions as F

    events = (spark.readStream.format("sparklog").option("zookeeper.connect", zookeeper).option("subscribe", topic)
              .option("startingOffsets", "earliest").option("valueFormat", "avro").option("subject", subject(topic))
              .options(**security_options(security)).load().select("value.kind", "value.page", F.col("value.timestamp").alias("event_time")))
    return (events.where(F.col("kind") == "page_view").withWatermark("event_time", watermark)
            .groupBy(F.window("event_time", window), "page").count()
            .select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"), "page",
                    F.col("count").alias("views")))


def run(spark, zookeeper: str, warehouse: str, checkpoint: str, topic: str = ACTIVITY_TOPIC,
        feed_topic: str = FEED_TOPIC, database: str = "sparklog", window: str = DEFAULT_WINDOW,
        watermark: str = DEFAULT_WATERMARK, security: dict | None = None) -> CountsReport:
    """One `Trigger.AvailableNow` run of the aggregation into the feed and the table (Rule 2)."""
    from pyspark.sql import functions as F

    ensure_topic(zookeeper, feed_topic, 1, security=security)
    path = Path(warehouse).resolve() / f"{database}.db" / feed_topic
    emitted = {"windows": 0, "views": 0}

    def write(batch, batch_id: int) -> None:
        batch = batch.persist()
        try:
            (batch.select(F.col("page").alias("key"), F.to_json(F.struct(
                F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_start"),
                F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ss'Z'").alias("window_end"),
                "page", "views")).alias("value"))
             .write.format("sparklog").option("zookeeper.connect", zookeeper).option("topic", feed_topic)
             .options(**security_options(security)).mode("append").save())
            (batch.withColumn("batch_id", F.lit(batch_id)).write.mode("overwrite").partitionBy("batch_id")
             .option("partitionOverwriteMode", "dynamic").parquet(str(path)))
            summary = batch.agg(F.count("*").alias("n"), F.sum("views").alias("v")).first()
            emitted["windows"] += summary["n"]
            emitted["views"] += summary["v"] or 0
        finally:
            batch.unpersist()

    started = time.perf_counter()
    query = start_query(counts(spark, zookeeper, topic, window, watermark, security).writeStream.outputMode("append")
                        .foreachBatch(write).option("checkpointLocation", checkpoint).trigger(availableNow=True)
                        .queryName("pageview_counts"))
    progress = run_to_completion(query, "pageview counts", QUERY_TIMEOUT_S)
    table = f"{database}.{feed_topic}"
    if path.exists():
        spark.sql(f"CREATE DATABASE IF NOT EXISTS `{database}` LOCATION '{path.parent}'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS `{database}`.`{feed_topic}` USING parquet LOCATION '{path}'")
        spark.sql(f"REFRESH TABLE `{database}`.`{feed_topic}`")
        spark.sql(f"MSCK REPAIR TABLE `{database}`.`{feed_topic}`")
    return CountsReport(emitted["windows"], emitted["views"], len(progress),
                        time.perf_counter() - started, table, str(path))


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.pageview_counts", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zookeeper", required=True)
    p.add_argument("--warehouse", required=True, help="warehouse directory")
    p.add_argument("--checkpoint", help="checkpoint directory (default: <warehouse>/_checkpoints/pageview_counts)")
    p.add_argument("--topic", default=ACTIVITY_TOPIC, help="activity topic (%(default)s)")
    p.add_argument("--feed-topic", default=FEED_TOPIC, help="derived feed topic (%(default)s)")
    p.add_argument("--window", default=DEFAULT_WINDOW, help="window length (%(default)s)")
    p.add_argument("--watermark", default=DEFAULT_WATERMARK, help="watermark delay (%(default)s)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    checkpoint = args.checkpoint or str(Path(args.warehouse) / "_checkpoints" / "pageview_counts")
    with job_session("sparklog-pageview-counts") as spark:
        report = run(spark, args.zookeeper, args.warehouse, checkpoint, args.topic, args.feed_topic,
                     window=args.window, watermark=args.watermark)
    print(f"{report.windows} (window, page) counts of {report.views} page views -> topic {args.feed_topic} "
          f"and table {report.table} ({report.seconds:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
