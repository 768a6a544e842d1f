"""Generate activity events (page views, clicks, searches) as framed Avro and produce them to a sparklog
cluster at a chosen rate, with the audit's monitoring events (the paper, section 4).

    python -m jobs.generate_events --zookeeper localhost:2181 --events 100000 --rate 5000

Rule 1: the schemas are registered (subjects `<topic>-value`) before the first event is sent, and every
value carries its schema id in the framing.
Rule 2: the monitoring counts are what this producer *published*: for every event-time window, one
monitoring event (producer, topic, window start, count) is sent when the window closes and the last one at
the end. `lose=N` counts N events that are never sent — a planted loss the audit must find.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as `python jobs/generate_events.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.common import DEFAULT_PARTITIONS, ensure_topic  # noqa: E402
from jobs.events import (  # noqa: E402
    ACTIVITY_SCHEMA, ACTIVITY_TOPIC, MONITORING_SCHEMA, MONITORING_TOPIC, WINDOW_MS, checksum, make_events,
    subject, window_start,
)

PRODUCER_SETTINGS = {"linger.ms": 10, "compression.type": "lz4", "acks": "all"}
DEFAULT_SPAN_MS = 10 * 60_000  # event times cover the last ten minutes
PROGRESS_EVERY = 1_000


@dataclass
class GenerateReport:
    server: str
    topic: str
    sent: int = 0
    lost: int = 0  # counted in the monitoring events, never sent (planted)
    failed: int = 0  # sent but not acknowledged
    seconds: float = 0.0
    windows: Counter = field(default_factory=Counter)  # window start ms -> events counted
    checksum: int = 0  # jobs.events.checksum of the event ids actually sent
    schema_id: int = 0

    @property
    def rate(self) -> float:
        return self.sent / self.seconds if self.seconds else 0.0


def generate(zookeeper: str, events: int, *, bootstrap: str | None = None, rate: float | None = None,
             topic: str = ACTIVITY_TOPIC, monitoring_topic: str = MONITORING_TOPIC, server: str = "frontend-1",
             start_ms: int | None = None, span_ms: int = DEFAULT_SPAN_MS, window_ms: int = WINDOW_MS,
             seed: int = 7, lose: int = 0, partitions: int = DEFAULT_PARTITIONS, progress=None,
             security: dict | None = None) -> GenerateReport:
    """Produce `events` activity events and their monitoring counts; see the module rules.

    `rate` is events per second (None: as fast as the producer goes); `progress(n)` is called as events go;
    `security` is the producer's security settings (librdkafka's names; `sparklog demo --secure`).
    """
    from sparklog.client import Producer
    from sparklog.schemas import SchemaRegistry

    for name in (topic, monitoring_topic):
        ensure_topic(zookeeper, name, partitions, security=security)
    with SchemaRegistry.open(zookeeper) as registry:
        activity_id = registry.register_version(subject(topic), ACTIVITY_SCHEMA).schema_id
        monitoring_id = registry.register_version(subject(monitoring_topic), MONITORING_SCHEMA).schema_id
        encode = registry.encode
        start_ms = int(time.time() * 1000) - span_ms if start_ms is None else start_ms
        report = GenerateReport(server, topic, schema_id=activity_id)
        dropped = _planted_losses(events, lose)
        headers = [("server", server.encode())]
        futures = []
        producer = Producer(bootstrap_servers=bootstrap, zookeeper=zookeeper, **PRODUCER_SETTINGS, **(security or {}))
        try:
            started = time.perf_counter()
            open_window = None
            for i, event in enumerate(make_events(events, server, start_ms, span_ms, seed)):
                window = window_start(event.timestamp, window_ms)
                if open_window is not None and window != open_window:
                    futures.append(_monitor(producer, encode, monitoring_id, monitoring_topic, report, open_window, window_ms))
                open_window = window
                report.windows[window] += 1
                if i in dropped:
                    report.lost += 1
                else:
                    futures.append(producer.send(topic, encode(activity_id, event.record), key=event.key,
                                                 headers=headers, timestamp=event.timestamp))
                    report.sent += 1
                    report.checksum += checksum([event.record["event_id"]])
                if rate:
                    _pace(started, i + 1, rate)
                if progress is not None and (i + 1) % PROGRESS_EVERY == 0:
                    progress(i + 1)
            if open_window is not None:
                futures.append(_monitor(producer, encode, monitoring_id, monitoring_topic, report, open_window, window_ms))
            producer.flush()
            report.seconds = time.perf_counter() - started
        finally:
            producer.close()
    report.failed = sum(1 for f in futures if f.exception(0) is not None)
    if progress is not None:
        progress(events)
    return report


def _planted_losses(events: int, lose: int) -> set[int]:
    if lose <= 0:
        return set()
    step = max(events // lose, 1)
    return set(range(step // 2, events, step)[:lose])


def _monitor(producer, encode, schema_id: int, topic: str, report: GenerateReport, window: int, window_ms: int):
    """One monitoring event: this producer's count for `report.topic` in the window starting at `window`."""
    record = {"producer": report.server, "topic": report.topic, "window_start": window, "window_ms": window_ms,
              "count": report.windows[window]}
    return producer.send(topic, encode(schema_id, record), key=report.server.encode())


def _pace(started: float, done: int, rate: float) -> None:
    ahead = done / rate - (time.perf_counter() - started)
    if ahead > 0:
        time.sleep(ahead)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m jobs.generate_events", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--zookeeper", required=True, help="ZooKeeper connect string (brokers and the schema registry)")
    p.add_argument("--bootstrap", help="bootstrap servers (default: the brokers registered in ZooKeeper)")
    p.add_argument("--events", type=int, default=10_000, help="events to produce (%(default)s)")
    p.add_argument("--rate", type=float, help="events per second (default: as fast as possible)")
    p.add_argument("--topic", default=ACTIVITY_TOPIC, help="activity topic (%(default)s)")
    p.add_argument("--monitoring-topic", default=MONITORING_TOPIC, help="monitoring topic (%(default)s)")
    p.add_argument("--server", default="frontend-1", help="this producer's name, in events and counts (%(default)s)")
    p.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS, help="partitions of new topics (%(default)s)")
    p.add_argument("--span-minutes", type=float, default=DEFAULT_SPAN_MS / 60_000,
                   help="event times cover this many minutes up to now (%(default)s)")
    p.add_argument("--window-seconds", type=int, default=WINDOW_MS // 1000, help="audit window (%(default)s)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--lose", type=int, default=0, help="count N events but never send them (tests the audit)")
    return p


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    report = generate(args.zookeeper, args.events, bootstrap=args.bootstrap, rate=args.rate, topic=args.topic,
                      monitoring_topic=args.monitoring_topic, server=args.server,
                      span_ms=int(args.span_minutes * 60_000), window_ms=args.window_seconds * 1000,
                      seed=args.seed, lose=args.lose, partitions=args.partitions)
    print(f"{report.server}: sent {report.sent} events to {report.topic} in {report.seconds:.2f}s "
          f"({report.rate:,.0f}/s), {len(report.windows)} monitoring windows, schema id {report.schema_id}, "
          f"{report.failed} failed, {report.lost} planted losses")
    return 1 if report.failed else 0


if __name__ == "__main__":
    sys.exit(main())
