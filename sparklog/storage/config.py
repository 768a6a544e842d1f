"""LogConfig: a partition log's settings, under Kafka's topic-level names.

Build one with `LogConfig.from_dict({"segment.bytes": "1048576", ...})`: values may be strings as in a
.properties file; an unknown key raises InvalidConfigError naming the known ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

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

VISIBILITY_FLUSHED = "flushed"
VISIBILITY_APPENDED = "appended"


@dataclass(frozen=True)
class LogConfig:
    """The settings of one partition log (Kafka topic-level names in `KEYS`).

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

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "flush_visibility":
                if value not in (VISIBILITY_FLUSHED, VISIBILITY_APPENDED):
                    raise InvalidConfigError(
                        f"flush.visibility must be {VISIBILITY_FLUSHED!r} or {VISIBILITY_APPENDED!r}, not {value!r}"
                    )
                continue
            low = _MINIMUM[field.name]
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise InvalidConfigError(f"{_key(field.name)} must be an integer >= {low}, not {value!r}")
        if self.segment_bytes > INT32_MAX:
            raise InvalidConfigError(f"segment.bytes must fit the index's int32 positions (<= {INT32_MAX})")

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
            changes[KEYS[key]] = _parse(key, value)
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {_key(f.name): getattr(self, f.name) for f in dataclasses.fields(self)}


def _key(field_name: str) -> str:
    return field_name.replace("_", ".")


def _parse(key: str, value: Any) -> Any:
    if key == "flush.visibility":
        if isinstance(value, bool):  # True means "appended": expose on append
            return VISIBILITY_APPENDED if value else VISIBILITY_FLUSHED
        return str(value).strip().lower()
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise InvalidConfigError(f"{key} must be an integer, not {value!r}") from None
    return value


KEYS = {_key(f.name): f.name for f in dataclasses.fields(LogConfig)}

_MINIMUM = {
    "segment_bytes": 1,  # Kafka's floor is 14; tests use tiny segments
    "segment_ms": 1,
    "index_interval_bytes": 0,
    "segment_index_bytes": 8,  # room for one offset index entry
    "flush_messages": 1,
    "flush_ms": 0,
    "retention_ms": -1,  # -1: no time limit
    "retention_bytes": -1,  # -1: no size limit
    "max_message_bytes": 0,
    "file_delete_delay_ms": 0,
}
