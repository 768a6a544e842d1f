"""The activity events and monitoring events of the pipeline: Avro schemas, subjects and a generator.

Activity events are what LinkedIn's front ends published (the paper, section 4): page views, clicks and
searches, each with the member, session, page, user agent and an event-time timestamp, plus the `server`
(the producer) that published it — the audit groups by it. Monitoring events are the audit's counts: per
producer, topic and fixed event-time window, how many events that producer published.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Iterator

ACTIVITY_TOPIC = "activity"
MONITORING_TOPIC = "monitoring"
WINDOW_MS = 60_000  # the audit's fixed time window: one minute of event time

KINDS = ("page_view", "click", "search")
KIND_WEIGHTS = (0.7, 0.2, 0.1)
PAGES = ("/", "/feed", "/jobs", "/jobs/view", "/in/profile", "/messaging", "/notifications", "/search/results",
         "/company", "/learning", "/groups", "/settings")
AGENTS = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0 Safari/537.36",
    "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
    "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 Mobile/15E148",
    "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:127.0) Gecko/20100101 Firefox/127.0",
    "LinkedInApp/9.30 (Android 14; Pixel 8)",
)
QUERIES = ("data engineer", "spark streaming", "kafka", "python jobs", "remote", "machine learning", "zookeeper")
MEMBERS = 20_000

ACTIVITY_SCHEMA = {
    "type": "record", "name": "ActivityEvent", "namespace": "sparklog.events",
    "doc": "One member action on a front-end page.",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": list(KINDS)}},
        {"name": "member_id", "type": "long"},
        {"name": "session_id", "type": "string"},
        {"name": "page", "type": "string"},
        {"name": "referrer", "type": ["null", "string"], "default": None},
        {"name": "target", "type": ["null", "string"], "default": None},
        {"name": "query", "type": ["null", "string"], "default": None},
        {"name": "user_agent", "type": "string"},
        {"name": "server", "type": "string"},
        {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
MONITORING_SCHEMA = {
    "type": "record", "name": "MonitoringEvent", "namespace": "sparklog.audit",
    "doc": "How many events one producer published to one topic in one event-time window.",
    "fields": [
        {"name": "producer", "type": "string"},
        {"name": "topic", "type": "string"},
        {"name": "window_start", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "window_ms", "type": "long"},
        {"name": "count", "type": "long"},
    ],
}


def subject(topic: str) -> str:
    """The registry subject of a topic's values, as Confluent's TopicNameStrategy names it."""
    return f"{topic}-value"


def window_start(timestamp_ms: int, window_ms: int = WINDOW_MS) -> int:
    return timestamp_ms - timestamp_ms % window_ms


@dataclass(frozen=True)
class Event:
    """One activity event as a dict for Avro (`record`), with its key."""

    key: bytes
    record: dict

    @property
    def timestamp(self) -> int:
        return self.record["timestamp"]


def make_events(count: int, server: str, start_ms: int, span_ms: int, seed: int = 7) -> Iterator[Event]:
    """`count` events with event times spread evenly over `[start_ms, start_ms + span_ms)`, deterministic
    for a seed: the same arguments give the same events (tests compare against a regenerated set)."""
    rng = random.Random(f"{seed}/{server}")
    step = span_ms / max(count, 1)
    sessions: dict[int, tuple[str, str]] = {}
    for i in range(count):
        member = rng.randrange(MEMBERS)
        session, agent = sessions.setdefault(member, (f"{server}-{member}-{rng.randrange(10**6):06d}", rng.choice(AGENTS)))
        kind = rng.choices(KINDS, KIND_WEIGHTS)[0]
        page = rng.choice(PAGES)
        record = {
            "event_id": f"{server}-{seed}-{i}",
            "kind": kind,
            "member_id": member,
            "session_id": session,
            "page": "/search/results" if kind == "search" else page,
            "referrer": rng.choice((None, "/feed", "/", "https://www.google.com/")),
            "target": f"button:{rng.choice(('apply', 'connect', 'like', 'share'))}" if kind == "click" else None,
            "query": rng.choice(QUERIES) if kind == "search" else None,
            "user_agent": agent,
            "server": server,
            "timestamp": start_ms + int(i * step),
        }
        yield Event(str(member).encode(), record)


def checksum(event_ids) -> int:
    """Order-independent checksum of a set of event ids: the sum of their CRC-32s (Spark's `crc32`)."""
    return sum(zlib.crc32(e.encode("utf-8")) for e in event_ids)
