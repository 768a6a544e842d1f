"""Client quotas in ZooKeeper, in Kafka's layout, and the precedence that picks the one a connection gets.

Layout (Kafka's ZK mode; names sanitized as Kafka's `Sanitizer` does: URL-encoded, `*` as %2A, a space as %20;
the default entity is the literal `<default>`):

    /config/clients/<client-id>                         {"version":1,"config":{"producer_byte_rate":"1048576"}}
    /config/users/<user>                                the same form
    /config/users/<user>/clients/<client-id>            the same form
    /config/changes/config_change_NNNNNNNNNN            persistent sequential {"version":2,"entity_path":"clients/foo"}

Rule: quota-precedence. For a connection of user U with client-id C, each quota key (producer_byte_rate,
consumer_byte_rate, request_percentage) is taken from the first of these entities that sets it (design notes
4.9, the eight levels; Kafka resolves each key on its own the same way):

    1. users/U/clients/C   2. users/U/clients/<default>   3. users/U
    4. users/<default>/clients/C   5. users/<default>/clients/<default>   6. users/<default>
    7. clients/C   8. clients/<default>

and the quota is shared by the connections of one group (broker/quota/manager.py: all of user U's producers
share a users/U quota). `resolve` is that rule; the property test in
tests/unit/coordination/test_client_quotas.py holds it to a brute-force reading of the list.
Rule: quota-values. A value is a positive finite number (request_percentage at most MAX_REQUEST_PERCENTAGE, a
byte rate at most MAX_BYTE_RATE); `check_value` refuses anything else with one line.
Rule: quota-notification. Every write of an entity's config is followed by a change notification naming it;
brokers watch /config/changes and re-read the named entity (`QuotaConfigWatch`), so a change applies on every
broker without a restart. Notifications are never deleted by brokers (Kafka's purge after 15 minutes is left
out: they are a few bytes each).
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Callable, Mapping
from urllib.parse import quote, unquote

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError, NodeExistsError
from kazoo.recipe.watchers import ChildrenWatch

from sparklog.coordination.connection import decode, encode, retrying

log = logging.getLogger(__name__)

CONFIG_CLIENTS = "/config/clients"
CONFIG_USERS = "/config/users"
CONFIG_CHANGES = "/config/changes"
CHANGE_PREFIX = "config_change_"
DEFAULT = "<default>"
CONFIG_VERSION = 1
NOTIFICATION_VERSION = 2

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
MAX_BYTE_RATE = float(2**53)  # bytes/s: past this a double no longer counts single bytes
MAX_REQUEST_PERCENTAGE = 100_000.0  # 1000 threads' worth


class QuotaValueError(ValueError):
    """A quota value that cannot be stored (Rule: quota-values)."""


@dataclass(frozen=True)
class Entity:
    """A quota entity: `user` and `client` are a name, DEFAULT, or None (the component is absent)."""

    user: str | None = None
    client: str | None = None

    def __post_init__(self) -> None:
        if self.user is None and self.client is None:
            raise ValueError("a quota entity names a user, a client-id, or both")

    @property
    def path(self) -> str:
        """Its entity path below /config ("clients/foo", "users/alice/clients/%3Cdefault%3E" is never made)."""
        if self.user is None:
            return f"clients/{sanitize(self.client)}"
        if self.client is None:
            return f"users/{sanitize(self.user)}"
        return f"users/{sanitize(self.user)}/clients/{sanitize(self.client)}"

    @property
    def znode(self) -> str:
        return f"/config/{self.path}"

    def describe(self) -> str:
        parts = []
        if self.user is not None:
            parts.append("user-principal " + ("'<default>'" if self.user == DEFAULT else f"'{self.user}'"))
        if self.client is not None:
            parts.append("client-id " + ("'<default>'" if self.client == DEFAULT else f"'{self.client}'"))
        return ", ".join(parts)


def sanitize(name: str) -> str:
    """Kafka's Sanitizer: URL-encoding with `*` as %2A and a space as %20; DEFAULT stays itself. Beyond
    Kafka's: "." and ".." are escaped (%2E), as ZooKeeper refuses them as a znode's name."""
    if name == DEFAULT:
        return name
    if not isinstance(name, str) or not name:
        raise ValueError("a quota entity name must be a non-empty string")
    if name in (".", ".."):
        return "%2E" * len(name)
    return quote(name, safe="-._").replace("~", "%7E")


def desanitize(name: str) -> str:
    return name if name == DEFAULT else unquote(name)


def entity_from_path(path: str) -> Entity:
    """"clients/foo", "users/a", "users/a/clients/b" -> Entity; ValueError for anything else."""
    parts = path.strip("/").split("/")
    if len(parts) == 2 and parts[0] == "clients":
        return Entity(client=desanitize(parts[1]))
    if len(parts) == 2 and parts[0] == "users":
        return Entity(user=desanitize(parts[1]))
    if len(parts) == 4 and parts[0] == "users" and parts[2] == "clients":
        return Entity(user=desanitize(parts[1]), client=desanitize(parts[3]))
    raise ValueError(f"not a quota entity path: {path!r}")


def precedence(user: str, client: str) -> tuple[Entity, ...]:
    """The eight entities a (user, client-id) connection looks at, most specific first (Rule: quota-precedence)."""
    return (Entity(user, client), Entity(user, DEFAULT), Entity(user, None),
            Entity(DEFAULT, client), Entity(DEFAULT, DEFAULT), Entity(DEFAULT, None),
            Entity(None, client), Entity(None, DEFAULT))


def resolve(configs: Mapping[Entity, Mapping[str, float]], user: str, client: str,
            key: str) -> tuple[Entity, float] | None:
    """The entity whose `key` quota applies to (user, client) and its value, or None (Rule: quota-precedence)."""
    for entity in precedence(user, client):
        found = configs.get(entity)
        if found is not None and key in found:
            return entity, found[key]
    return None


def check_value(key: str, text: str) -> float:
    """`text` as the value of quota `key`, or QuotaValueError in one line (Rule: quota-values)."""
    if key not in QUOTA_KEYS:
        raise QuotaValueError(f"unknown quota {key!r} (known: {', '.join(QUOTA_KEYS)})")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise QuotaValueError(f"{key}={text!r}: not a number") from None
    limit = MAX_REQUEST_PERCENTAGE if key == REQUEST_PERCENTAGE else MAX_BYTE_RATE
    if not math.isfinite(value) or value <= 0 or value > limit:
        raise QuotaValueError(f"{key}={text!r}: must be a number above 0 and at most {limit:.0f}")
    return value


def parse_config(data: bytes) -> dict[str, float]:
    """The quota keys of a stored config; values the quota-values rule refuses are logged and left out."""
    out = {}
    for key, text in _stored(data).items():
        if key not in QUOTA_KEYS:
            continue  # SCRAM credentials and other user configs share the node
        try:
            out[key] = check_value(key, text)
        except QuotaValueError as exc:
            log.warning("ignoring stored quota: %s", exc)
    return out


# -- reading and writing ---------------------------------------------------------------------------------


def read_entity_config(zk: KazooClient, entity: Entity) -> dict[str, str]:
    """Every key stored for the entity (quotas and, for users, other configs), {} if none."""
    return {str(k): str(v) for k, v in _stored(_read(zk, entity)).items()}


def _read(zk: KazooClient, entity: Entity) -> bytes:
    """The entity's config node, b"" when there is none."""
    try:
        data, _ = retrying(zk, zk.get, entity.znode)
    except NoNodeError:
        return b""
    return data


def _stored(data: bytes) -> dict:
    """The "config" of a config node; {} for a node made only as a parent (users/U above users/U/clients)."""
    return dict(decode(data).get("config", {})) if data else {}


def alter_entity_config(zk: KazooClient, entity: Entity, set_: Mapping[str, str], remove: tuple[str, ...] = ()
                        ) -> dict[str, str]:
    """Set and remove keys of one entity's config, then notify every broker (Rule: quota-notification).
    Quota keys are checked first (QuotaValueError: nothing written). Returns the config as stored."""
    for key, text in set_.items():
        if key in QUOTA_KEYS:
            check_value(key, text)
    return retrying(zk, _alter, zk, entity, dict(set_), tuple(remove))


def _alter(zk: KazooClient, entity: Entity, set_: dict, remove: tuple) -> dict[str, str]:
    config = alter_config_node(zk, entity.znode, set_, remove)
    notify(zk, entity.path)
    return config


def alter_config_node(zk: KazooClient, znode: str, set_: Mapping[str, str], remove: tuple = ()) -> dict[str, str]:
    """Set and remove keys of a `{"version":1,"config":{...}}` node (created if absent), version-checked: a
    concurrent write raises (BadVersionError, NodeExistsError) for the caller's retry. Returns the config."""
    try:
        data, stat = zk.get(znode)
        config, version = _stored(data), stat.version
    except NoNodeError:
        config, version = {}, None
    config.update(set_)
    for key in remove:
        config.pop(key, None)
    value = encode({"version": CONFIG_VERSION, "config": config})
    if version is None:
        zk.create(znode, value, makepath=True)
    else:
        zk.set(znode, value, version=version)
    return config


def notify(zk: KazooClient, entity_path: str) -> None:
    zk.ensure_path(CONFIG_CHANGES)
    zk.create(f"{CONFIG_CHANGES}/{CHANGE_PREFIX}", encode({"version": NOTIFICATION_VERSION,
                                                           "entity_path": entity_path}), sequence=True)


def list_entities(zk: KazooClient) -> list[Entity]:
    """Every entity with a config node: clients, users, and users' clients."""
    found = [Entity(client=desanitize(c)) for c in _children(zk, CONFIG_CLIENTS)]
    for user in _children(zk, CONFIG_USERS):
        found.append(Entity(user=desanitize(user)))
        found.extend(Entity(desanitize(user), desanitize(c)) for c in _children(zk, f"{CONFIG_USERS}/{user}/clients"))
    return found


def _children(zk: KazooClient, path: str) -> list[str]:
    try:
        return sorted(retrying(zk, zk.get_children, path))
    except NoNodeError:
        return []


def read_all(zk: KazooClient) -> dict[Entity, dict[str, float]]:
    """The quota configs of every entity that sets at least one quota."""
    out = {}
    for entity in list_entities(zk):
        quotas = _entity_quotas(zk, entity)
        if quotas:
            out[entity] = quotas
    return out


def _entity_quotas(zk: KazooClient, entity: Entity) -> dict[str, float]:
    return parse_config(_read(zk, entity))


class QuotaConfigWatch:
    """Keeps `on_change(entity, quotas)` told of every entity's quotas: all of them at `start`, then the entity
    each new change notification names (Rule: quota-notification). Callbacks run on kazoo's thread."""

    def __init__(self, zk: KazooClient, on_change: Callable[[Entity, dict[str, float]], None]) -> None:
        self.zk = zk
        self.on_change = on_change
        self._seen = -1  # the highest notification sequence number applied
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> None:
        try:
            retrying(self.zk, self.zk.ensure_path, CONFIG_CHANGES)
        except NodeExistsError:
            pass
        with self._lock:
            children = retrying(self.zk, self.zk.get_children, CONFIG_CHANGES)
            self._seen = max((_sequence(c) for c in children), default=-1)
            self._read_all()
        ChildrenWatch(self.zk, CONFIG_CHANGES, self._on_children)

    def close(self) -> None:
        self._closed = True

    def _on_children(self, children: list[str]) -> bool:
        if self._closed:
            return False
        with self._lock:
            for child in sorted(children, key=_sequence):
                if _sequence(child) > self._seen:
                    self._apply(child)
                    self._seen = _sequence(child)
        return True

    def _read_all(self) -> None:
        """At start: tell `on_change` of every entity (a subclass watching other entities overrides this)."""
        for entity, quotas in read_all(self.zk).items():
            self.on_change(entity, quotas)

    def _apply(self, child: str) -> None:
        try:
            data, _ = self.zk.get(f"{CONFIG_CHANGES}/{child}")
            self._on_path(decode(data)["entity_path"])
        except (NoNodeError, KeyError, ValueError, TypeError) as exc:
            log.warning("ignoring config change %s: %s", child, exc)

    def _on_path(self, path: str) -> None:
        """One notification's entity path: re-read that entity and tell `on_change` (ValueError: not one)."""
        if not path.startswith(("clients/", "users/")):
            return  # a topic's or broker's change: not a quota
        entity = entity_from_path(path)
        self.on_change(entity, _entity_quotas(self.zk, entity))


def _sequence(child: str) -> int:
    try:
        return int(child[len(CHANGE_PREFIX):])
    except ValueError:
        return -1
