"""`sparklog demo`: the whole system on this machine, end to end, in one command.

It starts an embedded ZooKeeper and three brokers, creates a topic, publishes activity events with the
batching producer, consumes them with a ZooKeeper consumer group of three members (the paper's
Algorithm 1 splits the partitions between them), reads the topic into Spark with `format("sparklog")`, and
prints what it measured. Everything it started is stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

TOPIC = "page_views"
PAGES = ("/", "/home", "/jobs", "/feed", "/search", "/profile", "/messages", "/settings", "/company", "/learning")
AGENTS = ("Mozilla/5.0 (X11; Linux x86_64)", "Mozilla/5.0 (Macintosh)", "Mozilla/5.0 (iPhone)",
          "curl/8.5.0", "Mozilla/5.0 (Windows NT 10.0)")
GROUP_MEMBERS = 3
IDLE_STOP_MS = 3_000  # a group member stops iterating after this long without a message


def add_parser(subparsers) -> None:
    demo = subparsers.add_parser("demo", help="run the end-to-end demo on a local cluster")
    demo.add_argument("--events", type=int, default=200_000, help="activity events to publish (%(default)s)")
    demo.add_argument("--brokers", type=int, default=3, help="brokers to start (%(default)s)")
    demo.add_argument("--partitions", type=int, default=6, help="partitions of the topic (%(default)s)")
    demo.add_argument("--dir", help="working directory (default: a temporary one, removed at the end)")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark step")
    demo.set_defaults(func=run)


@dataclass
class Step:
    name: str
    messages: int
    seconds: float
    note: str = ""

    @property
    def rate(self) -> float:
        return self.messages / self.seconds if self.seconds else 0.0


@dataclass
class Report:
    steps: list[Step] = field(default_factory=list)
    facts: dict[str, str] = field(default_factory=dict)


def make_events(count: int, seed: int = 42):
    """Page-view events as (key, value): the key is the member id, so one member's views stay in order."""
    rng = random.Random(seed)
    start_ms = int(time.time() * 1000) - count  # one event per millisecond, ending now
    for i in range(count):
        member = rng.randrange(50_000)
        event = {"member_id": member, "page": rng.choice(PAGES), "agent": rng.choice(AGENTS),
                 "ts": start_ms + i, "session": f"s{member % 997}"}
        yield str(member).encode(), json.dumps(event, separators=(",", ":")).encode()


def produce(bootstrap: str, count: int, progress) -> tuple[Step, Counter]:
    from sparklog.client import Producer

    events = list(make_events(count))  # generated before the clock starts: the producer is measured
    pages = Counter(json.loads(value)["page"] for _, value in events)
    task = progress.add_task("producing", total=count)
    started = time.perf_counter()
    with Producer(bootstrap, **{"linger.ms": 10, "compression.type": "lz4", "acks": 1}) as producer:
        send = producer.send
        for i, (key, value) in enumerate(events, 1):
            send(TOPIC, value, key=key)
            if i % 10_000 == 0:
                progress.update(task, completed=i)
        producer.flush()
    seconds = time.perf_counter() - started
    progress.update(task, completed=count)
    return Step("produce (Python producer, lz4, acks=1)", count, seconds), pages


def consume_group(zookeeper: str, bootstrap: str, expected: int, progress) -> tuple[Step, dict]:
    """Three members of one group read the topic once between them; each reports its partitions."""
    from sparklog.client import GroupConsumer

    task = progress.add_task("consuming (group of 3)", total=expected)
    counts: dict[str, Counter] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def member(n: int) -> None:
        seen: Counter = Counter()
        try:
            with GroupConsumer([TOPIC], "demo-readers", zookeeper, auto_offset_reset="smallest",
                               **{"bootstrap.servers": bootstrap, "consumer.timeout.ms": IDLE_STOP_MS}) as consumer:
                for record in consumer:
                    seen[record.partition] += 1
                    if sum(seen.values()) % 5_000 == 0:
                        progress.advance(task, 5_000)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        with lock:
            counts[f"member-{n}"] = seen

    started = time.perf_counter()
    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in range(GROUP_MEMBERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - started - IDLE_STOP_MS / 1000
    if errors:
        raise errors[0]
    total = sum(sum(c.values()) for c in counts.values())
    progress.update(task, completed=total)
    return Step("consume (ZooKeeper group, 3 members)", total, seconds), counts


def spark_read(bootstrap: str, expected: int) -> tuple[Step, list]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F

    spark = (SparkSession.builder.master("local[2]").appName("sparklog-demo")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    try:
        started = time.perf_counter()
        df = (spark.read.format("sparklog").option("bootstrap.servers", bootstrap)
              .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
        views = df.select(F.get_json_object(F.col("value").cast("string"), "$.page").alias("page"))
        top = views.groupBy("page").count().orderBy(F.desc("count")).collect()
        seconds = time.perf_counter() - started
        rows = sum(r["count"] for r in top)
        return Step("Spark batch read + group by page", rows, seconds), [(r["page"], r["count"]) for r in top]
    finally:
        spark.stop()


def log_bytes(base: Path) -> int:
    """Bytes of segment files over every broker's log dir."""
    return sum(p.stat().st_size for p in base.glob("broker-*/logs/*/*.log"))


def run(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from sparklog.broker.launcher import LocalCluster
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import create_topic

    console = Console()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sparklog-demo-"))
    report = Report()
    console.print(f"[bold]sparklog demo[/bold]: ZooKeeper + {args.brokers} brokers under {base}")
    try:
        with LocalCluster(base, brokers=args.brokers) as cluster:
            report.facts["ZooKeeper"] = cluster.zookeeper
            report.facts["brokers"] = cluster.bootstrap
            zk = connect(cluster.zookeeper)
            try:
                create_topic(zk, TOPIC, args.partitions, 1)
            finally:
                close(zk)
            report.facts["topic"] = f"{TOPIC}: {args.partitions} partitions over {args.brokers} brokers"
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console) as progress:
                step, pages = produce(cluster.bootstrap, args.events, progress)
                report.steps.append(step)
                step, members = consume_group(cluster.zookeeper, cluster.bootstrap, args.events, progress)
                report.steps.append(step)
            for name, seen in sorted(members.items()):
                report.facts[name] = f"partitions {sorted(seen)}: {sum(seen.values())} messages"
            if not args.no_spark:
                console.print("reading the topic into Spark ...")
                step, top = spark_read(cluster.bootstrap, args.events)
                report.steps.append(step)
                agree = dict(top) == dict(pages)
                report.facts["Spark page counts equal the produced ones"] = "yes" if agree else "NO"
            payload = sum(len(k) + len(v) for k, v in make_events(args.events))
            stored = log_bytes(base)
            report.facts["on disk"] = (f"{stored / args.events:.1f} bytes per event in lz4 batches "
                                       f"({payload / args.events:.1f} bytes of key and value)")
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: everything started has been stopped[/yellow]")
        return 130
    finally:
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)

    table = Table(title="sparklog demo")
    for column in ("step", "messages", "seconds", "msg/s"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for step in report.steps:
        table.add_row(step.name, f"{step.messages:,}", f"{step.seconds:.2f}", f"{step.rate:,.0f}")
    console.print(table)
    for key, value in report.facts.items():
        console.print(f"  {key}: {value}")
    lost = [s for s in report.steps if s.messages != args.events]
    if lost:
        console.print(f"[red]message counts differ from the {args.events:,} produced[/red]")
        return 1
    return 0
