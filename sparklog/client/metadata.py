"""The client's view of the cluster (design notes 4.4): brokers, and each partition's leader, from Metadata.

Rule 1: the view is replaced whole by each Metadata response for the topics it names (no partial merges of
one topic), and `version` increases with each update so that waiters can tell a fresh answer from an old one.
Rule 2: a refresh is asked for (`request_update`) on NOT_LEADER_OR_FOLLOWER, unknown topics or partitions,
lost connections and new topics; the I/O thread sends it; other threads wait with `wait_for(version)`.
Rule 3: refreshes asked for in a row are spaced by the retry backoff (backoff.py), which grows with each
failed refresh and starts again from `retry.backoff.ms` after an answer. A new topic is not a refresh in a
row: it is due at once, and an answer that does not name it (asked before it was added) asks again at once;
otherwise every new consumer or producer waited out one backoff (~0.1 s per Spark task) for its first topic.
"""

from __future__ import annotations

import threading
import time

from sparklog.client.backoff import ExponentialBackoff
from sparklog.protocol import ApiKey, MetadataRequest, MetadataRequestTopic, for_code

METADATA_VERSION = 8  # highest Metadata version of the shared codec
NO_LEADER = -1
REFRESH_BACKOFF = ExponentialBackoff(100, 1_000)  # Kafka's retry.backoff.ms and retry.backoff.max.ms


class ClusterMetadata:
    """Brokers, topics and leaders; written by the I/O thread, read by any."""

    def __init__(self, max_age_ms: float = 300_000, backoff: ExponentialBackoff = REFRESH_BACKOFF) -> None:
        self.backoff = backoff
        self.failures = 0  # failed refreshes in a row (Rule 3)
        self.next_attempt = 0.0
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}  # (topic, partition) -> leader id, -1 if none
        self.partition_counts: dict[str, int] = {}
        self.topic_errors: dict[str, BaseException] = {}
        self.topics: set[str] = set()  # topics the client needs
        self.version = 0
        self.max_age = max_age_ms / 1000.0
        self.last_refresh = 0.0
        self.need_update = True
        self.in_progress = False
        self._changed = threading.Condition()

    @classmethod
    def from_config(cls, config: dict) -> "ClusterMetadata":
        return cls(config["metadata.max.age.ms"], ExponentialBackoff.retry(config))

    def add_topic(self, topic: str) -> None:
        if topic not in self.topics:
            self.topics.add(topic)
            self.need_update = True
            self.next_attempt = 0.0  # Rule 3: never asked for, so not a retry

    def request_update(self) -> int:
        """Ask for a refresh; returns the version a waiter should wait to pass."""
        self.need_update = True
        return self.version

    def due(self, now: float) -> bool:
        """Time to send a Metadata request: asked for (spaced by the backoff, Rule 3) or too old."""
        if self.in_progress:
            return False
        if self.need_update:
            return now >= self.next_attempt
        return now - self.last_refresh > self.max_age

    def request(self) -> MetadataRequest:
        topics = [MetadataRequestTopic(name=t) for t in sorted(self.topics)]
        return MetadataRequest(topics=topics, allow_auto_topic_creation=True)

    def update(self, response) -> None:
        """Apply a Metadata response (I/O thread)."""
        brokers = {b.node_id: (b.host, b.port) for b in response.brokers}
        leaders = dict(self.leaders)
        counts = dict(self.partition_counts)
        errors = {}
        for topic in response.topics:
            for key in [k for k in leaders if k[0] == topic.name]:
                del leaders[key]
            if topic.error_code:
                errors[topic.name] = for_code(topic.error_code)(f"topic {topic.name}")
                counts.pop(topic.name, None)
                continue
            for p in topic.partitions:
                leaders[(topic.name, p.partition_index)] = p.leader_id if p.leader_id in brokers else NO_LEADER
            counts[topic.name] = len(topic.partitions)
        with self._changed:
            self.brokers, self.leaders, self.partition_counts, self.topic_errors = brokers, leaders, counts, errors
            self.last_refresh = time.monotonic()
            self.failures = 0
            unanswered = not self.topics <= {t.name for t in response.topics}  # added while it was in flight
            self.need_update = any(leader == NO_LEADER for leader in leaders.values()) or bool(errors) or unanswered
            if unanswered:
                self.next_attempt = 0.0  # Rule 3
            self.in_progress = False
            self.version += 1
            self._changed.notify_all()

    def failed(self) -> None:
        with self._changed:
            self.failures += 1
            self.in_progress = False
            self.need_update = True
            self._changed.notify_all()

    def wait_for(self, version: int, timeout: float) -> bool:
        """Block until an update newer than `version` arrives (or `timeout` passes)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.version <= version:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
        return True

    def leader(self, topic: str, partition: int) -> int:
        return self.leaders.get((topic, partition), NO_LEADER)


def send_metadata_request(client, metadata: ClusterMetadata, node_id: int | None = None) -> None:
    """Send a Metadata request from the I/O thread; the response updates `metadata`."""
    if node_id is None:
        node_id = client.least_loaded_node()
    if node_id is None:
        return
    metadata.in_progress = True
    metadata.next_attempt = time.monotonic() + metadata.backoff.delay(metadata.failures)

    def on_response(future) -> None:
        if future.error is not None:
            metadata.failed()
        else:
            client.set_nodes({b.node_id: (b.host, b.port) for b in future.value.brokers})
            metadata.update(future.value)

    client.submit(node_id, ApiKey.METADATA, METADATA_VERSION, metadata.request(), callback=on_response,
                  wake=False)
