"""The broker's group coordinator settings, read from the Kafka-named properties (declared here in `GROUP`,
part of config.py's broker table).

Rule: a bad value is a `ConfigError` naming the key, as for every broker setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sparklog.settings import INT, LIST, Definitions, Setting

DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS = 3000  # group.initial.rebalance.delay.ms
DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms
DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS = 1800000  # group.max.session.timeout.ms (30 minutes)
DEFAULT_GROUP_MAX_SIZE = 2147483647  # group.max.size (unbounded)
DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS = 50  # offsets.topic.num.partitions
DEFAULT_OFFSETS_TOPIC_REPLICATION_FACTOR = 3  # offsets.topic.replication.factor
# offsets.topic.segment.bytes (100 MiB, less than a topic's 1 GiB: compaction never cleans the active segment)
DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES = 104857600
DEFAULT_OFFSETS_RETENTION_MINUTES = 10080  # offsets.retention.minutes (7 days)
DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600000  # offsets.retention.check.interval.ms (10 minutes)
DEFAULT_OFFSETS_COMMIT_TIMEOUT_MS = 5000  # offsets.commit.timeout.ms
DEFAULT_OFFSETS_LOAD_BUFFER_SIZE = 5242880  # offsets.load.buffer.size (5 MiB read at a time while loading)
DEFAULT_GROUP_CONSUMER_SESSION_TIMEOUT_MS = 45000  # group.consumer.session.timeout.ms (KIP-848)
DEFAULT_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS = 5000  # group.consumer.heartbeat.interval.ms
DEFAULT_GROUP_CONSUMER_ASSIGNORS = "uniform,range"  # group.consumer.assignors: the first is the default
DEFAULT_GROUP_CONSUMER_MAX_SIZE = 2147483647  # group.consumer.max.size


class GroupConfigError(ValueError):
    """A group.* setting has a value the coordinator cannot use."""


GROUP = Definitions("group coordinator", (
    Setting("group.initial.rebalance.delay.ms", INT, DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS,
            "how long the first rebalance of a new group waits for more members", low=0),
    Setting("group.min.session.timeout.ms", INT, DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS,
            "the shortest session timeout a member may ask for", low=1),
    Setting("group.max.session.timeout.ms", INT, DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS,
            "the longest session timeout a member may ask for", low=1),
    Setting("group.max.size", INT, DEFAULT_GROUP_MAX_SIZE, "members a group may have", low=1),
    Setting("offsets.topic.num.partitions", INT, DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS,
            "partitions of the offsets topic: spreads groups over coordinators", low=1),
    Setting("offsets.topic.replication.factor", INT, DEFAULT_OFFSETS_TOPIC_REPLICATION_FACTOR,
            "replicas of each offsets topic partition; fewer (with a warning) while fewer brokers are live",
            low=1, high=32767),
    Setting("offsets.topic.segment.bytes", INT, DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES,
            "segment size of the offsets topic, kept small so compaction and loading stay fast", low=1),
    Setting("offsets.retention.minutes", INT, DEFAULT_OFFSETS_RETENTION_MINUTES,
            "how long the offsets of a group without members are kept after it became empty or last committed",
            low=1),
    Setting("offsets.retention.check.interval.ms", INT, DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
            "how often the coordinator looks for expired offsets", low=1),
    Setting("offsets.commit.timeout.ms", INT, DEFAULT_OFFSETS_COMMIT_TIMEOUT_MS,
            "how long a commit waits for the offsets topic's in-sync replicas before it fails", low=1),
    Setting("offsets.load.buffer.size", INT, DEFAULT_OFFSETS_LOAD_BUFFER_SIZE,
            "bytes read at a time when loading an offsets partition into the cache", low=1),
    Setting("group.consumer.session.timeout.ms", INT, DEFAULT_GROUP_CONSUMER_SESSION_TIMEOUT_MS,
            "how long a member of a consumer-protocol group (KIP-848) lives without a heartbeat", low=1),
    Setting("group.consumer.heartbeat.interval.ms", INT, DEFAULT_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
            "the heartbeat interval the coordinator gives the members of consumer-protocol groups", low=1),
    Setting("group.consumer.assignors", LIST, DEFAULT_GROUP_CONSUMER_ASSIGNORS,
            "the server-side assignors consumer-protocol groups may use; the first is the default",
            choices=("uniform", "range")),
    Setting("group.consumer.max.size", INT, DEFAULT_GROUP_CONSUMER_MAX_SIZE,
            "members a consumer-protocol group may have", low=1),
), error=GroupConfigError)
GROUP_KEYS = set(GROUP)


@dataclass(frozen=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS
    max_size: int = DEFAULT_GROUP_MAX_SIZE
    offsets_topic_num_partitions: int = DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS
    offsets_topic_replication_factor: int = DEFAULT_OFFSETS_TOPIC_REPLICATION_FACTOR
    offsets_topic_segment_bytes: int = DEFAULT_OFFSETS_TOPIC_SEGMENT_BYTES
    offsets_retention_minutes: int = DEFAULT_OFFSETS_RETENTION_MINUTES
    offsets_retention_check_interval_ms: int = DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS
    offsets_commit_timeout_ms: int = DEFAULT_OFFSETS_COMMIT_TIMEOUT_MS
    offsets_load_buffer_size: int = DEFAULT_OFFSETS_LOAD_BUFFER_SIZE
    consumer_session_timeout_ms: int = DEFAULT_GROUP_CONSUMER_SESSION_TIMEOUT_MS
    consumer_heartbeat_interval_ms: int = DEFAULT_GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS
    consumer_assignors: str = DEFAULT_GROUP_CONSUMER_ASSIGNORS
    consumer_max_size: int = DEFAULT_GROUP_CONSUMER_MAX_SIZE

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "GroupConfig":
        config = cls(*GROUP.values_of(props))
        if config.min_session_timeout_ms > config.max_session_timeout_ms:
            raise GroupConfigError(f"group.min.session.timeout.ms={config.min_session_timeout_ms} is above "
                                   f"group.max.session.timeout.ms={config.max_session_timeout_ms}")
        if not config.consumer_assignors:
            raise GroupConfigError("group.consumer.assignors must name at least one assignor (uniform, range)")
        if config.consumer_heartbeat_interval_ms >= config.consumer_session_timeout_ms:
            raise GroupConfigError(f"group.consumer.heartbeat.interval.ms={config.consumer_heartbeat_interval_ms} "
                                   f"must be below group.consumer.session.timeout.ms="
                                   f"{config.consumer_session_timeout_ms}")
        return config

