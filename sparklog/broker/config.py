"""Broker configuration from Kafka-named properties (a `.properties` file plus `key=value` overrides).

Rule 1: every key is spelled as Kafka's `server.properties` spells it; the broker-level `log.*` defaults are
mapped to the topic-level names the storage understands (`log.segment.bytes` -> `segment.bytes`, ...), and a
topic's `/config/topics/<t>` overrides are laid over those.
Rule 2: an unknown key is warned about, never fatal (Kafka does the same), naming the nearest known key; a
known key with a bad value is a `ConfigError` naming the key, the value and the rule.
Rule 3: every key is declared once in `BROKER` (`sparklog.settings`: type, default, range, importance, doc):
the broker's own, the group coordinator's (`group_config.GROUP`), the transaction coordinator's
(`coordinator/transaction/config.TRANSACTION`), the scrubber's, the cleaner's, and the
`log.*` defaults of the topic configs, derived from the storage's table. Adding a setting is one `Setting(...)` line there plus
its `BrokerConfig` field.
Rule 4: a setting marked `dynamic` in `BROKER` is one Kafka lets `IncrementalAlterConfigs`/`AlterConfigs` on a
BROKER resource change at runtime and that sparklog applies without a restart (broker/dynamic_config.py): the
`log.*` defaults of the topic configs (laid under every topic's overrides, at once on open logs), except
`log.message.format.version` (Kafka's exclusion) and `unclean.leader.election.enable` (read by the controller at
start here), and Kafka's GSSAPI login timings (accepted, no effect: sparklog serves no GSSAPI). `DYNAMIC_KEYS` is
derived from that flag; every other key is refused with Kafka's
`Cannot update these configs dynamically: ...`. Their coarse spellings (`log.retention.hours`) stay static.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from sparklog.broker.authorization import check_authorizer_class_name
from sparklog.broker.replica_selector import check_replica_selector_class
from sparklog.broker.coordinator.group.config import GROUP, GroupConfig, GroupConfigError
from sparklog.broker.coordinator.transaction.config import TRANSACTION, TransactionConfig, TransactionConfigError
from sparklog.broker.security.sasl_config import SASL, SaslConfig, SaslConfigError, is_listener_sasl_key
from sparklog.coordination.connection import split_connect_string
from sparklog.coordination.zookeeper_security import ZOOKEEPER_TLS, ZooKeeperSecurity, ZooKeeperSecurityError
from sparklog.broker.tls import SSL, TlsConfigError, TlsSettings, is_listener_ssl_key, listener_tls_settings
from sparklog.settings import (BOOLEAN, DOUBLE, HIGH, INT, LIST, LONG, LONG_MAX, LOW, MEDIUM, STRING, WARN,
                               Definitions, Setting)
from sparklog.storage.config import BROKER_KEYS as TOPIC_CONFIG_BROKER_KEYS
from sparklog.storage.config import DEFINITIONS as TOPIC_CONFIGS
from sparklog.storage.cleaner_manager import CLEANER_SETTINGS, CleanerConfig
from sparklog.storage.scrubber import SCRUBBER_SETTINGS, ScrubberConfig

log = logging.getLogger(__name__)

# Kafka's defaults, named as Kafka names them.
DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS = 18000  # zookeeper.session.timeout.ms
# zookeeper.connection.timeout.ms: how long startup waits for a ZooKeeper server. Kafka's is unset, meaning the
# session timeout (18 s); sparklog's stays the 10 s it always waited (coordination.connection.CONNECT_TIMEOUT_S).
DEFAULT_ZOOKEEPER_CONNECTION_TIMEOUT_MS = 10000
DEFAULT_NUM_PARTITIONS = 1  # num.partitions
DEFAULT_REPLICATION_FACTOR = 1  # default.replication.factor
DEFAULT_MESSAGE_MAX_BYTES = 1048588  # message.max.bytes (1 MiB + the 12-byte log overhead)
DEFAULT_SOCKET_REQUEST_MAX_BYTES = 104857600  # socket.request.max.bytes (100 MiB)
DEFAULT_FETCH_SESSION_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots: Kafka's default
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

# Keys a stock server.properties carries that have no meaning here yet: accepted silently.
_IGNORED_KEYS = (
    "num.network.threads",
    "num.io.threads",
    "num.recovery.threads.per.data.dir",
    "log.flush.offset.checkpoint.interval.ms",
)


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")  # Kafka's SecurityProtocol names
TLS_PROTOCOLS = ("SSL", "SASL_SSL")  # served over TLS
# The protocols not served yet, refused at start (check_served), in this one place: SASL lifts its entries.
UNSERVED_PROTOCOLS: dict[str, str] = {}  # protocol -> why not; all four of Kafka's are served


class ConfigError(ValueError):
    """A known configuration key has a value the broker cannot use."""


@dataclass(frozen=True)
class Endpoint:
    """One listener: `PLAINTEXT://host:port`. An empty host binds every interface."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


# Topic-config defaults that stay static (Rule 4).
_STATIC_SYNONYMS = frozenset({"log.message.format.version", "unclean.leader.election.enable"})


def _synonym(broker_key: str, topic_key: str) -> Setting:
    """The broker-level default of a topic config: the topic config's type, default and rule (Rule 3),
    dynamic unless named in _STATIC_SYNONYMS (Rule 4)."""
    topic = TOPIC_CONFIGS[topic_key]
    return Setting(broker_key, topic.type, topic.default, f"default of the topic config `{topic_key}`: {topic.doc}",
                   topic.importance, topic.low, topic.high, topic.choices, topic.rule, topic.kafka,
                   convert=topic.convert, dynamic=broker_key not in _STATIC_SYNONYMS)


def _ignored(name: str) -> Setting:
    return Setting(name, STRING, None, "accepted from a stock server.properties; no effect in sparklog", LOW)


def _kerberos(name: str, type_: str, default: Any) -> Setting:
    """A GSSAPI (Kerberos) login setting: dynamic in Kafka, and so accepted by a dynamic alter (librdkafka's
    admin tests set one); sparklog serves no GSSAPI, so it has no effect here."""
    return Setting(name, type_, default, "Kafka's GSSAPI login setting; sparklog serves no GSSAPI: no effect",
                   LOW, low=0, dynamic=True)


BROKER = Definitions("broker", (
    Setting("broker.id", INT, None, "this broker's id, unique in the cluster (required)", HIGH, low=0),
    Setting("listeners", STRING, f"PLAINTEXT://:{DEFAULT_PORT}", "NAME://host:port,... of the listeners, each "
            "bound and served with its security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL)", HIGH),
    Setting("advertised.listeners", STRING, None, "what clients are told, per listener name (unset: the "
            "listeners)", HIGH),
    Setting("listener.security.protocol.map", STRING, None, "NAME:PROTOCOL,... (unset: each protocol's name maps "
            "to itself)", LOW),
    Setting("inter.broker.listener.name", STRING, None, "the listener other brokers reach this one on "
            "(unset: the one named as security.inter.broker.protocol)", MEDIUM),
    Setting("security.inter.broker.protocol", STRING, "PLAINTEXT", "the inter-broker listener's name when "
            "inter.broker.listener.name is unset", MEDIUM, choices=SECURITY_PROTOCOLS),
    Setting("log.dirs", LIST, None, "directories of the partition logs (required, or log.dir)", HIGH),
    Setting("log.dir", LIST, None, "the same as log.dirs, when that is unset", HIGH),
    Setting("zookeeper.connect", STRING, None, "host:port[,...][/chroot] of ZooKeeper (required)", HIGH),
    Setting("zookeeper.session.timeout.ms", INT, DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS, "ZooKeeper session timeout",
            HIGH),
    Setting("zookeeper.connection.timeout.ms", INT, DEFAULT_ZOOKEEPER_CONNECTION_TIMEOUT_MS, "how long startup "
            "waits for a ZooKeeper server before giving up (Kafka: unset, the session timeout)", low=1),
    Setting("zookeeper.set.acl", BOOLEAN, False, "create znodes writable only by this broker's ZooKeeper login "
            "(SCRAM credentials readable only by it); needs the JAAS Client section of KAFKA_OPTS' "
            "-Djava.security.auth.login.config", HIGH),
    Setting("num.partitions", INT, DEFAULT_NUM_PARTITIONS, "partitions of an auto-created topic", low=1),
    Setting("default.replication.factor", INT, DEFAULT_REPLICATION_FACTOR, "replicas of an auto-created topic",
            low=1),
    Setting("auto.create.topics.enable", BOOLEAN, True, "create a topic on its first metadata request or produce",
            HIGH),
    Setting("delete.topic.enable", BOOLEAN, True, "allow DeleteTopics", HIGH),
    Setting("socket.request.max.bytes", INT, DEFAULT_SOCKET_REQUEST_MAX_BYTES, "the largest request accepted",
            HIGH, low=1),
    Setting("socket.send.buffer.bytes", INT, -1, "SO_SNDBUF (-1: the OS default and its autotuning)"),
    Setting("socket.receive.buffer.bytes", INT, -1, "SO_RCVBUF (-1: the OS default and its autotuning)"),
    Setting("fetch.max.bytes", INT, DEFAULT_FETCH_MAX_BYTES, "cap of one Fetch response's records", low=1),
    Setting("max.incremental.fetch.session.cache.slots", INT, DEFAULT_FETCH_SESSION_CACHE_SLOTS, "incremental fetch "
            "sessions kept (KIP-227; 0: every fetch is full)", low=0),
    Setting("queued.max.requests", INT, DEFAULT_QUEUED_MAX_REQUESTS, "requests in progress per connection before "
            "reading pauses (Kafka's is per broker)", HIGH, low=1),
    Setting("connections.max.idle.ms", LONG, DEFAULT_CONNECTIONS_MAX_IDLE_MS, "close a connection idle this long"),
    Setting("max.connections", INT, DEFAULT_MAX_CONNECTIONS, "connections accepted at once", low=1),
    Setting("max.connections.per.ip", INT, DEFAULT_MAX_CONNECTIONS_PER_IP, "connections from one address", low=1),
    Setting("queued.max.request.bytes", LONG, None, "bytes of partly received requests over all connections "
            "(-1: no limit; unset: socket.request.max.bytes)"),
    Setting("max.broker.partitions", INT, DEFAULT_MAX_BROKER_PARTITIONS, "partition replicas on this broker "
            "(KIP-578)", low=1),
    Setting("max.partitions.per.topic", INT, DEFAULT_MAX_PARTITIONS_PER_TOPIC, "partitions of one topic", low=1,
            kafka=""),
    Setting("max.partitions.per.request", INT, DEFAULT_MAX_PARTITIONS_PER_REQUEST, "partitions created by one "
            "CreateTopics request", low=1, kafka=""),
    Setting("log.retention.check.interval.ms", LONG, DEFAULT_LOG_RETENTION_CHECK_INTERVAL_MS, "how often "
            "retention runs", low=1),
    Setting("log.flush.scheduler.interval.ms", LONG, DEFAULT_LOG_FLUSH_SCHEDULER_INTERVAL_MS, "how often the "
            "flusher looks for logs to flush", low=1),
    Setting("log.retention.minutes", LONG, None, "log.retention.ms in minutes (the finer key wins)", low=-1),
    Setting("log.retention.hours", LONG, None, "log.retention.ms in hours (the finer key wins)", low=-1),
    Setting("log.roll.hours", LONG, None, "log.roll.ms in hours (the finer key wins)", low=1),
    Setting("broker.rack", STRING, None, "this broker's rack, for rack-aware replica placement and the "
            "rack-aware replica selector"),
    Setting("replica.selector.class", STRING, "", "who serves a consumer that names its rack (KIP-392): Kafka's "
            "org.apache.kafka.common.replica.RackAwareReplicaSelector sends it to an in-sync replica in its rack; "
            "empty or org.apache.kafka.common.replica.LeaderSelector: the leader", rule=check_replica_selector_class),
    Setting("max.request.partition.size.limit", INT, 2000, "partitions one DescribeTopicPartitions answer carries "
            "at most (KIP-966)", low=1),
    Setting("replica.lag.time.max.ms", LONG, DEFAULT_REPLICA_LAG_TIME_MAX_MS, "a follower that has not caught up "
            "for this long leaves the ISR", HIGH, low=1),
    Setting("auto.leader.rebalance.enable", BOOLEAN, DEFAULT_AUTO_LEADER_REBALANCE_ENABLE, "move leadership back "
            "to preferred replicas"),
    Setting("leader.imbalance.check.interval.seconds", LONG, DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS,
            "how often the controller checks the leader balance", low=1),
    Setting("leader.imbalance.per.broker.percentage", INT, DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE,
            "imbalance that triggers a preferred election", low=0, high=100),
    Setting("controlled.shutdown.enable", BOOLEAN, DEFAULT_CONTROLLED_SHUTDOWN_ENABLE, "move leaderships away "
            "before stopping"),
    Setting("controlled.shutdown.timeout.ms", LONG, DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS, "how long a stopping "
            "broker waits for that (Kafka: max.retries x retry.backoff.ms)", low=1, kafka=""),
    Setting("authorizer.class.name", STRING, "", "the authorizer: Kafka's kafka.security.authorizer.AclAuthorizer "
            "(or kafka.security.auth.SimpleAclAuthorizer), ACLs in ZooKeeper; empty: no authorization", HIGH,
            rule=check_authorizer_class_name),
    Setting("super.users", STRING, "", "principals allowed everything, separated by semicolons (User:admin;...)"),
    Setting("allow.everyone.if.no.acl.found", BOOLEAN, False, "allow an operation on a resource no ACL names"),
    Setting("quota.window.num", INT, 11, "samples a client quota's rate is measured over", low=2),
    Setting("quota.window.size.seconds", INT, 1, "the time span of each of those samples", low=1),
    Setting("leader.replication.throttled.rate", LONG, LONG_MAX, "bytes/s this broker serves, as a leader, to "
            "follower fetches of the replicas its topics' leader.replication.throttled.replicas name", low=1, dynamic=True),
    Setting("follower.replication.throttled.rate", LONG, LONG_MAX, "bytes/s this broker fetches, as a follower, "
            "for the replicas its topics' follower.replication.throttled.replicas name", low=1, dynamic=True),
    Setting("replication.quota.window.num", INT, 11, "samples a replication throttle's rate is measured over",
            low=2),
    Setting("replication.quota.window.size.seconds", INT, 1, "the time span of each of those samples", low=1),
    Setting("metrics.listener", STRING, "", "http://HOST:PORT of the Prometheus endpoint (/metrics); empty: none",
            kafka=""),
    *SSL.values(),
    *ZOOKEEPER_TLS.values(),
    *SCRUBBER_SETTINGS.values(),
    *CLEANER_SETTINGS.values(),
    *GROUP.values(),
    *TRANSACTION.values(),
    *SASL.values(),
    *(_synonym(broker_key, topic_key) for broker_key, topic_key in TOPIC_CONFIG_BROKER_KEYS.items()),
    *(_ignored(name) for name in _IGNORED_KEYS),
    _kerberos("sasl.kerberos.min.time.before.relogin", LONG, 60000),
    _kerberos("sasl.kerberos.ticket.renew.jitter", DOUBLE, 0.05),
    _kerberos("sasl.kerberos.ticket.renew.window.factor", DOUBLE, 0.8),
), error=ConfigError, unknown=WARN)
KNOWN_KEYS = frozenset(BROKER)
DYNAMIC_KEYS = frozenset(key for key in BROKER if BROKER[key].dynamic)  # Rule 4


@dataclass(frozen=True)
class BrokerConfig:
    broker_id: int
    listeners: tuple[Endpoint, ...]
    advertised_listeners: tuple[Endpoint, ...]
    log_dirs: tuple[str, ...]
    zookeeper_connect: str
    zookeeper_session_timeout_ms: int = DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS
    zookeeper_connection_timeout_ms: int = DEFAULT_ZOOKEEPER_CONNECTION_TIMEOUT_MS
    zookeeper_set_acl: bool = False  # the login itself is the environment's (coordination/zookeeper_security.py)
    # the login (KAFKA_OPTS' JAAS Client section, zookeeper.ssl.*) and ACLs of this broker's ZooKeeper client
    zookeeper_security: ZooKeeperSecurity = field(default_factory=ZooKeeperSecurity, compare=False, repr=False)
    num_partitions: int = DEFAULT_NUM_PARTITIONS
    default_replication_factor: int = DEFAULT_REPLICATION_FACTOR
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    message_max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES
    socket_request_max_bytes: int = DEFAULT_SOCKET_REQUEST_MAX_BYTES
    socket_send_buffer_bytes: int = -1  # Kafka: 102400; -1 keeps the OS default (and Linux autotuning)
    socket_receive_buffer_bytes: int = -1
    fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES
    max_incremental_fetch_session_cache_slots: int = DEFAULT_FETCH_SESSION_CACHE_SLOTS
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
    replica_selector_class: str = ""  # broker/replica_selector.py
    max_request_partition_size_limit: int = 2000  # DescribeTopicPartitions' page (handlers/describe_topic_partitions.py)
    replica_lag_time_max_ms: int = DEFAULT_REPLICA_LAG_TIME_MAX_MS
    unclean_leader_election_enable: bool = DEFAULT_UNCLEAN_LEADER_ELECTION_ENABLE
    auto_leader_rebalance_enable: bool = DEFAULT_AUTO_LEADER_REBALANCE_ENABLE
    leader_imbalance_check_interval_seconds: int = DEFAULT_LEADER_IMBALANCE_CHECK_INTERVAL_SECONDS
    leader_imbalance_per_broker_percentage: int = DEFAULT_LEADER_IMBALANCE_PER_BROKER_PERCENTAGE
    controlled_shutdown_enable: bool = DEFAULT_CONTROLLED_SHUTDOWN_ENABLE
    controlled_shutdown_timeout_ms: int = DEFAULT_CONTROLLED_SHUTDOWN_TIMEOUT_MS
    authorizer_class_name: str = ""  # empty: no authorization (authorization.py otherwise)
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    quota_window_num: int = 11  # quota.window.num
    quota_window_size_seconds: int = 1  # quota.window.size.seconds
    leader_replication_throttled_rate: int = LONG_MAX  # broker/quota/replication.py
    follower_replication_throttled_rate: int = LONG_MAX
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    # Topic-level defaults for the storage (`segment.bytes`, `retention.ms`, `min.insync.replicas`, ...), from
    # the log.* keys and the other synonyms of topic configs: the storage's LogConfig types them (one default each).
    log_defaults: Mapping[str, str] = field(default_factory=dict)
    group: GroupConfig = field(default_factory=GroupConfig)  # the group coordinator's group.* / offsets.* keys
    transaction: TransactionConfig = field(default_factory=TransactionConfig)  # transaction.* / transactional.*
    scrubber: ScrubberConfig = field(default_factory=ScrubberConfig)
    cleaner: CleanerConfig = field(default_factory=CleanerConfig)
    sasl: SaslConfig = field(default_factory=SaslConfig)  # sasl.* and the JAAS entries (security/sasl_config.py)
    listener_protocols: Mapping[str, str] = field(default_factory=dict)  # listener name -> security protocol
    metrics_listener: Endpoint | None = None  # metrics.listener: the Prometheus endpoint (broker/metrics.py)
    # The properties as given: for with_overrides and DescribeConfigs only; everything else reads a typed field.
    raw: Mapping[str, str] = field(default_factory=dict)
    # Every listener's security protocol (listener.security.protocol.map, Kafka's default when unset), and the
    # listener other brokers use (inter.broker.listener.name, else security.inter.broker.protocol's name).
    listener_security_protocol_map: Mapping[str, str] = field(default_factory=lambda: {"PLAINTEXT": "PLAINTEXT"})
    inter_broker_listener_name: str = "PLAINTEXT"
    tls: TlsSettings | None = None  # the ssl.* settings (broker/tls.py)
    # Each TLS listener's: ssl.* with its listener.name.<l>.ssl.* laid over (broker/tls.py Rule 6).
    listener_tls: Mapping[str, TlsSettings] = field(default_factory=dict)
    # Built (and so checked: a store that does not load is refused here) per listener that speaks SSL.
    ssl_server_contexts: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    ssl_client_context: Any = field(default=None, compare=False, repr=False)  # inter-broker SSL only

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "BrokerConfig":
        """Build from Kafka-named string properties; warns about unknown keys."""
        props = {k.strip(): str(v).strip() for k, v in props.items()}
        values = BROKER.parse({k: v for k, v in props.items()
                               if not is_listener_sasl_key(k) and not is_listener_ssl_key(k)})  # (Rule 2)
        if values["broker.id"] is None:
            raise ConfigError("broker.id must be set to a non-negative integer")
        log_dirs = values["log.dirs"] or values["log.dir"]
        if not log_dirs:
            raise ConfigError("log.dirs (or log.dir) must be set")
        if not values["zookeeper.connect"]:
            raise ConfigError("zookeeper.connect must be set")
        try:
            split_connect_string(values["zookeeper.connect"])  # refused here, not after the logs are open
        except ValueError as exc:
            raise ConfigError(f"zookeeper.connect: {exc}") from None
        zookeeper_security = zookeeper_login(values["zookeeper.set.acl"], props)
        try:
            group = GroupConfig.from_properties(props)
        except GroupConfigError as exc:
            raise ConfigError(str(exc)) from None
        try:
            transaction = TransactionConfig.from_properties(props)
        except TransactionConfigError as exc:
            raise ConfigError(str(exc)) from None
        advertised = values["advertised.listeners"]
        listeners = parse_listeners(values["listeners"] or BROKER["listeners"].default)
        advertised_listeners = parse_listeners(advertised) if advertised else ()
        protocols = check_served(listeners, advertised_listeners, values["listener.security.protocol.map"])
        tls, listener_tls, server_contexts = tls_server_contexts(props, listeners, protocols)
        inter_broker = inter_broker_listener(props, values, listeners, protocols)
        client_ctx = tls_client_context(listener_tls, listeners, protocols, inter_broker)
        listener_protocols = {e.name: protocols[e.name] for e in listeners}
        sasl_listeners = tuple(name for name, protocol in listener_protocols.items() if protocol.startswith("SASL_"))
        try:  # the inter-broker login is that listener's when it speaks SASL
            sasl = SaslConfig.from_properties(props, sasl_listeners,
                                              inter_broker if inter_broker in sasl_listeners else None)
        except SaslConfigError as exc:
            raise ConfigError(str(exc)) from None
        return cls(
            broker_id=values["broker.id"],
            listeners=listeners,
            advertised_listeners=advertised_listeners,
            log_dirs=tuple(log_dirs.split(",")),
            zookeeper_connect=values["zookeeper.connect"],
            queued_max_request_bytes=_queued_max_request_bytes(values),
            rack=values["broker.rack"] or None,
            log_defaults=topic_defaults(props),
            group=group,
            transaction=transaction,
            scrubber=ScrubberConfig.from_properties(props),
            cleaner=CleanerConfig.from_properties(props),
            sasl=sasl,
            listener_protocols=listener_protocols,
            metrics_listener=parse_metrics_listener(values["metrics.listener"]),
            raw=dict(props),
            listener_security_protocol_map={e.name: protocols[e.name] for e in listeners},
            inter_broker_listener_name=inter_broker,
            tls=tls,
            zookeeper_security=zookeeper_security,
            listener_tls=listener_tls,
            ssl_server_contexts=server_contexts,
            ssl_client_context=client_ctx,
            **{name: values[key] for name, key in _FIELD_KEYS.items()},
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

    def protocol(self, listener: str) -> str:
        """The security protocol a listener speaks."""
        return self.listener_security_protocol_map[listener]

    @property
    def ssl_server_context(self) -> Any:
        """The first TLS listener's server context (None without one)."""
        return next(iter(self.ssl_server_contexts.values()), None)


# BrokerConfig fields read straight from their key (`num_partitions` <- `num.partitions`); the others above.
_SPECIAL_FIELDS = {"broker_id", "listeners", "advertised_listeners", "log_dirs", "zookeeper_connect",
                   "queued_max_request_bytes", "rack", "log_defaults", "group", "transaction", "scrubber", "cleaner", "raw",
                   "sasl", "listener_protocols", "metrics_listener", "listener_security_protocol_map",
                   "inter_broker_listener_name", "tls", "listener_tls", "ssl_server_contexts", "ssl_client_context",
                   "zookeeper_security"}
_FIELD_KEYS = {f.name: f.name.replace("_", ".") for f in dataclasses.fields(BrokerConfig)
               if f.name not in _SPECIAL_FIELDS}
assert set(_FIELD_KEYS.values()) <= KNOWN_KEYS, "every BrokerConfig field has a declared setting"


def zookeeper_login(set_acl: bool, props: Mapping[str, str]) -> ZooKeeperSecurity:
    """The ZooKeeper client's login and ACLs; ConfigError (one line) for a login or TLS setting that cannot be
    used, or zookeeper.set.acl without a login (zookeeper_security Rules 1, 1b and 3), as Kafka's broker refuses
    them at start."""
    try:
        security = ZooKeeperSecurity.from_environment(set_acl=set_acl, settings=props)
        security.require_login()
    except ZooKeeperSecurityError as exc:
        raise ConfigError(str(exc)) from None
    return security


def topic_defaults(props: Mapping[str, str]) -> dict[str, str]:
    """The storage's topic-level defaults from the broker's log.* keys (hours/minutes -> ms)."""
    resolved = dict(props)
    for coarse, (fine, factor) in _COARSE_MS.items():
        if coarse in props and fine not in props:
            resolved[fine] = str(BROKER.value(props, coarse) * factor)
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
        if int(port) > 65535:
            raise ConfigError(f"listener {item!r}: port {port} is not in [0, 65535]")
        host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
        endpoints.append(Endpoint(name.upper(), host, int(port)))
    if not endpoints:
        raise ConfigError("no listener given")
    return tuple(endpoints)


def parse_metrics_listener(text: str | None) -> Endpoint | None:
    """`http://host:port` -> the metrics endpoint's address; empty -> None (no endpoint)."""
    if not text:
        return None
    scheme, sep, address = text.partition("://")
    host, colon, port = address.rpartition(":")
    if scheme.lower() != "http" or not sep or not colon or not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"metrics.listener {text!r} is not http://HOST:PORT (port in [0, 65535])")
    return Endpoint("HTTP", host[1:-1] if host.startswith("[") and host.endswith("]") else host, int(port))


def check_served(listeners: tuple[Endpoint, ...], advertised: tuple[Endpoint, ...],
                 protocol_map: str | None) -> dict[str, str]:
    """Refuse, in one ConfigError naming it, a listener the broker would not serve as configured: two listeners
    with one name or one port, an advertised listener naming no listener, a listener with no security protocol
    (listener.security.protocol.map, else its name, as Kafka's default map) or with one not served
    (UNSERVED_PROTOCOLS): a listener served any other way than its protocol says would tell clients a lie.
    Returns the map."""
    protocols = parse_protocol_map(protocol_map)
    _check_distinct(listeners)
    names = {e.name for e in listeners}
    for endpoint in advertised:
        if endpoint.name not in names:
            raise ConfigError(f"advertised listener '{endpoint}' names no listener of listeners "
                              f"({', '.join(sorted(names))}); {endpoint.name} is not served")
    for endpoint in listeners:
        protocol = protocols.get(endpoint.name)
        if protocol is None:
            raise ConfigError(f"listener '{endpoint}': no security protocol for {endpoint.name} in "
                              f"listener.security.protocol.map")
        if protocol in UNSERVED_PROTOCOLS:
            raise ConfigError(f"listener '{endpoint}' speaks {protocol}: sparklog does not serve it "
                              f"({UNSERVED_PROTOCOLS[protocol]})")
    return protocols


def _check_distinct(listeners: tuple[Endpoint, ...]) -> None:
    names = [e.name for e in listeners]
    ports = [e.port for e in listeners if e.port]
    if len(set(names)) < len(names) or len(set(ports)) < len(ports):
        raise ConfigError(f"listeners '{','.join(map(str, listeners))}': each listener needs its own name and "
                          f"its own port")


def inter_broker_listener(props: Mapping[str, str], values: Mapping[str, Any], listeners: tuple[Endpoint, ...],
                          protocols: Mapping[str, str]) -> str:
    """inter.broker.listener.name, else the listener named as security.inter.broker.protocol (Kafka's rule);
    it must be one of the listeners (both keys set at once is refused, as Kafka does). A broker with one
    listener and neither key set is reached on that one (Kafka would refuse the start, its default PLAINTEXT
    naming no listener; there is no other listener it could mean)."""
    name, protocol = values["inter.broker.listener.name"], values["security.inter.broker.protocol"]
    if name and "security.inter.broker.protocol" in props:
        raise ConfigError("inter.broker.listener.name and security.inter.broker.protocol are both set; set one")
    if not name and "security.inter.broker.protocol" not in props and len(listeners) == 1:
        return listeners[0].name
    name = (name or protocol).strip().upper()
    if name not in {e.name for e in listeners}:
        key = "inter.broker.listener.name" if values["inter.broker.listener.name"] else \
            "security.inter.broker.protocol"
        raise ConfigError(f"{key}={name}: no listener of that name in listeners "
                          f"({', '.join(e.name for e in listeners)}); other brokers could not reach this one")
    return name


def tls_server_contexts(props: Mapping[str, str], listeners: tuple[Endpoint, ...], protocols: Mapping[str, str]):
    """The ssl.* settings, each TLS listener's own (listener.name.<l>.ssl.* over ssl.*) and its server context:
    built here, so that a store that cannot be loaded stops the start in one line naming the listener and the
    store."""
    try:
        tls = TlsSettings.from_properties(props)
        per_listener = listener_tls_settings(props, {e.name: protocols[e.name] for e in listeners}, TLS_PROTOCOLS)
    except TlsConfigError as exc:
        raise ConfigError(str(exc)) from None
    contexts = {e.name: _tls_built(per_listener[e.name].server_context, e, protocols)
                for e in listeners if e.name in per_listener}
    return tls, per_listener, contexts


def tls_client_context(listener_tls: Mapping[str, TlsSettings], listeners: tuple[Endpoint, ...],
                       protocols: Mapping[str, str], inter_broker: str):
    """The context of this broker's connections to the others, when the inter-broker listener speaks SSL: built
    from that listener's settings."""
    if protocols[inter_broker] not in TLS_PROTOCOLS:
        return None
    endpoint = next(e for e in listeners if e.name == inter_broker)
    return _tls_built(listener_tls[inter_broker].client_context, endpoint, protocols)


def _tls_built(build, endpoint: Endpoint, protocols: Mapping[str, str]):
    try:
        return build()
    except TlsConfigError as exc:
        raise ConfigError(f"listener '{endpoint}' speaks {protocols[endpoint.name]}: {exc}") from None


def parse_protocol_map(text: str | None) -> dict[str, str]:
    """`NAME:PROTOCOL,...` -> {NAME: PROTOCOL}; unset, each protocol's name maps to itself (Kafka's default)."""
    if not text:
        return {name: name for name in SECURITY_PROTOCOLS}
    protocols = {}
    for item in (s.strip() for s in text.split(",") if s.strip()):
        name, sep, protocol = item.partition(":")
        if not sep or protocol.strip().upper() not in SECURITY_PROTOCOLS:
            raise ConfigError(f"listener.security.protocol.map: {item!r} is not NAME:PROTOCOL with PROTOCOL one "
                              f"of {', '.join(SECURITY_PROTOCOLS)}")
        protocols[name.strip().upper()] = protocol.strip().upper()
    return protocols


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
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); a properties file is expected") from None
    return parse_properties(text)


def parse_overrides(items: list[str] | None) -> dict[str, str]:
    """`["k=v", ...]` from the command line."""
    props = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} is not key=value")
        props[key.strip()] = value.strip()
    return props


def _queued_max_request_bytes(values: Mapping[str, object]) -> int:
    """-1 (no limit, Kafka's default), else at least socket.request.max.bytes, which is also the default:
    a smaller pool could never hold the largest request the broker accepts, which would wait forever."""
    largest = values["socket.request.max.bytes"]
    value = values["queued.max.request.bytes"]
    if value is None:
        return largest
    if value == QUEUED_MAX_REQUEST_BYTES_UNLIMITED:
        return value
    if value < largest:
        raise ConfigError(f"queued.max.request.bytes={value} must be -1 or at least socket.request.max.bytes={largest}")
    return value
