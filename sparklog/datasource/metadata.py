"""The driver's view of the cluster: which partitions a subscription covers and their offsets.

Rule 1: `OffsetOracle` is the only driver-side object that talks to brokers and ZooKeeper; readers create it
lazily and never pickle it (the planner and Spark's workers get fresh reader copies).
Rule 2: `resolve()` turns an `OffsetSpec` ("earliest", "latest", JSON offsets with -2/-1, timestamps) into
concrete offsets for every partition, with the rules and messages of Spark's Kafka source; a broker that
cannot answer is retried `fetchOffset.numRetries` times, `fetchOffset.retryIntervalMs` apart.
Rule 3: partitions come from a Metadata request through the brokers (as Spark's source asks its AdminClient),
which never creates a topic; ZooKeeper is needed only to find brokers when no `bootstrap.servers` is given.
Rule 4: "could not reach it" is never "no data". Every lookup ends by `kafkaConsumer.pollTimeoutMs` with an
error that names what failed: `BrokerUnreachable` (no broker answered), `TopicNotFound` (a subscribed topic
does not exist, unless `sparklog.waitForTopics`), `LeaderNotAvailable` (a partition's leader is down).
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Iterable, Mapping, TypeVar

from sparklog.client.sasl import SaslAuthenticationError
from sparklog.datasource.errors import AuthenticationFailed
from sparklog.datasource.options import (
    EARLIEST,
    LATEST,
    ConnectionOptions,
    OffsetSpec,
    ReadOptions,
    SparklogOptionError,
    Subscription,
)
from sparklog.datasource.security import security_of

logger = logging.getLogger(__name__)

T = TypeVar("T")
TopicPartition = tuple[str, int]

UNKNOWN_TOPIC_OR_PARTITION = 3  # Kafka's error code for a topic the cluster does not have
METADATA_RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms default: between metadata asks for a missing leader
# Settings of the client's connection that also shape the driver's metadata client.
_ADMIN_SETTINGS = ("client.id", "socket.connection.setup.timeout.ms", "receive.message.max.bytes")


class OffsetLookupError(RuntimeError):
    """A timestamp matched no record and `startingOffsetsByTimestampStrategy` is "error"."""


class BrokerUnreachable(ConnectionError):
    """No broker answered a metadata or offset lookup within kafkaConsumer.pollTimeoutMs (Rule 4)."""


class TopicNotFound(LookupError):
    """A subscribed or assigned topic does not exist and `sparklog.waitForTopics` is false (Rule 4)."""

    def __init__(self, message: str, topics: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.topics = topics


class LeaderNotAvailable(RuntimeError):
    """Partitions the query covers have no live leader after kafkaConsumer.pollTimeoutMs (Rule 4)."""


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
        raise BrokerUnreachable(
            f"No live broker is registered in ZooKeeper at {connection.zookeeper_connect}: start a broker, "
            "or set 'kafka.bootstrap.servers'")
    return ",".join(f"{b.host}:{b.port}" for _, b in sorted(brokers.items()))


def with_retries(fn: Callable[[float], T], retries: int, interval_ms: int, what: str, deadline: float) -> T:
    """Call `fn(seconds left)`, retrying on any error `retries` times (Spark's fetchOffset.numRetries) while
    `deadline` (kafkaConsumer.pollTimeoutMs) allows; the last error is raised."""
    attempt = 0
    while True:
        try:
            return fn(max(0.01, deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - the last error is re-raised below
            if attempt >= retries or time.monotonic() + interval_ms / 1000 >= deadline:
                raise
            attempt += 1
            logger.warning("%s failed (attempt %d of %d): %s", what, attempt, retries + 1, exc)
            time.sleep(interval_ms / 1000)


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps))


class OffsetOracle:
    """Partitions and offsets from the cluster, through the brokers (ZooKeeper only to find them)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self._zk = None
        self._consumer = None
        self._admin = None
        self._servers: str | None = None

    # -- connections

    def zookeeper(self):
        if self._zk is None and self.options.connection.zookeeper_connect:
            from sparklog.coordination.connection import connect

            c = self.options.connection
            self._zk = connect(c.zookeeper_connect, timeout=c.zookeeper_timeout_ms / 1000)
        return self._zk

    def bootstrap(self) -> str:
        if self._servers is None or not self.options.connection.bootstrap_servers:
            self._servers = bootstrap_servers(self.options.connection, self.zookeeper())
        return self._servers

    def consumer(self):
        if self._consumer is None:
            from sparklog.client.consumer import Consumer

            settings = dict(self.options.connection.settings)
            self._consumer = Consumer(bootstrap_servers=self.bootstrap(), **settings)
        return self._consumer

    def admin(self):
        if self._admin is None:
            from sparklog.client.kafka_groups import KafkaGroupAdmin  # an AdminClient that also commits offsets

            connection = self.options.connection.settings
            settings = {**{k: v for k, v in connection if k in _ADMIN_SETTINGS}, **security_of(connection)}
            self._admin = KafkaGroupAdmin(self.bootstrap(), **{**settings, "request.timeout.ms": self.options.poll_timeout_ms})
        return self._admin

    def close(self) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                client.close()
        self._consumer = self._admin = None
        if self._zk is not None:
            from sparklog.coordination.connection import close

            close(self._zk)
            self._zk = None

    def _deadline(self) -> float:
        return time.monotonic() + self.options.poll_timeout_ms / 1000

    def _unreachable(self, what: str, exc: BaseException) -> BrokerUnreachable:
        return BrokerUnreachable(
            f"Could not reach the brokers at {self._servers or self.options.connection.zookeeper_connect} for "
            f"{what} within kafkaConsumer.pollTimeoutMs={self.options.poll_timeout_ms} ms: {exc}. Check "
            "'kafka.bootstrap.servers' and that the brokers are running.")

    # -- metadata (Rules 3 and 4)

    def _view(self, topics: list[str] | None, deadline: float) -> dict[str, tuple[int, dict[int, bool]]]:
        """{topic: (error code, {partition: has a live leader})} of `topics` (all when None)."""
        try:
            response = self.admin().metadata(topics, timeout=max(0.01, deadline - time.monotonic()))
        except SaslAuthenticationError as exc:
            raise AuthenticationFailed(exc) from None
        except (TimeoutError, ConnectionError, OSError) as exc:
            raise self._unreachable("metadata", exc) from exc
        live = {b.node_id for b in response.brokers}
        return {t.name: (t.error_code, {p.partition_index: p.leader_id in live for p in t.partitions})
                for t in response.topics if not t.is_internal}

    def partitions(self, subscription: Subscription, missing_ok: bool = False) -> list[TopicPartition]:
        """The partitions a subscription covers now, sorted, each with a live leader (Rule 4); `missing_ok`:
        a missing topic covers none (a running query's deleted topic, once reported as data loss)."""
        deadline = self._deadline()
        asked = None if subscription.kind == "subscribePattern" else sorted(_topics_of(subscription))
        while True:
            view = self._view(asked, deadline)
            tps, waiting = self._covered(subscription, view, missing_ok)
            if not waiting:
                return tps
            if time.monotonic() + METADATA_RETRY_BACKOFF_S > deadline:
                raise LeaderNotAvailable(
                    f"Partitions {_names(waiting)} have no live leader after kafkaConsumer.pollTimeoutMs="
                    f"{self.options.poll_timeout_ms} ms (their broker is down or unreachable): restart that "
                    "broker, or raise kafkaConsumer.pollTimeoutMs to wait longer")
            time.sleep(METADATA_RETRY_BACKOFF_S)

    def _covered(self, subscription: Subscription, view, missing_ok: bool = False
                 ) -> tuple[list[TopicPartition], list[TopicPartition]]:
        """(partitions covered, those still without a live leader); raises TopicNotFound (Rule 4)."""
        missing = sorted(t for t, (error, _) in view.items()
                         if error == UNKNOWN_TOPIC_OR_PARTITION and subscription.matches(t))
        if missing and not (self.options.wait_for_topics or missing_ok):
            raise TopicNotFound(
                f"Topic {', '.join(missing)} does not exist at {self._servers}: create it first, or set the "
                "option 'sparklog.waitForTopics' to 'true' to read it once it appears", tuple(missing))
        tps, waiting = [], []
        for topic, (error, leaders) in sorted(view.items()):
            if error == UNKNOWN_TOPIC_OR_PARTITION or not subscription.matches(topic):
                continue
            if error:  # e.g. LEADER_NOT_AVAILABLE while a topic is being created
                waiting.append((topic, -1))
                continue
            tps.extend((topic, p) for p in sorted(leaders))
            waiting.extend((topic, p) for p, has_leader in sorted(leaders.items()) if not has_leader)
        if subscription.kind == "assign":
            _check_assigned(subscription, view)
            tps = [tp for tp in tps if tp in subscription.partitions]
            waiting = [tp for tp in waiting if tp in subscription.partitions or tp[1] == -1]
        return tps, waiting

    # -- offsets

    def _retrying(self, fn: Callable[[float], T], what: str) -> T:
        try:
            return with_retries(fn, self.options.fetch_offset_num_retries, self.options.fetch_offset_retry_interval_ms,
                                what, self._deadline())
        except SaslAuthenticationError as exc:
            raise AuthenticationFailed(exc) from None
        except (TimeoutError, ConnectionError, LookupError) as exc:
            raise self._unreachable(what, exc) from exc

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        if not tps:
            return {}
        return dict(self._retrying(lambda t: self.consumer().beginning_offsets(tps, timeout=t),
                                   f"the earliest offsets of {_names(tps)}"))

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        tps = list(tps)
        if not tps:
            return {}
        return dict(self._retrying(lambda t: self.consumer().end_offsets(tps, timeout=t),
                                   f"the latest offsets of {_names(tps)}"))

    def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]) -> dict[TopicPartition, int | None]:
        if not timestamps:
            return {}
        found = self._retrying(lambda t: self.consumer().offsets_for_times(dict(timestamps), timeout=t),
                               f"the offsets by time of {_names(timestamps)}")
        return {tp: _offset_of(found.get(tp)) for tp in timestamps}


def _topics_of(subscription: Subscription) -> set[str]:
    if subscription.kind == "subscribe":
        return set(subscription.topics)
    return {t for t, _ in subscription.partitions}


def _check_assigned(subscription: Subscription, view) -> None:
    """An assigned partition the topic does not have is a mistake in `assign`, not an empty partition."""
    for topic, partition in subscription.partitions:
        error, leaders = view.get(topic, (UNKNOWN_TOPIC_OR_PARTITION, {}))
        if not error and partition not in leaders:
            raise SparklogOptionError(
                f"Partition {topic}-{partition} is assigned but topic {topic} has {len(leaders)} partitions: "
                "fix the option 'assign'")


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
