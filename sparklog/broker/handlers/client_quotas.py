"""DescribeClientQuotas and AlterClientQuotas (KIP-546) over the quota configs in ZooKeeper.

Rule 1: an entity is one or two components, "user" and/or "client-id", each at most once; a null name is the
default entity. Any other type, a repeated type or an empty entity is INVALID_REQUEST, with nothing written.
Rule 2: AlterClientQuotas checks every op of an entry before writing it (client_quotas' quota-values rule: a
value that is not positive, finite and within bounds, or an unknown key, is INVALID_REQUEST and that entry
writes nothing); validate_only writes nothing at all. Each entry is one write of its entity's config and one
change notification (coordination.client_quotas), so every broker applies it without a restart. A byte rate
is stored as a whole number of bytes, as Kafka stores it.
Rule 3: DescribeClientQuotas answers the entities stored now that set at least one quota and match every
filter component (MATCH_EXACT: that name; MATCH_DEFAULT: the default; MATCH_ANY: any name, the default too);
with `strict`, entities with a component the filter does not name are left out.
"""

from __future__ import annotations

import logging

from sparklog.broker.handlers.error_codes import INVALID_REQUEST, NONE, REQUEST_TIMED_OUT
from sparklog.coordination import client_quotas as cq
from sparklog.coordination.client_quotas import DEFAULT, Entity, QuotaValueError
from sparklog.protocol.api_keys import ApiKey
from sparklog.protocol.client_quotas import (CLIENT_ID, MATCH_ANY, MATCH_DEFAULT, MATCH_EXACT, USER,
                                             AlterClientQuotasResponse, DescribeClientQuotasResponse)

log = logging.getLogger(__name__)
_TYPES = (USER, CLIENT_ID)


class EntityError(ValueError):
    """Rule 1."""


def entity_of(components: list[tuple[str, str | None]]) -> Entity:
    """An Entity from (entity_type, name or None) pairs (Rule 1)."""
    names: dict[str, str] = {}
    for kind, name in components:
        if kind not in _TYPES:
            raise EntityError(f"unknown quota entity type {kind!r} (known: user, client-id)")
        if kind in names:
            raise EntityError(f"entity type {kind!r} given twice")
        if name == "":
            raise EntityError(f"empty {kind} name (a null name is the default entity)")
        names[kind] = DEFAULT if name is None else name
    if not names:
        raise EntityError("an entity names a user, a client-id, or both")
    return Entity(names.get(USER), names.get(CLIENT_ID))


def stored_text(key: str, value: float) -> str:
    """The text a value is stored as (Rule 2): checked, byte rates as whole bytes."""
    text = str(int(value)) if key != cq.REQUEST_PERCENTAGE and float(value).is_integer() else repr(float(value))
    cq.check_value(key, text)
    return text


def handle_alter_client_quotas(request, state):
    return _alter(request.body, state)


async def _alter(body, state) -> AlterClientQuotasResponse:
    results = []
    for entry in body.entries:
        components = [(c.entity_type, c.entity_name) for c in entry.entity]
        code, message = await _alterentry_of(components, entry.ops, body.validate_only, state)
        results.append(AlterClientQuotasResponse.EntryData(
            error_code=code, error_message=message, entity=[AlterClientQuotasResponse.EntryData.EntityData(
                entity_type=kind, entity_name=name) for kind, name in components]))
    return AlterClientQuotasResponse(throttle_time_ms=0, entries=results)


async def _alterentry_of(components, ops, validate_only: bool, state) -> tuple[int, str | None]:
    try:
        entity = entity_of(components)
        to_set = {op.key: stored_text(op.key, op.value) for op in ops if not op.remove}
        to_remove = tuple(op.key for op in ops if op.remove)
        for key in to_remove:
            if key not in cq.QUOTA_KEYS:
                raise QuotaValueError(f"unknown quota {key!r}")
    except (EntityError, QuotaValueError) as exc:
        return INVALID_REQUEST, str(exc)
    if validate_only:
        return NONE, None
    try:
        await state.blocking(cq.alter_entity_config, state.zk, entity, to_set, to_remove)
    except Exception as exc:  # noqa: BLE001 - ZooKeeper away: say so, never "done"
        log.warning("altering the quotas of %s failed: %s", entity.describe(), exc)
        return REQUEST_TIMED_OUT, f"ZooKeeper: {exc}"
    return NONE, None


def handle_describe_client_quotas(request, state):
    return _describe(request.body, state)


async def _describe(body, state) -> DescribeClientQuotasResponse:
    try:
        filters = filters_of(body.components)
    except EntityError as exc:
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=INVALID_REQUEST, error_message=str(exc),
                                            entries=None)
    try:
        stored = await state.blocking(cq.read_all, state.zk)
    except Exception as exc:  # noqa: BLE001
        return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=REQUEST_TIMED_OUT,
                                            error_message=f"ZooKeeper: {exc}", entries=None)
    entries = [entry_of(entity, quotas) for entity, quotas in sorted(stored.items(), key=lambda item: item[0].path)
               if matches(entity, filters, body.strict)]
    return DescribeClientQuotasResponse(throttle_time_ms=0, error_code=NONE, error_message=None, entries=entries)


def filters_of(components) -> dict[str, tuple[int, str | None]]:
    filters: dict[str, tuple[int, str | None]] = {}
    for c in components:
        if c.entity_type not in _TYPES or c.entity_type in filters:
            raise EntityError(f"bad filter component {c.entity_type!r} (user and client-id, each at most once)")
        if c.match_type not in (MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY) or (c.match_type == MATCH_EXACT) != (
                c.match is not None):
            raise EntityError(f"bad match for {c.entity_type!r}: type {c.match_type}, match {c.match!r}")
        filters[c.entity_type] = (c.match_type, c.match)
    return filters


def matches(entity: Entity, filters: dict, strict: bool) -> bool:
    names = {USER: entity.user, CLIENT_ID: entity.client}
    for kind, (match_type, match) in filters.items():
        name = names[kind]
        if name is None:
            return False
        if match_type == MATCH_EXACT and name != match or match_type == MATCH_DEFAULT and name != DEFAULT:
            return False
    return not strict or all(kind in filters for kind, name in names.items() if name is not None)


def entry_of(entity: Entity, quotas: dict[str, float]):
    entry = DescribeClientQuotasResponse.EntryData
    components = [(USER, entity.user), (CLIENT_ID, entity.client)]
    return entry(entity=[entry.EntityData(entity_type=kind, entity_name=None if name == DEFAULT else name)
                         for kind, name in components if name is not None],
                 values=[entry.ValueData(key=key, value=value) for key, value in sorted(quotas.items())])


QUOTA_HANDLERS = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    ApiKey.ALTER_CLIENT_QUOTAS: handle_alter_client_quotas,
}
