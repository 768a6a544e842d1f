"""The paper's audit (section 4): per producer, topic and time window, compare the count each producer
reported in its monitoring events with the messages that actually arrived in the topic.

    python -m jobs.audit --zookeeper localhost:2181 --topics activity

Rule 1: both sides are read with the data source in batch mode (`valueFormat=avro`): the monitoring topic
gives (producer, topic, window start, window length, count); the topics give every event's producer
(`server`) and event time, counted into the same windows. A producer that reports a window twice (a
restart) has its reports summed.
Rule 2: a window is a discrepancy when the two counts differ, including a window only one side knows
about; the command prints a table and exits 1 when there is any.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as `python jobs/audit.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common import job_session, security_options  # noqa: E402
from jobs.events import ACTIVITY_TOPIC, MONITORING_TOPIC, subject  # noqa: E402

SHOWN_ROWS = 40  # longest table printed; discrepancies are shown first


@dataclass(frozen=True)
class AuditRow:
    producer: str
    topic: str
    window_start_ms: int
    reported: int
    received: int

    @property
    def ok(self) -> bool:
        return self.reported == self.received


@dataclass(frozen=True)
class AuditReport:
    rows: list[AuditRow]

    @property
    def discrepancies(self) -> list[AuditRow]:
        return [r for r in self.rows if not r.ok]

    @property
    def reported(self) -> int:
        return sum(r.reported for r in self.rows)

    @property
    def received(self) -> int:
        return sum(r.received for r in self.rows)


def _read(spark, zookeeper: str, topic: str, security: dict | None = None):
    return (spark.read.format("sparklog").option("zookeeper.connect", zookeeper).option("subscribe", topic)
            .option("startingOffsets", "earliest").option("valueFormat", "avro").option("subject", subject(topic))
            .options(**security_options(security)).load().select("value.*"))


def audit(spark, zookeeper: str, topics=(ACTIVITY_TOPIC,), monitoring_topic: str = MONITORING_TOPIC,
          security: dict | None = None) -> AuditReport:
    """Compare reported and received counts per (producer, topic, window) (Rules 1 and 2)."""
    from pyspark.sql import functions as F

    reports = (_read(spark, zookeeper, monitoring_topic, security).where(F.col("topic").isin(list(topics)))
               .groupBy("producer", "topic", F.unix_millis("window_start").alias("window_start_ms"), "window_ms")
               .agg(F.sum("count").alias("reported")))
    window_lengths = [r["window_ms"] for r in reports.select("window_ms").distinct().collect()]
    received = None
    for topic in topics:
        events = _read(spark, zookeeper, topic, security).select(F.col("server").alias("producer"),
                                                       F.unix_millis("timestamp").alias("ts"))
        for length in window_lengths:
            counted = (events.groupBy("producer", (F.col("ts") - F.col("ts") % length).alias("window_start_ms"))
                       .count().select("producer", F.lit(topic).alias("topic"), "window_start_ms",
                                       F.lit(length).alias("window_ms"), F.col("count").alias("received")))
            received = counted if received is None else received.unionByName(counted)
    keys = ["producer", "topic", "window_start_ms", "window_ms"]
    joined = reports.join(received, keys, "full_outer") if received is not None else reports.withColumn(
        "received", F.lit(0))
    rows = [AuditRow(r["producer"], r["topic"], r["window_start_ms"], r["reported"] or 0, r["received"] or 0)
            for r in joined.orderBy("producer", "topic", "window_start_ms").collect()]
    return AuditReport(rows)


def print_report(report: AuditReport, console=None, shown: int = SHOWN_ROWS) -> None:
    from datetime import datetime, timezone

    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=f"audit: {len(report.rows)} windows, {len(report.discrepancies)} discrepancies")
    for column in ("producer", "topic", "window (UTC)", "reported", "received", ""):
        table.add_column(column, justify="right" if column in ("reported", "received") else "left")
    ordered = report.discrepancies + [r for r in report.rows if r.ok]
    for r in ordered[:shown]:
        when = datetime.fromtimestamp(r.window_start_ms / 1000, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        status = "[green]ok[/green]" if r.ok else f"[red]MISSING {r.reported - r.received}[/red]" \
            if r.received < r.reported else f"[red]EXTRA {r.received - r.reported}[/red]"
        table.add_row(r.producer, r.topic, when, f"{r.reported:,}", f"{r.received:,}", status)
    if len(ordered) > shown:
        table.caption = f"{len(ordered) - shown} more windows, all ok"
    console.print(table)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.audit", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string (brokers and schema registry)")
    p.add_argument("--topics", default=ACTIVITY_TOPIC, help="comma-separated audited topics (%(default)s)")
    p.add_argument("--monitoring-topic", default=MONITORING_TOPIC, help="(%(default)s)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    with job_session("sparklog-audit") as spark:
        report = audit(spark, args.zookeeper, [t for t in args.topics.split(",") if t], args.monitoring_topic)
    print_report(report)
    return 1 if report.discrepancies else 0


if __name__ == "__main__":
    sys.exit(main())
