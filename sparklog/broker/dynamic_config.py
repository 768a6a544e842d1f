"""Dynamic broker configs: which keys may change at runtime, the check before a write, and the application.

Rule 1: the keys are `broker.config.DYNAMIC_KEYS` (the `dynamic` flag of the one settings table). `refusal`
names what an alter may not write, before anything is written: a key no table declares (INVALID_CONFIG,
naming the nearest known key), a known key that is not dynamic (INVALID_REQUEST, Kafka's words `Cannot update
these configs dynamically: ...`), a value the setting's rule refuses, or a set of log defaults the storage
could not use together (INVALID_CONFIG, naming the key and the rule).
Rule 2: what is in force is `in_force(static, dynamic)`: the server.properties config with the dynamic keys
(coordination.broker_configs' precedence: own over `<default>`) laid over it; only `log_defaults` and
`message_max_bytes` change, `raw` stays server.properties (the STATIC_BROKER_CONFIG source). A value that
fails its rule (written to ZooKeeper by hand) is logged and left out: the broker keeps the weaker source.
Rule 3: `DynamicBrokerConfig.on_change` runs on kazoo's thread (coordination.broker_configs.BrokerConfigWatch):
it hands the new log defaults to the PartitionManager, which reconfigures every open log at once (Kafka's
`updateConfig`; topics' own overrides still win), and swaps `state.config` on the event loop, so CreateTopics
and DescribeConfigs see the new defaults without a restart.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Mapping

from sparklog.broker.config import BROKER, DYNAMIC_KEYS, BrokerConfig, ConfigError, topic_defaults
from sparklog.broker.handlers.error_codes import INVALID_CONFIG, INVALID_REQUEST
from sparklog.coordination.broker_configs import effective
from sparklog.storage.config import KEYS as STORAGE_KEYS
from sparklog.storage.config import LogConfig

log = logging.getLogger(__name__)


def refusal(static: BrokerConfig, wanted: Mapping[str, str], after: Mapping[str, str]) -> tuple[int, str] | None:
    """Rule 1: (error code, message) if `wanted` (an entity's whole new dynamic config) may not be written,
    `after` being the dynamic keys that would then be in force on this broker; None when it may."""
    unknown = sorted(key for key in wanted if key not in BROKER)
    if unknown:
        return INVALID_CONFIG, unknown_message(unknown[0])
    static_keys = sorted(key for key in wanted if key not in DYNAMIC_KEYS)
    if static_keys:
        return INVALID_REQUEST, f"Cannot update these configs dynamically: {', '.join(static_keys)}"
    try:
        for key, value in wanted.items():
            BROKER[key].parse(value, ConfigError)
        defaults = topic_defaults({**static.raw, **after})
        LogConfig.from_dict({k: v for k, v in defaults.items() if k in STORAGE_KEYS})
    except ValueError as exc:
        return INVALID_CONFIG, str(exc)
    return None


def unknown_message(key: str) -> str:
    nearest = BROKER.nearest(key)
    return f"unknown broker config {key!r}" + (f"; did you mean {nearest!r}?" if nearest else "")


def in_force(static: BrokerConfig, dynamic: Mapping[str, str]) -> BrokerConfig:
    """Rule 2: the config in force with the dynamic keys `dynamic` laid over server.properties."""
    valid = {}
    for key, value in dynamic.items():
        try:
            if key not in DYNAMIC_KEYS:
                raise ConfigError(f"{key} cannot be updated dynamically")
            BROKER[key].parse(value, ConfigError)
            valid[key] = value
        except ValueError as exc:
            log.warning("dynamic broker config %s=%s not applied: %s", key, value, exc)
    props = {**static.raw, **valid}
    return dataclasses.replace(static, log_defaults=topic_defaults(props),
                               message_max_bytes=BROKER.value(props, "message.max.bytes"))


class DynamicBrokerConfig:
    """Rule 3: applies each change of this broker's dynamic configs to the partitions and the handlers."""

    def __init__(self, static: BrokerConfig, set_log_defaults: Callable[[dict[str, str]], None],
                 set_config: Callable[[BrokerConfig], None]) -> None:
        self.static = static
        self.set_log_defaults = set_log_defaults
        self.set_config = set_config
        self.applied: dict[str, str] = {}  # the dynamic keys in force now

    def on_change(self, default: dict[str, str], own: dict[str, str]) -> None:
        dynamic = effective(default, own)
        if dynamic == self.applied:
            return
        config = in_force(self.static, dynamic)
        self.set_log_defaults(config.log_defaults)
        self.set_config(config)
        self.applied = dynamic
        log.info("dynamic broker configs in force: %s", ", ".join(f"{k}={v}" for k, v in sorted(dynamic.items()))
                 or "none")
