"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on BROKER resources (dynamic broker configs).

Rule 1: a BROKER resource is named by a broker id, asked of that broker itself (Kafka's admin clients send it
there), or "" for the cluster-wide default (any broker). Another broker's id is INVALID_REQUEST.
Rule 2: an alter computes the entity's whole new dynamic config (AlterConfigs: exactly the configs given;
IncrementalAlterConfigs: SET/DELETE/APPEND/SUBTRACT on the stored one), checks it (dynamic_config.refusal:
nothing written on a refusal) and writes it to `/config/brokers/<id|<default>>` with its change notification
(coordination.broker_configs); every broker applies it from the notification. validate_only checks alone.
Rule 3: DescribeConfigs reads the dynamic configs from ZooKeeper (a describe right after an alter sees it) and
reports each key with its sources, strongest first: DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG,
STATIC_BROKER_CONFIG, DEFAULT_CONFIG; a key that is not dynamic is read-only. The default resource ("") reports
only the keys set at the default (source DYNAMIC_DEFAULT_BROKER_CONFIG), as Kafka does.
"""

from __future__ import annotations

import logging

from sparklog.broker.config import DYNAMIC_KEYS
from sparklog.broker.dynamic_config import refusal
from sparklog.broker.handlers.error_codes import INVALID_CONFIG, INVALID_REQUEST, NONE, REQUEST_TIMED_OUT
from sparklog.coordination import broker_configs
from sparklog.protocol.describe_configs import SOURCE_DYNAMIC_BROKER, SOURCE_DYNAMIC_DEFAULT_BROKER

log = logging.getLogger(__name__)

Sources = list[tuple[str, str, int]]


class BrokerResourceError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def entity(name: str, broker_id: int) -> str:
    """Rule 1: the resource's entity (`<default>` or this broker's id), else BrokerResourceError."""
    if name and name != str(broker_id):
        raise BrokerResourceError(INVALID_REQUEST, f"Unexpected broker id, expected {broker_id}, but received "
                                                   f"{name}: ask broker {name} itself")
    return broker_configs.entity_of(name)


async def read_dynamic(state) -> tuple[dict[str, str], dict[str, str]]:
    """(the default's dynamic config, this broker's own) from ZooKeeper; ({}, {}) with no ZooKeeper."""
    if state.zk is None:
        return {}, {}
    try:
        return await state.blocking(_read_pair, state.zk, str(state.broker_id))
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away: say so, never answer without the dynamic ones
        log.warning("reading the dynamic broker configs failed: %s", exc)
        raise BrokerResourceError(REQUEST_TIMED_OUT, f"ZooKeeper: {exc}") from None


def _read_pair(zk, own: str) -> tuple[dict[str, str], dict[str, str]]:
    return broker_configs.read(zk, broker_configs.DEFAULT), broker_configs.read(zk, own)


def dynamic_sources(key: str, default: dict[str, str], own: dict[str, str]) -> Sources:
    """Rule 3: the dynamic sources of one broker key, strongest first."""
    sources = [(key, own[key], SOURCE_DYNAMIC_BROKER)] if key in own else []
    if key in default:
        sources.append((key, default[key], SOURCE_DYNAMIC_DEFAULT_BROKER))
    return sources


def with_dynamic(configs: dict[str, Sources], default: dict[str, str], own: dict[str, str]) -> dict[str, Sources]:
    """Rule 3: a broker's static sources (`{key: sources}`) with the dynamic ones in front."""
    keys = sorted(set(configs) | set(default) | set(own))
    return {key: dynamic_sources(key, default, own) + configs.get(key, []) for key in keys}


def default_resource(default: dict[str, str]) -> dict[str, Sources]:
    """Rule 3: the cluster-default resource lists only what is set there."""
    return {key: [(key, value, SOURCE_DYNAMIC_DEFAULT_BROKER)] for key, value in sorted(default.items())}


def read_only(key: str) -> bool:
    return key not in DYNAMIC_KEYS


async def alter(resource, state, incremental: bool, validate_only: bool, apply_ops) -> tuple[int, str | None]:
    """Rule 2: one BROKER resource of an alter request; `apply_ops(current, configs, incremental)` is the
    admin handlers' operation semantics (ValueError naming a misused config)."""
    try:
        name = entity(resource.resource_name, state.broker_id)
        default, own = await read_dynamic(state)
    except BrokerResourceError as exc:
        return exc.code, exc.message
    is_default = name == broker_configs.DEFAULT
    try:
        wanted = apply_ops(default if is_default else own, resource.configs, incremental)
    except ValueError as exc:
        return INVALID_CONFIG, str(exc)
    after = broker_configs.effective(wanted, own) if is_default else broker_configs.effective(default, wanted)
    refused = refusal(state.config, wanted, after)
    if refused is not None:
        return refused
    if validate_only:
        return NONE, None
    try:
        await state.blocking(broker_configs.write, state.zk, name, wanted)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper unreachable: the client may retry
        log.warning("altering the dynamic config of broker %s failed: %s", name, exc)
        return REQUEST_TIMED_OUT, f"ZooKeeper: {exc}"
    return NONE, None
