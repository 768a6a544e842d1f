"""Broker configuration from Kafka-named properties (a `.properties` file plus `key=value` overrides).

Rule 1: every key is spelled as Kafka's `server.properties` spells it; the broker-level `log.*` defaults are
mapped to the topic-level names the storage understands (`log.segment.bytes` -> `segment.bytes`, ...), and a
topic's `/config/topics/<t>` overrides are laid over those.
Rule 2: an unknown key is warned about, never fatal (Kafka does the same); a known key with a bad value is
a `ConfigError` naming the key.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from sparklog.broker.group_config import GROUP_KEYS, GroupConfig, GroupConfigError
from sparklog.storage.config import BROKER_KEYS as TOPIC_CONFIG_BROKER_KEYS
from sparklog.storage.cleaner_manager import CLEANER_KEYS
from sparklog.storage.scrubber import SCRUBBER_KEYS

log = logging.getLogger(__name__)

# Kafka's defaults, named as Kafka names them.
DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS = 18000  # zookeeper.session.timeout.ms
DEFAULT_NUM_PARTITIONS = 1  # num.partitions
DEFAULT_REPLICATION_FACTOR = 1  # default.replication.factor
DEFAULT_MESSAGE_MAX_BYTES = 1048588  # message.max.bytes (1 MiB + the 12-byte log overhead)
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104857600  # socket.request.max.bytes (100 MiB)
DEFAULT_FETCH_MAX_BYTES = 57671680  # fetch.max.bytes (55 MiB): cap of one Fetch response's records
DEFAULT_QUEUED_MAX_REQUESTS = 500  # queued.max.requests: here per connection, then reading pauses
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600000  # connections.max.idle.ms (10 minutes)
DEFAULT_MAX_CONNECTIONS = 2147483647  # max.connections
DEFAULT_MAX_CONNECTIONS_PER_IP = 2147483647  # max.connections.per.ip
# queued.max.request.bytes: bytes of partly received requests, over all connections, before reading pauses.
# Kafka's default is -1 (no limit); here an unset value means socket.request.max.bytes (one largest
# request), so hostile or slow clients cannot make the broker buffer without end.
QUEUED_MAX_REQUEST_BYTES_UNLIMITED = -1
# Partition limits, checked by CreateTopics before anything is written to ZooKeeper. Kafka has none by
# default (KIP-578's max.broker.partitions is unbounded); sparklog bounds them because every partition is
# open files and memory in this process. The per-topic bound also keeps the creation transaction under
# ZooKeeper's 1 MiB jute.maxbuffer.
DEFAULT_MAX_BROKER_PARTITIONS = 4000  # max.broker.partitions (KIP-578 name): replicas on one broker
DEFAULT_MAX_PARTITIONS_PER_TOPIC = 2000  # max.partitions.per.topic
DEFAULT_MAX_PARTITIONS_PER_REQUEST = 4000  # max.partitions.per.request: summed over a CreateTopics request
DEFAULT_LOG_RETENTION_CHECK_INTERVAL_MS = 300000  # log.retention.check.interval.ms
DEFAULT_LOG_FLUSH_SCHEDULER_INTERVAL_MS = 9223372036854775807  # log.flush.scheduler.interval.ms
DEFAULT_PORT = 9092
DEFAULT_MIN_INSYNC_REPLICAS = 1  # min.insync.replicas (a topic may override it)
DEFAULT_REPLICA_LAG_TIME_MAX_MS = 30000  # replica.lag.time.max.ms
DEFAULT_UNCLEAN_LEADER_ELECTION_ENABLE = False  # unclean.leader.election.enable (Kafka >= 0.11)
DEFAULT_AUTO_LEADER_REBALANCE_ENABLE = True  # auto.leader.rebalance.enable
DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS = 300  # leader.imbalance.check.interval.seconds
DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE = 10  # leader.imbalance.per.broker.percentage
DEFAULT_CONTROLLED_SHUTDOWN_ENABLE = True  # controlled.shutdown.enable
# controlled.shutdown.max.retries (3) x controlled.shutdown.retry.backoff.ms (5000): how long a stopping
# broker waits, at most, for the controller to move its leaderships away before it exits anyway.
DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS = 15000

# Broker-level key -> topic-level key of the storage's LogConfig (Kafka's LogConfig "synonyms": log.retention.ms
# -> retention.ms, compression.type -> compression.type, ...), from the storage's one table of topic configs.
LOG_KEY_TO_TOPIC_KEY = dict(TOPIC_CONFIG_BROKER_KEYS)
# Coarser spellings of the same settings, converted to milliseconds (the finer one wins, as in Kafka).
_COARSE_MS = {
    "log.retention.minutes": ("log.retention.ms", 60_000),
    "log.retention.hours": ("log.retention.ms", 3_600_000),
    "log.roll.hours": ("log.roll.ms", 3_600_000),
}

_BROKER_KEYS = {
    "broker.id",
    "listeners",
    "advertised.listeners",
    "listener.security.protocol.map",
    "log.dirs",
    "log.dir",
    "zookeeper.connect",
    "zookeeper.session.timeout.ms",
    "zookeeper.connection.timeout.ms",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "delete.topic.enable",
    "socket.request.max.bytes",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "fetch.max.bytes",
    "queued.max.requests",
    "connections.max.idle.ms",
    "max.connections",
    "max.connections.per.ip",
    "queued.max.request.bytes",
    "max.broker.partitions",
    "max.partitions.per.topic",
    "max.partitions.per.request",
    "log.retention.check.interval.ms",
    "log.flush.scheduler.interval.ms",
    "broker.rack",
    "min.insync.replicas",
    "replica.lag.time.max.ms",
    *SCRUBBER_KEYS,  # log.scrubber.*: read by the storage (ScrubberConfig.from_properties)
    *CLEANER_KEYS,  # log.cleaner.* broker settings: read by the storage (CleanerConfig.from_properties)
    "unclean.leader.election.enable",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
    "leader.imbalance.per.broker.percentage",
    "controlled.shutdown.enable",
    "controlled.shutdown.timeout.ms",
}
# Keys a stock server.properties carries that have no meaning here yet: accepted silently.
_IGNORED_KEYS = {
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "log.flush.offset.checkpoint.interval.ms",
}
KNOWN_KEYS = _BROKER_KEYS | set(LOG_KEY_TO_TOPIC_KEY) | set(_COARSE_MS) | _IGNORED_KEYS | GROUP_KEYS


class ConfigError(ValueError):
    """A known configuration key has a value the broker cannot use."""


@dataclass(frozen=True)
class Endpoint:
    """One listener: `PLAINTEXT://host:port`. An empty host binds every interface."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    listeners: tuple[Endpoint, ...]
    advertised_listeners: tuple[Endpoint, ...]
    log_dirs: tuple[str, ...]
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int = DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    default_replication_factor: int = DEFAULT_REPLICATION_FACTOR
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    socket_send_buffer_bytes: int = -1  # Kafka: 102400; -1 keeps the OS default (and Linux autotuning)
    socket_receive_buffer_bytes: int = -1
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    queued_max_requests: int = DEFAULT_QUEUED_MAX_REQUESTS
    connections_max_idle_ms: int = DEFAULT_CONNECTIONS_MAX_IDLE_MS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_ip: int = DEFAULT_MAX_CONNECTIONS_PER_IP
    queued_max_request_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES  # -1: no limit (Kafka's default)
    max_broker_partitions: int = DEFAULT_MAX_BROKER_PARTITIONS
    max_partitions_per_topic: int = DEFAULT_MAX_PARTITIONS_PER_TOPIC
    max_partitions_per_request: int = DEFAULT_MAX_PARTITIONS_PER_REQUEST
    log_retention_check_interval_ms: int = DEFAULT_LOG_RETENTION_CHECK_INTERVAL_MS
    log_flush_scheduler_interval_ms: int = DEFAULT_LOG_FLUSH_SCHEDULER_INTERVAL_MS
    rack: str | None = None
    min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    unclean_leader_election_enable: bool = DEFAULT_UNCLEAN_LEADER_ELECTION_ENABLE
    auto_leader_rebalance_enable: bool = DEFAULT_AUTO_LEADER_REBALANCE_ENABLE
    leader_imbalance_check_interval_seconds: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS
    leader_imbalance_per_broker_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE
    controlled_shutdown_enable: bool = DEFAULT_CONTROLLED_SHUTDOWN_ENABLE
    controlled_shutdown_timeout_ms: int = DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS
    # Topic-level defaults for the storage (`segment.bytes`, `retention.ms`, ...), from the log.* keys.
    log_defaults: Mapping[str, str] = field(default_factory=dict)
    raw: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "BrokerConfig":
        """Build from Kafka-named string properties; warns about unknown keys."""
        props = {k.strip(): str(v).strip() for k, v in props.items()}
        for key in sorted(set(props) - KNOWN_KEYS):
            log.warning("unknown broker configuration key %r ignored", key)
        broker_id = _int(props, "broker.id", None)
        if broker_id is None or broker_id < 0:
            raise ConfigError("broker.id must be set to a non-negative integer")
        listeners = parse_listeners(props.get("listeners") or f"PLAINTEXT://:{DEFAULT_PORT}")
        advertised = parse_listeners(props["advertised.listeners"]) if props.get("advertised.listeners") else ()
        log_dirs = props.get("log.dirs") or props.get("log.dir")
        if not log_dirs:
            raise ConfigError("log.dirs (or log.dir) must be set")
        zk = props.get("zookeeper.connect")
        if not zk:
            raise ConfigError("zookeeper.connect must be set")
        try:
            GroupConfig.from_properties(props)  # the coordinator reads it again from `raw`
        except GroupConfigError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            broker_id=broker_id,
            listeners=listeners,
            advertised_listeners=advertised,
            log_dirs=tuple(d.strip() for d in log_dirs.split(",") if d.strip()),
            zookeeper_connect=zk,
            zookeeper_session_timeout_ms=_int(props, "zookeeper.session.timeout.ms", DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS),
            num_partitions=_positive(props, "num.partitions", DEFAULT_NUM_PARTITIONS),
            default_replication_factor=_positive(props, "default.replication.factor", DEFAULT_REPLICATION_FACTOR),
            auto_create_topics_enable=_bool(props, "auto.create.topics.enable", True),
            delete_topic_enable=_bool(props, "delete.topic.enable", True),
            message_max_bytes=_positive(props, "message.max.bytes", DEFAULT_MESSAGE_MAX_BYTES),
            socket_request_max_bytes=_positive(props, "socket.request.max.bytes", DEFAULT_SOCKET_REQUEST_MAX_BYTES),
            socket_send_buffer_bytes=_int(props, "socket.send.buffer.bytes", -1),
            socket_receive_buffer_bytes=_int(props, "socket.receive.buffer.bytes", -1),
            fetch_max_bytes=_positive(props, "fetch.max.bytes", DEFAULT_FETCH_MAX_BYTES),
            queued_max_requests=_positive(props, "queued.max.requests", DEFAULT_QUEUED_MAX_REQUESTS),
            connections_max_idle_ms=_int(props, "connections.max.idle.ms", DEFAULT_CONNECTIONS_MAX_IDLE_MS),
            max_connections=_positive(props, "max.connections", DEFAULT_MAX_CONNECTIONS),
            max_connections_per_ip=_positive(props, "max.connections.per.ip", DEFAULT_MAX_CONNECTIONS_PER_IP),
            queued_max_request_bytes=_queued_max_request_bytes(props),
            max_broker_partitions=_positive(props, "max.broker.partitions", DEFAULT_MAX_BROKER_PARTITIONS),
            max_partitions_per_topic=_positive(props, "max.partitions.per.topic", DEFAULT_MAX_PARTITIONS_PER_TOPIC),
            max_partitions_per_request=_positive(
                props, "max.partitions.per.request", DEFAULT_MAX_PARTITIONS_PER_REQUEST),
            log_retention_check_interval_ms=_positive(
                props, "log.retention.check.interval.ms", DEFAULT_LOG_RETENTION_CHECK_INTERVAL_MS
            ),
            log_flush_scheduler_interval_ms=_positive(
                props, "log.flush.scheduler.interval.ms", DEFAULT_LOG_FLUSH_SCHEDULER_INTERVAL_MS
            ),
            rack=props.get("broker.rack") or None,
            min_insync_replicas=_positive(props, "min.insync.replicas", DEFAULT_MIN_INSYNC_REPLICAS),
            replica_lag_time_max_ms=_positive(props, "replica.lag.time.max.ms", DEFAULT_REPLICA_LAG_TIME_MAX_MS),
            unclean_leader_election_enable=_bool(props, "unclean.leader.election.enable",
                                                 DEFAULT_UNCLEAN_LEADER_ELECTION_ENABLE),
            auto_leader_rebalance_enable=_bool(props, "auto.leader.rebalance.enable",
                                               DEFAULT_AUTO_LEADER_REBALANCE_ENABLE),
            leader_imbalance_check_interval_seconds=_positive(
                props, "leader.imbalance.check.interval.seconds", DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS),
            leader_imbalance_per_broker_percentage=_percentage(
                props, "leader.imbalance.per.broker.percentage", DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE),
            controlled_shutdown_enable=_bool(props, "controlled.shutdown.enable", DEFAULT_CONTROLLED_SHUTDOWN_ENABLE),
            controlled_shutdown_timeout_ms=_positive(props, "controlled.shutdown.timeout.ms",
                                                     DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS),
            log_defaults=topic_defaults(props),
            raw=dict(props),
        )

    def with_overrides(self, overrides: Mapping[str, str]) -> "BrokerConfig":
        return BrokerConfig.from_properties({**self.raw, **overrides})

    @property
    def advertised(self) -> tuple[Endpoint, ...]:
        """What clients are told: advertised.listeners, else the listeners with a reachable host."""
        if self.advertised_listeners:
            return self.advertised_listeners
        return tuple(
            dataclasses.replace(e, host=e.host if e.host not in ("", "0.0.0.0", "::") else socket.getfqdn())
            for e in self.listeners
        )


def topic_defaults(props: Mapping[str, str]) -> dict[str, str]:
    """The storage's topic-level defaults from the broker's log.* keys (hours/minutes -> ms)."""
    resolved = dict(props)
    for coarse, (fine, factor) in _COARSE_MS.items():
        if coarse in props and fine not in props:
            resolved[fine] = str(_int(props, coarse, 0) * factor)
    return {topic: resolved[broker] for broker, topic in LOG_KEY_TO_TOPIC_KEY.items() if broker in resolved}


def parse_listeners(text: str) -> tuple[Endpoint, ...]:
    """`PLAINTEXT://host:port,NAME://[::1]:port` -> Endpoints (only PLAINTEXT is served)."""
    endpoints = []
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port = address.rpartition(":")
        if not sep or not colon or not port.isdigit():
            raise ConfigError(f"listener {item!r} is not NAME://host:port")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        endpoints.append(Endpoint(name.upper(), host, int(port)))
    if not endpoints:
        raise ConfigError("no listener given")
    return tuple(endpoints)


def parse_properties(text: str) -> dict[str, str]:
    """Java .properties: `key=value` or `key: value`, `#`/`!` comments, `\\` line continuation."""
    props: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip() if pending else raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        key, value = (line[:cut], line[cut + 1 :]) if cut >= 0 else (line, "")
        props[key.strip()] = value.strip()
    if pending:
        key, _, value = pending.partition("=")
        props[key.strip()] = value.strip()
    return props


def load_properties(path: str | Path) -> dict[str, str]:
    return parse_properties(Path(path).read_text(encoding="utf-8"))


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """`["k=v", ...]` from the command line."""
    props = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not key=value")
        props[key.strip()] = value.strip()
    return props


def _int(props: Mapping[str, str], key: str, default):
    if key not in props or props[key] == "":
        return default
    try:
        return int(props[key])
    except ValueError:
        raise ConfigError(f"{key}={props[key]!r} is not an integer") from None


def _positive(props: Mapping[str, str], key: str, default: int) -> int:
    value = _int(props, key, default)
    if value <= 0:
        raise ConfigError(f"{key}={value} must be positive")
    return value


def _queued_max_request_bytes(props: Mapping[str, str]) -> int:
    """-1 (no limit, Kafka's default), else at least socket.request.max.bytes, which is also the default:
    a smaller pool could never hold the largest request the broker accepts, which would wait forever."""
    largest = _int(props, "socket.request.max.bytes", DEFAULT_SOCKET_REQUEST_MAX_BYTES)
    value = _int(props, "queued.max.request.bytes", largest)
    if value == QUEUED_MAX_REQUEST_BYTES_UNLIMITED:
        return value
    if value < largest:
        raise ConfigError(f"queued.max.request.bytes={value} must be -1 or at least socket.request.max.bytes={largest}")
    return value


def _percentage(props: Mapping[str, str], key: str, default: int) -> int:
    value = _int(props, key, default)
    if not 0 <= value <= 100:
        raise ConfigError(f"{key}={value} must be between 0 and 100")
    return value


def _bool(props: Mapping[str, str], key: str, default: bool) -> bool:
    if key not in props:
        return default
    value = props[key].lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{key}={props[key]!r} is not true or false")
    return value == "true"
