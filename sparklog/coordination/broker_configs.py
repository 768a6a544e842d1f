"""Dynamic broker configs in ZooKeeper, in Kafka's layout, and the watch that tells a broker of their changes.

Layout (Kafka's ZK mode; the cluster-wide default entity is the literal `<default>`):

    /config/brokers/<broker id>                 {"version":1,"config":{"log.retention.ms":"60000"}}
    /config/brokers/<default>                   the same form: the default of every broker
    /config/changes/config_change_NNNNNNNNNN    persistent sequential {"version":2,"entity_path":"brokers/1"}

Rule: broker-config-notification. Every write of a broker entity's config replaces its whole config node and is
followed by a change notification naming it (the notification client_quotas writes for quotas, the same
sequence), so every broker re-reads that entity and applies it without a restart (`BrokerConfigWatch`).
Rule: broker-config-precedence. For broker B a key is taken from `/config/brokers/B`, else from
`/config/brokers/<default>`, else from B's server.properties, else Kafka's default (`effective`), the order
of DescribeConfigs' sources DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
DEFAULT_CONFIG. Values are checked by the broker before they are written (broker/dynamic_config.py), not here.
"""

from __future__ import annotations

from typing import Callable, Mapping

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from sparklog.coordination.client_quotas import CONFIG_VERSION, DEFAULT, QuotaConfigWatch, notify
from sparklog.coordination.connection import decode, encode, retrying

CONFIG_BROKERS = "/config/brokers"
ENTITY_KIND = "brokers/"

__all__ = ["CONFIG_BROKERS", "DEFAULT", "BrokerConfigWatch", "entity_of", "read", "write", "effective"]


def entity_of(resource_name: str) -> str:
    """A BROKER resource's name ("" for the cluster default, else a broker id) -> its entity name; ValueError
    for anything else (the name becomes a znode)."""
    if resource_name == "":
        return DEFAULT
    if not resource_name.isdigit() or len(resource_name) > 10:
        raise ValueError(f"broker resource name {resource_name!r} is not a broker id (or empty: the default)")
    return str(int(resource_name))


def read(zk: KazooClient, entity: str) -> dict[str, str]:
    """The entity's dynamic config, {} when it has none."""
    try:
        data, _ = retrying(zk, zk.get, f"{CONFIG_BROKERS}/{entity}")
    except NoNodeError:
        return {}
    config = decode(data).get("config", {}) if data else {}
    return {str(k): str(v) for k, v in dict(config).items()}


def write(zk: KazooClient, entity: str, config: Mapping[str, str]) -> None:
    """Replace the entity's dynamic config and notify every broker (Rule: broker-config-notification)."""
    retrying(zk, _write, zk, f"{CONFIG_BROKERS}/{entity}", encode({"version": CONFIG_VERSION,
                                                                    "config": dict(config)}))
    retrying(zk, notify, zk, ENTITY_KIND + entity)


def _write(zk: KazooClient, path: str, value: bytes) -> None:
    if zk.exists(path) is None:
        zk.create(path, value, makepath=True)
    else:
        zk.set(path, value)


def effective(default: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The dynamic keys in force on a broker: its own over the default (Rule: broker-config-precedence)."""
    return {**default, **own}


class BrokerConfigWatch(QuotaConfigWatch):
    """Keeps `on_change(default, own)` told of broker `broker_id`'s dynamic configs: at `start`, then on every
    notification naming `brokers/<default>` or `brokers/<broker_id>`. Callbacks run on kazoo's thread."""

    def __init__(self, zk: KazooClient, broker_id: int,
                 on_change: Callable[[dict[str, str], dict[str, str]], None]) -> None:
        super().__init__(zk, on_change)  # type: ignore[arg-type]
        self.entities = (DEFAULT, str(broker_id))

    def _read_all(self) -> None:
        self.on_change(*(read(self.zk, entity) for entity in self.entities))

    def _on_path(self, path: str) -> None:
        if path.startswith(ENTITY_KIND) and path[len(ENTITY_KIND):] in self.entities:
            self._read_all()
