"""The driver's view of the cluster: which partitions a subscription covers and their offsets.

Rule 1: `OffsetOracle` is the only driver-side object that talks to brokers and ZooKeeper; readers create it
lazily and never pickle it (the planner and Spark's workers get fresh reader copies).
Rule 2: `resolve()` turns an `OffsetSpec` ("earliest", "latest", JSON offsets with -2/-1, timestamps) into
concrete offsets for every partition, with the rules and messages of Spark's Kafka source; a broker that
cannot answer is retried `fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Mapping, TypeVar

from sparklog.datasource.options import (
    EARLIEST,
    LATEST,
    ConnectionOptions,
    OffsetSpec,
    ReadOptions,
    SparklogOptionError,
    Subscription,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]


class OffsetLookupError(RuntimeError):
    """A timestamp matched no record and `startingOffsetsByTimestampStrategy` is "error"."""


def bootstrap_servers(connection: ConnectionOptions, zk=None) -> str:
    """`bootstrap.servers`, or the live brokers registered in ZooKeeper (`zookeeper.connect`)."""
    if connection.bootstrap_servers:
        return connection.bootstrap_servers
    from sparklog.coordination.brokers import live_brokers
    from sparklog.coordination.connection import close, connect

    own = zk is None
    zk = zk or connect(connection.zookeeper_connect, timeout=connection.zookeeper_timeout_ms / 1000)
    try:
        brokers = live_brokers(zk)
    finally:
        if own:
            close(zk)
    if not brokers:
        raise ConnectionError(f"no live broker is registered in ZooKeeper at {connection.zookeeper_connect}")
    return ",".join(f"{b.host}:{b.port}" for _, b in sorted(brokers.items()))


def with_retries(fn: Callable[[], T], retries: int, interval_ms: int, what: str) -> T:
    """Call `fn`, retrying on any error `retries` times (Spark's fetchOffset.numRetries semantics)."""
    for attempt in range(retries + 1):
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - the last error is re-raised below
            if attempt == retries:
                raise
            logger.warning("%s failed (attempt %d of %d): %s", what, attempt + 1, retries + 1, exc)
            time.sleep(interval_ms / 1000)
    raise AssertionError("unreachable")


class OffsetOracle:
    """Partitions and offsets from the cluster, through ZooKeeper (if configured) and a client Consumer."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._zk = None
        self._consumer = None
        self._servers: str | None = None

    # -- connections

    def zookeeper(self):
        if self._zk is None and self.options.connection.zookeeper_connect:
            from sparklog.coordination.connection import connect

            c = self.options.connection
            self._zk = connect(c.zookeeper_connect, timeout=c.zookeeper_timeout_ms / 1000)
        return self._zk

    def bootstrap(self) -> str:
        self._servers = bootstrap_servers(self.options.connection, self.zookeeper())
        return self._servers

    def consumer(self):
        if self._consumer is None:
            from sparklog.client.consumer import Consumer

            settings = dict(self.options.connection.settings)
            self._consumer = Consumer(bootstrap_servers=self.bootstrap(), **settings)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
        if self._zk is not None:
            from sparklog.coordination.connection import close

            close(self._zk)
            self._zk = None

    # -- queries

    def topics(self) -> dict[str, int]:
        """Every topic with its partition count."""
        zk = self.zookeeper()
        if zk is not None:
            from sparklog.coordination.topics import UnknownTopic, get_topic, list_topics

            result = {}
            for name in list_topics(zk):
                try:
                    result[name] = len(get_topic(zk, name).partitions)
                except UnknownTopic:
                    continue  # deleted while we listed
            return result
        raise SparklogOptionError(
            "Option 'subscribePattern' needs 'zookeeper.connect': topics are listed from the topic registry"
        )

    def _topic_partitions(self, topic: str) -> int:
        from sparklog.client.errors import UnknownTopic

        try:
            return len(self.consumer().partitions_for_topic(topic, timeout=self.options.poll_timeout_ms / 1000))
        except UnknownTopic:
            return 0  # as Spark's Kafka source: a subscribed topic that does not exist yet has no partitions

    def partitions(self, subscription: Subscription) -> list[TopicPartition]:
        """The partitions a subscription covers now, sorted (assign: exactly the assigned ones)."""
        if subscription.kind == "assign":
            return list(subscription.partitions)
        if subscription.kind == "subscribe" and self.zookeeper() is None:
            topics = {t: self._topic_partitions(t) for t in subscription.topics}
        else:
            topics = self.topics()
        return sorted(
            (topic, p) for topic, count in topics.items() if subscription.matches(topic) for p in range(count)
        )

    def _retrying(self, fn: Callable[[], T], what: str) -> T:
        return with_retries(fn, self.options.fetch_offset_num_retries, self.options.fetch_offset_retry_interval_ms, what)

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        return dict(self._retrying(lambda: self.consumer().beginning_offsets(tps), "fetching earliest offsets")) if tps else {}

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        return dict(self._retrying(lambda: self.consumer().end_offsets(tps), "fetching latest offsets")) if tps else {}

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        if not timestamps:
            return {}
        found = self._retrying(lambda: self.consumer().offsets_for_times(dict(timestamps)), "fetching offsets by time")
        return {tp: _offset_of(found.get(tp)) for tp in timestamps}


def _offset_of(value) -> int | None:
    """offsets_for_times may answer an int, an (offset, timestamp) pair, an object with `.offset`, or None."""
    if value is None:
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, tuple):
        return value[0] if value[0] >= 0 else None
    offset = getattr(value, "offset", None)
    return offset if offset is not None and offset >= 0 else None


def resolve(
    spec: OffsetSpec, tps: list[TopicPartition], oracle, *, strategy: str = "error", is_start: bool = True
) -> dict[TopicPartition, int]:
    """Concrete offsets for `tps` (Rule 2). `oracle` needs earliest/latest/offsets_for_times."""
    name = "startingOffsets" if is_start else "endingOffsets"
    if spec.kind == "earliest":
        return oracle.earliest(tps)
    if spec.kind == "latest":
        return oracle.latest(tps)
    if spec.kind == "offsets":
        wanted = spec.by_partition
        if set(wanted) != set(tps):
            raise SparklogOptionError(
                f"If {name} contains specific offsets, you must specify all TopicPartitions.\n"
                f"Use -1 for latest, -2 for earliest.\n"
                f"Specified: {sorted(wanted)} Assigned: {sorted(tps)}"
            )
        earliest = oracle.earliest([tp for tp, o in wanted.items() if o == EARLIEST])
        latest = oracle.latest([tp for tp, o in wanted.items() if o == LATEST])
        return {tp: earliest[tp] if o == EARLIEST else latest[tp] if o == LATEST else o for tp, o in sorted(wanted.items())}
    if spec.kind == "timestamp":
        timestamps = {tp: spec.timestamp for tp in tps}
    else:
        timestamps = spec.by_partition
        if set(timestamps) != set(tps):
            raise SparklogOptionError(
                f"If {name}ByTimestamp contains specific timestamps, you must specify all TopicPartitions.\n"
                f"Specified: {sorted(timestamps)} Assigned: {sorted(tps)}"
            )
    found = oracle.offsets_for_times(timestamps)
    missing = [tp for tp in tps if found.get(tp) is None]
    if missing and is_start and strategy == "error":
        tp = missing[0]
        raise OffsetLookupError(
            f"No offset matched from request of topic-partition {tp[0]}-{tp[1]} and timestamp {timestamps[tp]}."
        )
    latest = oracle.latest(missing)  # no record at or after the timestamp: the end of the partition
    return {tp: found[tp] if found.get(tp) is not None else latest[tp] for tp in sorted(tps)}
