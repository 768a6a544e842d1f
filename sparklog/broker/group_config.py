"""The broker's group coordinator settings, read from the Kafka-named properties (config.py lists the keys).

Rule: a bad value is a `ConfigError` naming the key, as for every broker setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS = 3000  # group.initial.rebalance.delay.ms
DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms
DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS = 1800000  # group.max.session.timeout.ms (30 minutes)
DEFAULT_GROUP_MAX_SIZE = 2147483647  # group.max.size (unbounded)
DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS = 50  # offsets.topic.num.partitions

GROUP_KEYS = {
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "offsets.topic.num.partitions",
}


class GroupConfigError(ValueError):
    """A group.* setting has a value the coordinator cannot use."""


@dataclass(frozen=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS
    max_size: int = DEFAULT_GROUP_MAX_SIZE
    offsets_topic_num_partitions: int = DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "GroupConfig":
        config = cls(
            initial_rebalance_delay_ms=_int(props, "group.initial.rebalance.delay.ms",
                                            DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS, 0),
            min_session_timeout_ms=_int(props, "group.min.session.timeout.ms",
                                        DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS, 1),
            max_session_timeout_ms=_int(props, "group.max.session.timeout.ms",
                                        DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS, 1),
            max_size=_int(props, "group.max.size", DEFAULT_GROUP_MAX_SIZE, 1),
            offsets_topic_num_partitions=_int(props, "offsets.topic.num.partitions",
                                              DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS, 1),
        )
        if config.min_session_timeout_ms > config.max_session_timeout_ms:
            raise GroupConfigError(f"group.min.session.timeout.ms={config.min_session_timeout_ms} is above "
                                   f"group.max.session.timeout.ms={config.max_session_timeout_ms}")
        return config


def _int(props: Mapping[str, str], key: str, default: int, least: int) -> int:
    text = str(props.get(key, "")).strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise GroupConfigError(f"{key}={text!r} is not an integer") from None
    if value < least:
        raise GroupConfigError(f"{key}={value} must be at least {least}")
    return value
