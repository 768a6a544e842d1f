"""LogConfig: a partition log's settings, under Kafka's topic-level names, and `DEFINITIONS`, their table in
the one definition mechanism (`sparklog.settings`, Kafka's `ConfigDef`) from which parsing, validation, broker
synonyms, DescribeConfigs' answers and the README's settings tables all come.

Build one with `LogConfig.from_dict({"segment.bytes": "1048576", ...})`: values may be strings as in a
.properties file; an unknown key raises InvalidConfigError naming the known ones.

Rule: every-kafka-topic-config: every topic config Kafka 3.x defines is accepted and stored, with Kafka's type, default
and range; the storage acts on segments, retention, flush, max.message.bytes, the
message.timestamp.* settings, compression.type, and through the cleaner on cleanup.policy,
delete.retention.ms, min.cleanable.dirty.ratio and *.compaction.lag.ms); the others are validated and
reported, and their consumers (replication) read them from here.
Rule: unworkable-value-refused: a value that cannot work here is refused, naming it: `remote.storage.enable=true` (no
tiered storage).
Rule: broker-default-synonym: the broker-level default of a topic config is the broker key in `Setting.synonym`
(`log.retention.ms` for `retention.ms`, as Kafka's synonyms); broker/config.py maps them from this table.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from sparklog.settings import (BOOLEAN, DOUBLE, HIGH, INT, INT32_MAX, LIST, LONG, LONG_MAX, LOW, MEDIUM, STRING,
                               TYPE_CODES, Definitions, Setting)
from sparklog.storage.errors import InvalidConfigError
from sparklog.storage import throttled_replicas

DEFAULT_SEGMENT_BYTES = 1024**3  # segment.bytes: Kafka's 1 GiB
DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000  # segment.ms: Kafka's 7 days
DEFAULT_INDEX_INTERVAL_BYTES = 4096  # index.interval.bytes: Kafka's 4096
DEFAULT_SEGMENT_INDEX_BYTES = 10 * 1024**2  # segment.index.bytes: Kafka's 10 MiB
DEFAULT_FLUSH_MESSAGES = LONG_MAX  # flush.messages: Kafka's default (never; flush.ms does the work here)
DEFAULT_FLUSH_MS = 50  # flush.ms: ours (Kafka's is Long.MAX); a consumer sees a message within ~100 ms
DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000  # retention.ms: Kafka's 7 days
DEFAULT_RETENTION_BYTES = -1  # retention.bytes: Kafka's default (no size limit)
DEFAULT_MAX_MESSAGE_BYTES = 1048588  # max.message.bytes: Kafka's 1 MiB + 12 bytes of log overhead
DEFAULT_FILE_DELETE_DELAY_MS = 60_000  # file.delete.delay.ms: Kafka's 60 s
DEFAULT_DELETE_RETENTION_MS = 24 * 3600 * 1000  # delete.retention.ms: Kafka's 1 day
DEFAULT_MIN_CLEANABLE_DIRTY_RATIO = 0.5  # min.cleanable.dirty.ratio: Kafka's 0.5
DEFAULT_MIN_INSYNC_REPLICAS = 1  # min.insync.replicas: Kafka's 1
DEFAULT_TIMESTAMP_BOUND_MS = LONG_MAX  # message.timestamp.{difference,before,after}.max.ms: Kafka 3.x's (no bound)
DEFAULT_LOCAL_RETENTION = -2  # local.retention.{ms,bytes}: Kafka's -2, "same as retention.*"
DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"  # message.format.version: Kafka 3.x's (ignored since 3.0)

VISIBILITY_FLUSHED = "flushed"
VISIBILITY_APPENDED = "appended"
CREATE_TIME = "CreateTime"  # message.timestamp.type values, spelled as Kafka spells them
LOG_APPEND_TIME = "LogAppendTime"
COMPRESSION_PRODUCER = "producer"  # compression.type: keep the producer's codec (Kafka's default)
COMPRESSION_UNCOMPRESSED = "uncompressed"
COMPRESSION_TYPES = (COMPRESSION_UNCOMPRESSED, "gzip", "snappy", "lz4", "zstd", COMPRESSION_PRODUCER)
CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"

__all__ = ["DEFINITIONS", "KEYS", "BROKER_KEYS", "LogConfig", "TYPE_CODES", "LONG_MAX", "INT32_MAX"]


@dataclass(frozen=True)
class LogConfig:
    """The settings of one partition log (Kafka topic-level names in `KEYS`; types and docs in `DEFINITIONS`).

    Durability against visibility (the paper's M and S, section 3.1):

    - `flush.messages` = M: append() itself fsyncs once M messages (record counts from the batch headers) are
      unflushed. M=1 makes every acknowledged append durable, at the price of one fsync per append.
    - `flush.ms` = S: the shared background Flusher fsyncs a log whose oldest unflushed append is S ms old.
      The append path never waits for it; a power loss can lose up to S ms (plus one fsync) of appends.
      A process crash alone loses nothing that was written: the bytes are in the page cache.
    - `flush.visibility`: "flushed" (default, as in the paper) exposes to readers only what has been fsynced:
      the high watermark is the flushed offset, so a consumer never sees a message that a power loss could
      take back; latency is about S plus one fsync. "appended" exposes each append at once (lowest latency),
      but a consumer may read messages that a power loss then removes from the log.

    With the defaults (flush.ms=50, visibility "flushed") a consumer sees a message within ~100 ms of its
    append at low load, and a power loss loses at most ~50 ms of acknowledged appends.
    """

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_ms: int = DEFAULT_SEGMENT_MS
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    segment_index_bytes: int = DEFAULT_SEGMENT_INDEX_BYTES
    flush_messages: int = DEFAULT_FLUSH_MESSAGES
    flush_ms: int = DEFAULT_FLUSH_MS
    retention_ms: int = DEFAULT_RETENTION_MS
    retention_bytes: int = DEFAULT_RETENTION_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    file_delete_delay_ms: int = DEFAULT_FILE_DELETE_DELAY_MS
    flush_visibility: str = VISIBILITY_FLUSHED
    message_timestamp_type: str = CREATE_TIME
    message_timestamp_difference_max_ms: int = DEFAULT_TIMESTAMP_BOUND_MS
    message_timestamp_before_max_ms: int = DEFAULT_TIMESTAMP_BOUND_MS
    message_timestamp_after_max_ms: int = DEFAULT_TIMESTAMP_BOUND_MS
    compression_type: str = COMPRESSION_PRODUCER
    compression_gzip_level: int = -1  # Kafka's -1: the codec's default level
    compression_lz4_level: int = 9  # Kafka's 9
    compression_zstd_level: int = 3  # Kafka's 3
    cleanup_policy: str = CLEANUP_DELETE
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    min_cleanable_dirty_ratio: float = DEFAULT_MIN_CLEANABLE_DIRTY_RATIO
    min_compaction_lag_ms: int = 0  # Kafka's 0
    max_compaction_lag_ms: int = LONG_MAX  # Kafka's Long.MAX
    min_insync_replicas: int = DEFAULT_MIN_INSYNC_REPLICAS
    unclean_leader_election_enable: bool = False  # Kafka's false
    segment_jitter_ms: int = 0  # Kafka's 0
    preallocate: bool = False  # Kafka's false
    message_downconversion_enable: bool = True  # Kafka's true
    message_format_version: str = DEFAULT_MESSAGE_FORMAT_VERSION
    follower_replication_throttled_replicas: str = ""  # Kafka's "" (no throttle)
    leader_replication_throttled_replicas: str = ""
    local_retention_ms: int = DEFAULT_LOCAL_RETENTION
    local_retention_bytes: int = DEFAULT_LOCAL_RETENTION
    remote_storage_enable: bool = False

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            DEFINITIONS[_key(field.name)].check(getattr(self, field.name), InvalidConfigError)

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any] | None = None) -> "LogConfig":
        """Build from Kafka-named settings; string values are parsed; unknown keys raise."""
        return cls().with_overrides(settings or {})

    def with_overrides(self, settings: Mapping[str, Any]) -> "LogConfig":
        """A copy with some Kafka-named settings replaced (a topic's overrides of the broker defaults)."""
        DEFINITIONS.check_known(settings)
        changes = {KEYS[key]: DEFINITIONS[key].parse(value, InvalidConfigError) for key, value in settings.items()}
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {_key(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_strings(self) -> dict[str, str]:
        """Every setting as Kafka prints it (`true`, `compact,delete`, `9223372036854775807`)."""
        return {key: DEFINITIONS[key].format(value) for key, value in self.to_dict().items()}

    @property
    def timestamp_bounds_ms(self) -> tuple[int, int]:
        """(before, after): how far a CreateTime timestamp may lie behind or ahead of the broker's clock.

        The deprecated message.timestamp.difference.max.ms bounds both sides too, so the tighter one wins."""
        difference = self.message_timestamp_difference_max_ms
        return (min(self.message_timestamp_before_max_ms, difference),
                min(self.message_timestamp_after_max_ms, difference))

    @property
    def cleanup_policies(self) -> frozenset[str]:
        return frozenset(self.cleanup_policy.split(","))


def _key(field_name: str) -> str:
    return field_name.replace("_", ".")


# ---------------------------------------------------------------------------------------------------------
# The definitions table


def _visibility(value: Any) -> Any:
    if isinstance(value, bool):  # True means "appended": expose on append
        return VISIBILITY_APPENDED if value else VISIBILITY_FLUSHED
    return value


def _no_remote_storage(value: bool) -> str | None:
    return "tiered storage is not supported by sparklog; use false" if value else None


_I = INT32_MAX
_L = LONG_MAX
def _topic(name: str, type_: str, synonym: str | None, low: float | None, high: float | None, doc: str,
           importance: str = MEDIUM, **extra: Any) -> Setting:
    """A topic config whose default is LogConfig's field (one place for each default)."""
    return Setting(name, type_, _DEFAULTS[name], doc, importance, low, high, synonym=synonym, **extra)


_DEFAULTS = {_key(f.name): f.default for f in dataclasses.fields(LogConfig)}
_I = INT32_MAX
_L = LONG_MAX
DEFINITIONS = Definitions("log", (
    # name, type, broker key (its default), low, high, doc
    _topic("segment.bytes", INT, "log.segment.bytes", 1, _I, "bytes per segment file (Kafka's floor is 14)", HIGH),
    _topic("segment.ms", LONG, "log.roll.ms", 1, _L, "roll a segment this long after it was created"),
    _topic("index.interval.bytes", INT, "log.index.interval.bytes", 0, _I, "bytes between offset index entries"),
    _topic("segment.index.bytes", INT, "log.index.size.max.bytes", 8, _I, "bytes of an offset index file"),
    _topic("flush.messages", LONG, "log.flush.interval.messages", 1, _L, "fsync after this many messages", HIGH),
    _topic("flush.ms", LONG, "log.flush.interval.ms", 0, _L, "fsync this long after the oldest unflushed append "
           "(Kafka's default: never)", HIGH),
    _topic("retention.ms", LONG, "log.retention.ms", -1, _L, "delete segments older than this (-1: never)", HIGH),
    _topic("retention.bytes", LONG, "log.retention.bytes", -1, _L, "delete old segments beyond this size (-1: no "
           "limit)", HIGH),
    _topic("max.message.bytes", INT, "message.max.bytes", 0, _I, "the largest record batch accepted", HIGH),
    _topic("file.delete.delay.ms", LONG, "log.segment.delete.delay.ms", 0, _L, "keep deleted segment files this "
           "long"),
    _topic("flush.visibility", STRING, "log.flush.visibility", None, None, "'flushed' shows consumers only fsynced "
           "messages, 'appended' every append", HIGH, choices=(VISIBILITY_FLUSHED, VISIBILITY_APPENDED),
           convert=_visibility, kafka=""),
    _topic("message.timestamp.type", STRING, "log.message.timestamp.type", None, None, "CreateTime keeps the "
           "producer's timestamps, LogAppendTime stamps each batch with the broker's clock",
           choices=(CREATE_TIME, LOG_APPEND_TIME)),
    _topic("message.timestamp.difference.max.ms", LONG, "log.message.timestamp.difference.max.ms", 0, _L,
           "deprecated: bound on both sides of the broker's clock for CreateTime timestamps", LOW),
    _topic("message.timestamp.before.max.ms", LONG, "log.message.timestamp.before.max.ms", 0, _L,
           "how far behind the broker's clock a CreateTime timestamp may be"),
    _topic("message.timestamp.after.max.ms", LONG, "log.message.timestamp.after.max.ms", 0, _L,
           "how far ahead of the broker's clock a CreateTime timestamp may be"),
    _topic("compression.type", STRING, "compression.type", None, None, "codec of stored batches; 'producer' keeps "
           "the producer's, others recompress", choices=COMPRESSION_TYPES),
    _topic("compression.gzip.level", INT, "compression.gzip.level", -1, 9, "gzip level (-1: the codec's default)",
           LOW),
    _topic("compression.lz4.level", INT, "compression.lz4.level", 1, 17, "lz4 level", LOW),
    _topic("compression.zstd.level", INT, "compression.zstd.level", -131072, 22, "zstd level", LOW),
    _topic("cleanup.policy", LIST, "log.cleanup.policy", None, None, "delete (retention), compact (keep the last "
           "value of each key) or both; the cleaner reads it", choices=(CLEANUP_DELETE, CLEANUP_COMPACT)),
    _topic("delete.retention.ms", LONG, "log.cleaner.delete.retention.ms", 0, _L, "how long a compacted topic keeps "
           "tombstones"),
    _topic("min.cleanable.dirty.ratio", DOUBLE, "log.cleaner.min.cleanable.ratio", 0.0, 1.0, "the dirty ratio "
           "above which the cleaner compacts a log"),
    _topic("min.compaction.lag.ms", LONG, "log.cleaner.min.compaction.lag.ms", 0, _L, "a message stays "
           "uncompacted at least this long"),
    _topic("max.compaction.lag.ms", LONG, "log.cleaner.max.compaction.lag.ms", 1, _L, "a message stays "
           "uncompacted at most this long"),
    _topic("min.insync.replicas", INT, "min.insync.replicas", 1, _I, "replicas that must acknowledge an acks=all "
           "produce; replication reads it", HIGH),
    _topic("unclean.leader.election.enable", BOOLEAN, "unclean.leader.election.enable", None, None, "whether a "
           "replica outside the ISR may become leader; replication reads it"),
    _topic("segment.jitter.ms", LONG, "log.roll.jitter.ms", 0, _L, "random jitter subtracted from segment.ms", LOW),
    _topic("preallocate", BOOLEAN, "log.preallocate", None, None, "preallocate segment files", LOW),
    _topic("message.downconversion.enable", BOOLEAN, "log.message.downconversion.enable", None, None,
           "down-convert for old consumers (sparklog serves RecordBatch v2 only)", LOW),
    _topic("message.format.version", STRING, "log.message.format.version", None, None, "ignored since Kafka 3.0: "
           "batches are always v2", LOW),
    _topic("follower.replication.throttled.replicas", LIST, None, None, None, "partition:broker pairs (or *) "
           "whose follower fetches are throttled (throttled_replicas.py)", LOW, rule=throttled_replicas.problem),
    _topic("leader.replication.throttled.replicas", LIST, None, None, None, "partition:broker pairs (or *) "
           "whose leader throttles follower fetches (throttled_replicas.py)", LOW, rule=throttled_replicas.problem),
    _topic("local.retention.ms", LONG, "log.local.retention.ms", -2, _L, "tiered storage: local retention time",
           LOW),
    _topic("local.retention.bytes", LONG, "log.local.retention.bytes", -2, _L, "tiered storage: local retention "
           "size", LOW),
    _topic("remote.storage.enable", BOOLEAN, None, None, None, "tiered storage (not supported: false only)", LOW,
           rule=_no_remote_storage),
), error=InvalidConfigError)
KEYS = {_key(f.name): f.name for f in dataclasses.fields(LogConfig)}
BROKER_KEYS: dict[str, str] = {d.synonym: d.name for d in DEFINITIONS.values() if d.synonym}
"""Broker-level key -> topic-level key (Kafka's synonyms: `log.retention.ms` -> `retention.ms`)."""

assert set(DEFINITIONS) == set(KEYS), "every LogConfig field has exactly one definition"
