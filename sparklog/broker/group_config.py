"""The broker's group coordinator settings, read from the Kafka-named properties (declared here in `GROUP`,
part of config.py's broker table).

Rule: a bad value is a `ConfigError` naming the key, as for every broker setting.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from sparklog.settings import INT, Definitions, Setting

DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS = 3000  # group.initial.rebalance.delay.ms
DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS = 6000  # group.min.session.timeout.ms
DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS = 1800000  # group.max.session.timeout.ms (30 minutes)
DEFAULT_GROUP_MAX_SIZE = 2147483647  # group.max.size (unbounded)
DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS = 50  # offsets.topic.num.partitions


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
), error=GroupConfigError)
GROUP_KEYS = set(GROUP)


@dataclass(frozen=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = DEFAULT_GROUP_INITIAL_REBALANCE_DELAY_MS
    min_session_timeout_ms: int = DEFAULT_GROUP_MIN_SESSION_TIMEOUT_MS
    max_session_timeout_ms: int = DEFAULT_GROUP_MAX_SESSION_TIMEOUT_MS
    max_size: int = DEFAULT_GROUP_MAX_SIZE
    offsets_topic_num_partitions: int = DEFAULT_OFFSETS_TOPIC_NUM_PARTITIONS

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> "GroupConfig":
        config = cls(*GROUP.values_of(props))
        if config.min_session_timeout_ms > config.max_session_timeout_ms:
            raise GroupConfigError(f"group.min.session.timeout.ms={config.min_session_timeout_ms} is above "
                                   f"group.max.session.timeout.ms={config.max_session_timeout_ms}")
        return config

