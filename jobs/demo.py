"""`sparklog demo`: the whole pipeline on this machine, end to end, in one command (the paper, section 4).

It starts an embedded ZooKeeper and three brokers (the "live" cluster) plus one broker of an "offline"
cluster (its own ZooKeeper chroot), registers the Avro schemas, has two front-end producers publish
activity events with their monitoring counts into topics replicated three times (`min.insync.replicas` 2,
acks=all) while one broker, the leader of the activity topic's partition 0, is killed with SIGKILL
(`kill -9`) a third of the way through and restarted once the producers are done, reads them with a ZooKeeper consumer group (the paper's
Algorithm 1 splits the partitions), then with Spark: loads the warehouse table (`jobs.load_warehouse`),
counts page views per minute (`jobs.pageview_counts`), audits every producer's counts (`jobs.audit`) and
mirrors the topics to the offline cluster exactly once (`jobs.mirror`: a transactional consume-transform-
produce step, read_committed in, transactions out), checking that the offline cluster's read_committed
readers find every live record once. It prints a summary with rates and writes a
PNG chart of page views per minute. Everything it started is stopped on the way out, Ctrl-C included.
With `--secure` both clusters serve only SASL_SSL (SCRAM-SHA-256, TLS with a certificate authority made in the
demo's directory, inter-broker traffic too, the ACL authorizer with the demo's user the super user) and every
client of the demo, Spark's included, logs in over it (`jobs/secure.py`).

The steps live in `jobs/` (the repo checkout, which the editable install puts on the path).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

PRODUCERS = ("frontend-1", "frontend-2")
GROUP_MEMBERS = 3
IDLE_STOP_MS = 3_000  # a group member stops iterating after this long without a message
SPAN_MS = 10 * 60_000  # event times cover the last ten minutes
LIVE_SESSION_TIMEOUT_MS = 6_000  # the live brokers' ZooKeeper session: how soon a killed one is noticed
KILL_AT = 1 / 3  # the share of the events produced when a broker is killed
ISR_WAIT_S = 60.0  # how long the restarted broker may take to rejoin every ISR


def add_parser(subparsers) -> None:
    demo = subparsers.add_parser("demo", help="run the end-to-end pipeline demo on a local cluster")
    demo.add_argument("--events", type=int, default=50_000, help="activity events to publish (%(default)s)")
    demo.add_argument("--brokers", type=int, default=3, help="brokers of the live cluster (%(default)s)")
    demo.add_argument("--zookeepers", type=int, default=1, choices=(1, 3, 5),
                      help="ZooKeeper servers of the live cluster: 1, or a replicated ensemble of 3 or 5 (%(default)s)")
    demo.add_argument("--partitions", type=int, default=6, help="partitions of the activity topic (%(default)s)")
    demo.add_argument("--rate", type=float, help="events per second per producer (default: as fast as possible)")
    demo.add_argument("--dir", help="working directory (default: a temporary one, removed at the end)")
    demo.add_argument("--chart", default="sparklog-demo.png", help="PNG chart of page views per minute (%(default)s)")
    demo.add_argument("--replication-factor", type=int, help="replicas of each topic (default: min(3, brokers))")
    demo.add_argument("--no-kill", action="store_true", help="do not kill a broker while the producers run")
    demo.add_argument("--no-spark", action="store_true", help="skip the Spark steps")
    demo.add_argument("--secure", action="store_true", help="SASL_SSL listeners only (SCRAM-SHA-256, TLS), the "
                      "ACL authorizer; every client and Spark job logs in (jobs/secure.py)")
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
    failures: list[str] = field(default_factory=list)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)


def produce(zookeeper: str, events: int, partitions: int, rate: float | None, progress, on_progress=None,
            security: dict | None = None):
    """The front ends publish in parallel, each its share of the events (jobs.generate_events)."""
    from jobs.generate_events import generate

    task = progress.add_task("producing activity events", total=events)
    shares = [events // len(PRODUCERS) + (1 if i < events % len(PRODUCERS) else 0) for i in range(len(PRODUCERS))]
    done = Counter()
    reports, errors = {}, []
    start_ms = int(time.time() * 1000) - SPAN_MS

    def publish(server: str, count: int) -> None:
        def advance(n: int) -> None:
            done[server] = n
            progress.update(task, completed=sum(done.values()))
            if on_progress is not None:
                on_progress(sum(done.values()))
        try:
            reports[server] = generate(zookeeper, count, rate=rate, server=server, partitions=partitions,
                                       start_ms=start_ms, span_ms=SPAN_MS, seed=hash(server) % 1000,
                                       progress=advance, security=security)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)

    started = time.perf_counter()
    threads = [threading.Thread(target=publish, args=(s, n), daemon=True) for s, n in zip(PRODUCERS, shares)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    seconds = time.perf_counter() - started
    sent = sum(r.sent for r in reports.values())
    return Step(f"produce: {len(PRODUCERS)} producers, Avro, lz4, acks=all", sent, seconds), reports


class BrokerBounce:
    """Kill the leader of the activity topic's partition 0 with SIGKILL once `at` events are produced;
    `restart()` brings it back and waits until it is in every ISR again. Producers must see no error."""

    def __init__(self, cluster, topic: str, at: int) -> None:
        self.cluster, self.topic, self.at = cluster, topic, at
        self.victim: int | None = None
        self.killed_at: float | None = None
        self._fired = threading.Event()
        self._killer: threading.Thread | None = None

    def observe(self, produced: int) -> None:
        if produced >= self.at and not self._fired.is_set():
            self._fired.set()
            self._killer = threading.Thread(target=self._kill, daemon=True)
            self._killer.start()

    def _kill(self) -> None:
        self.victim = _leader_of(self.cluster.zookeeper, self.topic, 0)
        self.killed_at = time.perf_counter()
        self.cluster.brokers[self.victim].kill()

    def restart(self) -> str:
        """Restart the victim; the note for the report (what was killed, and how long the ISR took to heal)."""
        if self._killer is not None:
            self._killer.join()  # a small run may finish producing before the kill has landed
        if self.victim is None:
            return "no broker was killed (the producers finished first)"
        started = time.perf_counter()
        self.cluster.brokers[self.victim].start()
        healed = _wait_until_fully_replicated(self.cluster.zookeeper, ISR_WAIT_S)
        return (f"broker {self.victim} (leader of {self.topic}-0) killed with SIGKILL mid-produce, restarted; "
                f"back in every ISR {time.perf_counter() - started:.1f} s later" if healed else
                f"broker {self.victim} killed and restarted, but some ISR is still short after {ISR_WAIT_S:.0f} s")


def _leader_of(zookeeper: str, topic: str, partition: int) -> int:
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import partition_state

    zk = connect(zookeeper)
    try:
        return partition_state(zk, topic, partition).leader
    finally:
        close(zk)


def _wait_until_fully_replicated(zookeeper: str, timeout_s: float) -> bool:
    """True once every partition of every topic has all its replicas in its ISR."""
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.topics import get_topics

    zk = connect(zookeeper)
    try:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if all(p in topic.states and set(topic.states[p].isr) >= set(replicas)
                   for topic in get_topics(zk).values() for p, replicas in topic.partitions.items()):
                return True
            time.sleep(0.25)
        return False
    finally:
        close(zk)


def consume_group(zookeeper: str, expected: int, progress, security: dict | None = None) -> tuple[Step, dict]:
    """Three members of one group read the topic once between them; each reports its partitions."""
    from jobs.events import ACTIVITY_TOPIC
    from sparklog.client import GroupConsumer

    task = progress.add_task("consuming (group of 3)", total=expected)
    counts: dict[str, Counter] = {}
    lock = threading.Lock()
    errors: list[BaseException] = []

    def member(n: int) -> None:
        seen: Counter = Counter()
        try:
            with GroupConsumer([ACTIVITY_TOPIC], "demo-readers", zookeeper, auto_offset_reset="smallest",
                               **{"consumer.timeout.ms": IDLE_STOP_MS}, **(security or {})) as consumer:
                for record in consumer:
                    seen[record.partition] += 1
                    if sum(seen.values()) % 1_000 == 0:
                        progress.advance(task, 1_000)
        except BaseException as exc:  # reported by the caller
            errors.append(exc)
        with lock:
            counts[f"group member {n}"] = seen

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
    return Step("consume: ZooKeeper group of 3", total, seconds), counts


def spark_session(base: Path):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from jobs.common import spark_session as session

    return session("sparklog-demo", conf={"spark.sql.warehouse.dir": str(base / "warehouse"),
                                          "spark.driver.memory": "1g", "spark.python.worker.reuse": "true"})


def spark_steps(spark, live: str, offline: str, base: Path, produced: int, chart: Path, report: Report, progress,
                security: dict | None = None):
    """Warehouse load, page-view counts, audit and mirror, each one step of the progress display."""
    from jobs import audit, load_warehouse, mirror, pageview_counts
    from jobs.events import ACTIVITY_TOPIC, MONITORING_TOPIC

    warehouse, checkpoints = str(base / "warehouse"), base / "checkpoints"
    task = progress.add_task("Spark: warehouse load", total=4)
    [table] = load_warehouse.load(spark, live, warehouse, str(checkpoints), [ACTIVITY_TOPIC],
                                 security=security)
    report.steps.append(Step("warehouse load: Avro -> Parquet by date/hour", table.loaded, table.seconds))
    report.facts["warehouse table"] = f"{table.table}: {table.rows:,} rows at {table.path}"
    report.check(table.rows == produced, f"warehouse has {table.rows} rows, {produced} were produced")
    progress.update(task, advance=1, description="Spark: page views per minute")

    counts = pageview_counts.run(spark, live, warehouse, str(checkpoints / "pageview_counts"), security=security)
    report.steps.append(Step("aggregate: page views per minute (watermark)", counts.views, counts.seconds))
    report.facts["derived feed"] = (f"{counts.windows} closed (minute, page) windows -> topic "
                                    f"{pageview_counts.FEED_TOPIC} and table {counts.table}")
    progress.update(task, advance=1, description="Spark: audit")

    started = time.perf_counter()
    result = audit.audit(spark, live, [ACTIVITY_TOPIC], MONITORING_TOPIC, security=security)
    report.steps.append(Step("audit: monitoring counts vs received", result.received, time.perf_counter() - started))
    report.facts["audit"] = (f"{len(result.rows)} (producer, window) pairs, {len(result.discrepancies)} "
                             f"discrepancies; reported {result.reported:,}, received {result.received:,}")
    report.check(not result.discrepancies and result.received == produced, "the audit found discrepancies")
    progress.update(task, advance=1, description="Spark: mirror to the offline cluster")

    topics = [ACTIVITY_TOPIC, MONITORING_TOPIC]
    mirrored = mirror.mirror(spark, live, offline, topics, str(checkpoints / "mirror"), security=security)
    report.steps.append(Step("mirror: live -> offline cluster, exactly once (read_committed in, transactions out)",
                             mirrored.mirrored, mirrored.seconds))
    report.check(mirrored.mirrored >= produced, f"mirrored {mirrored.mirrored} of {produced}")
    mirror_check(spark, live, offline, topics, report, security)
    progress.update(task, advance=1, description="Spark: done")

    minutes = chart_views_per_minute(spark, table.table, chart)
    report.facts["chart"] = f"{chart} ({minutes} minutes of page views)"


def mirror_check(spark, live: str, offline: str, topics, report: Report, security: dict | None = None) -> None:
    """The transactional step's check: the offline cluster's read_committed readers find every live record once."""
    from jobs import mirror

    started = time.perf_counter()
    found = mirror.check(spark, live, offline, topics, security)
    report.facts["exactly once"] = (f"read_committed on the offline cluster: {found.target:,} records for "
                                    f"{found.source:,} live ones, {found.missing} missing, {found.extra} extra "
                                    f"(checked in {time.perf_counter() - started:.1f} s)")
    report.check(found.exactly_once, f"the mirror is not exactly once: {found}")


def chart_views_per_minute(spark, table: str, path: Path) -> int:
    """A PNG bar chart of page views per minute (from the warehouse table); returns the minutes plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = spark.sql(f"SELECT date_trunc('minute', timestamp) AS minute, count(*) AS views FROM {table} "
                     "WHERE kind = 'page_view' GROUP BY 1 ORDER BY 1").collect()
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar([r["minute"] for r in rows], [r["views"] for r in rows], width=1 / 1440 * 0.8)
    ax.set_title("sparklog demo: page views per minute (warehouse table)")
    ax.set_xlabel("event time (UTC)")
    ax.set_ylabel("page views")
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return len(rows)


def log_bytes(base: Path) -> int:
    """Bytes of segment files over every live broker's log dir (every replica counted)."""
    return sum(p.stat().st_size for p in base.glob("live/broker-*/logs/*/*.log"))


def run(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from sparklog.broker.launcher import LocalCluster
    from jobs.common import ensure_topic
    from jobs.events import ACTIVITY_TOPIC, MONITORING_TOPIC
    from jobs.secure import SecureDemo

    console = Console()
    base = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="sparklog-demo-"))
    chart = Path(args.chart).resolve()
    report = Report()
    spark = None
    wall = time.perf_counter()
    console.print(f"[bold]sparklog demo[/bold]: ZooKeeper + {args.brokers} live brokers + 1 offline broker under {base}")
    replication = args.replication_factor or min(3, args.brokers)
    topic_config = {"min.insync.replicas": min(2, replication)}
    live_overrides = {"zookeeper.session.timeout.ms": LIVE_SESSION_TIMEOUT_MS}
    secure = SecureDemo.make(base / "pki") if args.secure else None
    security = secure.client_settings() if secure else None
    broker_security = secure.broker_overrides() if secure else {}
    try:
        with LocalCluster(base / "live", brokers=args.brokers, overrides={**live_overrides, **broker_security},
                          zookeepers=args.zookeepers, before_brokers=secure.store_user if secure else None) as cluster, \
                offline_cluster(cluster.zookeeper, base, secure) as offline:
            offline_zk = f"{cluster.zookeeper}/offline"
            report.facts["live cluster"] = f"ZooKeeper {cluster.zookeeper}, brokers {cluster.bootstrap}"
            report.facts["offline cluster"] = f"ZooKeeper {offline_zk}, broker {offline.bootstrap}"
            ensure_topic(cluster.zookeeper, ACTIVITY_TOPIC, args.partitions, replication, topic_config, security)
            ensure_topic(cluster.zookeeper, MONITORING_TOPIC, 1, replication, topic_config, security)
            report.facts["replication"] = (f"{replication} replicas per partition, min.insync.replicas "
                                           f"{topic_config['min.insync.replicas']}, producers acks=all")
            bounce = None
            if not args.no_kill and replication > 1:
                bounce = BrokerBounce(cluster, ACTIVITY_TOPIC, int(args.events * KILL_AT))
            columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn())
            with Progress(*columns, console=console) as progress:
                step, producers = produce(cluster.zookeeper, args.events, args.partitions, args.rate, progress,
                                          on_progress=bounce.observe if bounce else None, security=security)
                report.steps.append(step)
                if bounce is not None:
                    report.facts["broker failure"] = bounce.restart()
                    report.check(bounce.victim is not None, "no broker was killed while the producers ran")
                produced = step.messages
                report.check(produced == args.events, f"produced {produced} of {args.events}")
                step, members = consume_group(cluster.zookeeper, produced, progress, security)
                report.steps.append(step)
                report.check(step.messages == produced, f"the group consumed {step.messages} of {produced}")
                if not args.no_spark:
                    spark = spark_session(base)
                    spark_steps(spark, cluster.zookeeper, offline_zk, base, produced, chart, report, progress,
                                security)
            if secure is not None:
                report_security(report, cluster.zookeeper, offline_zk)
            for name, seen in sorted(members.items()):
                report.facts[name] = f"partitions {sorted(seen)}: {sum(seen.values()):,} messages"
            stored = log_bytes(base) / replication
            report.facts["on disk"] = (f"{stored / max(produced, 1):.1f} bytes per event and replica "
                                       "(Avro in lz4 batches)")
            if spark is not None:
                spark.stop()
                spark = None
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: everything started has been stopped[/yellow]")
        return 130
    finally:
        if spark is not None:
            spark.stop()
        if not args.dir:
            shutil.rmtree(base, ignore_errors=True)
    print_summary(console, report, time.perf_counter() - wall)
    return 1 if report.failures else 0


def offline_cluster(zookeeper: str, base: Path, secure):
    """The offline cluster's one broker (its own ZooKeeper chroot), not started; with `--secure` it is secured as
    the live one and the demo's user is stored there first."""
    from sparklog.broker.launcher import Cluster

    connect = f"{zookeeper}/offline"
    if secure is not None:
        secure.store_user(connect)
    return Cluster(connect, base / "offline", brokers=1, first_id=101,
                   overrides=secure.broker_overrides() if secure else None)


def report_security(report: Report, *zookeepers: str) -> None:
    """`--secure`: every endpoint the clusters registered is SASL_SSL (jobs/secure.py Rule 4)."""
    from jobs.secure import MECHANISM, PROTOCOL, USER, plaintext_endpoints

    others = [endpoint for zookeeper in zookeepers for endpoint in plaintext_endpoints(zookeeper)]
    report.facts["security"] = (f"every broker listener {PROTOCOL} ({MECHANISM} as User:{USER}, TLS with the "
                                f"demo's own CA), ACL authorizer; endpoints not {PROTOCOL}: {len(others)}")
    report.check(not others, f"endpoints not {PROTOCOL}: {', '.join(others)}")


def print_summary(console, report: Report, wall_seconds: float) -> None:
    from rich.table import Table

    table = Table(title=f"sparklog demo ({wall_seconds:.0f}s wall)")
    for column in ("step", "messages", "seconds", "msg/s"):
        table.add_column(column, justify="left" if column == "step" else "right")
    for step in report.steps:
        table.add_row(step.name, f"{step.messages:,}", f"{step.seconds:.2f}", f"{step.rate:,.0f}")
    console.print(table)
    for key, value in report.facts.items():
        console.print(f"  {key}: {value}")
    for failure in report.failures:
        console.print(f"[red]FAILED: {failure}[/red]")
    if not report.failures:
        console.print("[green]all checks passed: produced = consumed = loaded = audited = mirrored exactly once[/green]")
