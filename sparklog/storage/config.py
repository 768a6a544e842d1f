"""LogConfig: a partition log's settings, under Kafka's topic-level names, and `DEFINITIONS`, the one table
(Kafka's `ConfigDef`) from which parsing, validation, broker synonyms and DescribeConfigs' answers all come.

Build one with `LogConfig.from_dict({"segment.bytes": "1048576", ...})`: values may be strings as in a
.properties file; an unknown key raises InvalidConfigError naming the known ones.

Rule 1: every topic config Kafka 3.x defines is accepted and stored, with Kafka's type, default and range;
the storage acts on those marked `used` (segments, retention, flush, max.message.bytes, the
message.timestamp.* settings, compression.type, and through the cleaner cleanup.policy,
delete.retention.ms, min.cleanable.dirty.ratio and *.compaction.lag.ms); the others are validated and
reported, and their consumers (replication) read them from here.
Rule 2: a value that cannot work here is refused, naming it: `remote.storage.enable=true` (no tiered storage).
Rule 3: the broker-level default of a topic config is the broker key in `ConfigKey.broker_name`
(`log.retention.ms` for `retention.ms`, as Kafka's synonyms); broker/config.py maps them from this table.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from sparklog.storage.errors import InvalidConfigError

LONG_MAX = 2**63 - 1  # Kafka's Long.MAX_VALUE, its "never" for flush.messages and flush.ms
INT32_MAX = 2**31 - 1

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

# Kafka's ConfigDef types, with the code DescribeConfigs v3+ reports (DescribeConfigsResponse.ConfigType).
TYPE_CODES = {"boolean": 1, "string": 2, "int": 3, "short": 4, "long": 5, "double": 6, "list": 7, "class": 8,
              "password": 9}


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
            DEFINITIONS[_key(field.name)].check(getattr(self, field.name))

    @classmethod
    def from_dict(cls, settings: Mapping[str, Any] | None = None) -> "LogConfig":
        """Build from Kafka-named settings; string values are parsed; unknown keys raise."""
        return cls().with_overrides(settings or {})

    def with_overrides(self, settings: Mapping[str, Any]) -> "LogConfig":
        """A copy with some Kafka-named settings replaced (a topic's overrides of the broker defaults)."""
        changes = {}
        for key, value in settings.items():
            if key not in KEYS:
                raise InvalidConfigError(f"unknown log setting {key!r}; known settings: {', '.join(sorted(KEYS))}")
            changes[KEYS[key]] = DEFINITIONS[key].parse(value)
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


@dataclass(frozen=True)
class ConfigKey:
    """One topic config: Kafka's name, type and default, the broker key that supplies its default, whether
    the storage acts on it, the allowed values (`low`/`high` for numbers, `choices` for strings), and a doc."""

    name: str
    type: str
    broker_name: str | None
    used: bool
    doc: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    check_value: Callable[[Any], str | None] | None = None  # extra rule: returns the problem, or None

    @property
    def default(self) -> Any:
        return _DEFAULTS[self.name]

    @property
    def type_code(self) -> int:
        return TYPE_CODES[self.type]

    def parse(self, value: Any) -> Any:
        """A properties-file string (or a Python value) to this key's type; raises InvalidConfigError."""
        if self.type == "boolean":
            return _parse_bool(self.name, value)
        if self.name == "flush.visibility":
            return _parse_visibility(value)
        if self.type in ("int", "long", "short"):
            return _parse_int(self.name, value)
        if self.type == "double":
            try:
                number = float(str(value).strip())
            except ValueError:
                number = math.nan
            if not math.isfinite(number):
                raise InvalidConfigError(f"{self.name} must be a number, not {value!r}")
            return number
        text = str(value).strip()
        if self.type == "list":
            return ",".join(dict.fromkeys(item.strip().lower() for item in text.split(",") if item.strip()))
        for choice in self.choices:  # choices are matched case-insensitively and stored as Kafka spells them
            if text.lower() == choice.lower():
                return choice
        return text

    def check(self, value: Any) -> None:
        """Raise InvalidConfigError naming the key when `value` (of this key's type) is not allowed."""
        problem = self._problem(value)
        if problem:
            raise InvalidConfigError(f"{self.name}: {problem}")

    def _problem(self, value: Any) -> str | None:
        if self.type == "boolean":
            if not isinstance(value, bool):
                return f"must be true or false, not {value!r}"
        elif self.type in ("int", "long", "short", "double"):
            numeric = (int, float) if self.type == "double" else (int,)
            if not isinstance(value, numeric) or isinstance(value, bool):
                return f"must be {'a number' if self.type == 'double' else 'an integer'}, not {value!r}"
            if self.low is not None and value < self.low or self.high is not None and value > self.high:
                kind = "a number" if self.type == "double" else f"an integer ({self.type})"
                return f"must be {kind} in [{_num(self.low)}, {_num(self.high)}], not {value!r}"
        elif not isinstance(value, str):
            return f"must be a string, not {value!r}"
        elif self.type == "list" and self.choices:
            items = value.split(",") if value else []
            bad = [item for item in items if item not in self.choices]
            if bad or not items:
                return f"must be a list of {', '.join(self.choices)}, not {value!r}"
        elif self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}, not {value!r}"
        return self.check_value(value) if self.check_value else None

    def format(self, value: Any) -> str:
        """The value as Kafka prints it in DescribeConfigs."""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def _num(bound: float | None) -> str:
    return "-inf" if bound is None else str(bound)


def _parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigError(f"{key} must be true or false, not {value!r}")
    return text == "true"


def _parse_int(key: str, value: Any) -> int:
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"{key} must be an integer, not {value!r}") from None
    return value


def _parse_visibility(value: Any) -> str:
    if isinstance(value, bool):  # True means "appended": expose on append
        return VISIBILITY_APPENDED if value else VISIBILITY_FLUSHED
    return str(value).strip().lower()


def _no_remote_storage(value: bool) -> str | None:
    return "tiered storage is not supported by sparklog; use false" if value else None


_I = INT32_MAX
_L = LONG_MAX
_TABLE = (
    # name, type, broker key, used by the storage, low, high, doc
    ("segment.bytes", "int", "log.segment.bytes", True, 1, _I, "bytes per segment file (Kafka's floor is 14)"),
    ("segment.ms", "long", "log.roll.ms", True, 1, _L, "roll a segment this long after it was created"),
    ("index.interval.bytes", "int", "log.index.interval.bytes", True, 0, _I, "bytes between offset index entries"),
    ("segment.index.bytes", "int", "log.index.size.max.bytes", True, 8, _I, "bytes of an offset index file"),
    ("flush.messages", "long", "log.flush.interval.messages", True, 1, _L, "fsync after this many messages"),
    ("flush.ms", "long", "log.flush.interval.ms", True, 0, _L, "fsync this long after the oldest unflushed append"),
    ("retention.ms", "long", "log.retention.ms", True, -1, _L, "delete segments older than this (-1: never)"),
    ("retention.bytes", "long", "log.retention.bytes", True, -1, _L, "delete old segments beyond this size (-1: no limit)"),
    ("max.message.bytes", "int", "message.max.bytes", True, 0, _I, "the largest record batch accepted"),
    ("file.delete.delay.ms", "long", "log.segment.delete.delay.ms", True, 0, _L, "keep deleted segment files this long"),
    ("flush.visibility", "string", "log.flush.visibility", True, None, None,
     "sparklog's: 'flushed' shows consumers only fsynced messages, 'appended' every append"),
    ("message.timestamp.type", "string", "log.message.timestamp.type", True, None, None,
     "CreateTime keeps the producer's timestamps, LogAppendTime stamps each batch with the broker's clock"),
    ("message.timestamp.difference.max.ms", "long", "log.message.timestamp.difference.max.ms", True, 0, _L,
     "deprecated: bound on both sides of the broker's clock for CreateTime timestamps"),
    ("message.timestamp.before.max.ms", "long", "log.message.timestamp.before.max.ms", True, 0, _L,
     "how far behind the broker's clock a CreateTime timestamp may be"),
    ("message.timestamp.after.max.ms", "long", "log.message.timestamp.after.max.ms", True, 0, _L,
     "how far ahead of the broker's clock a CreateTime timestamp may be"),
    ("compression.type", "string", "compression.type", True, None, None,
     "codec of stored batches; 'producer' keeps the producer's, others recompress"),
    ("compression.gzip.level", "int", "compression.gzip.level", False, -1, 9, "gzip level (-1: the codec's default)"),
    ("compression.lz4.level", "int", "compression.lz4.level", False, 1, 17, "lz4 level"),
    ("compression.zstd.level", "int", "compression.zstd.level", False, -131072, 22, "zstd level"),
    ("cleanup.policy", "list", "log.cleanup.policy", True, None, None,
     "delete (retention), compact (keep the last value of each key) or both; the cleaner reads it"),
    ("delete.retention.ms", "long", "log.cleaner.delete.retention.ms", True, 0, _L,
     "how long a compacted topic keeps tombstones"),
    ("min.cleanable.dirty.ratio", "double", "log.cleaner.min.cleanable.ratio", True, 0.0, 1.0,
     "the dirty ratio above which the cleaner compacts a log"),
    ("min.compaction.lag.ms", "long", "log.cleaner.min.compaction.lag.ms", True, 0, _L,
     "a message stays uncompacted at least this long"),
    ("max.compaction.lag.ms", "long", "log.cleaner.max.compaction.lag.ms", True, 1, _L,
     "a message stays uncompacted at most this long"),
    ("min.insync.replicas", "int", "min.insync.replicas", False, 1, _I,
     "replicas that must acknowledge an acks=all produce; replication reads it"),
    ("unclean.leader.election.enable", "boolean", "unclean.leader.election.enable", False, None, None,
     "whether a replica outside the ISR may become leader; replication reads it"),
    ("segment.jitter.ms", "long", "log.roll.jitter.ms", False, 0, _L, "random jitter subtracted from segment.ms"),
    ("preallocate", "boolean", "log.preallocate", False, None, None, "preallocate segment files"),
    ("message.downconversion.enable", "boolean", "log.message.downconversion.enable", False, None, None,
     "down-convert for old consumers (sparklog serves RecordBatch v2 only)"),
    ("message.format.version", "string", "log.message.format.version", False, None, None,
     "ignored since Kafka 3.0: batches are always v2"),
    ("follower.replication.throttled.replicas", "list", None, False, None, None, "throttled follower replicas"),
    ("leader.replication.throttled.replicas", "list", None, False, None, None, "throttled leader replicas"),
    ("local.retention.ms", "long", "log.local.retention.ms", False, -2, _L, "tiered storage: local retention time"),
    ("local.retention.bytes", "long", "log.local.retention.bytes", False, -2, _L, "tiered storage: local retention size"),
    ("remote.storage.enable", "boolean", None, False, None, None, "tiered storage (not supported: false only)"),
)
_CHOICES = {
    "flush.visibility": (VISIBILITY_FLUSHED, VISIBILITY_APPENDED),
    "message.timestamp.type": (CREATE_TIME, LOG_APPEND_TIME),
    "compression.type": COMPRESSION_TYPES,
    "cleanup.policy": (CLEANUP_DELETE, CLEANUP_COMPACT),
}
_CHECKS = {"remote.storage.enable": _no_remote_storage}

DEFINITIONS: dict[str, ConfigKey] = {
    name: ConfigKey(name, type_, broker, used, doc, low, high, _CHOICES.get(name, ()), _CHECKS.get(name))
    for name, type_, broker, used, low, high, doc in _TABLE
}
_DEFAULTS = {_key(f.name): f.default for f in dataclasses.fields(LogConfig)}
KEYS = {_key(f.name): f.name for f in dataclasses.fields(LogConfig)}
BROKER_KEYS: dict[str, str] = {d.broker_name: d.name for d in DEFINITIONS.values() if d.broker_name}
"""Broker-level key -> topic-level key (Kafka's synonyms: `log.retention.ms` -> `retention.ms`)."""

assert set(DEFINITIONS) == set(KEYS), "every LogConfig field has exactly one definition"
