"""The authorizer in the broker: every request checked against acl_table.TABLE before its handler runs.

Built only when `authorizer.class.name` is set (`Authorization.from_config`); without it the dispatcher runs the
handlers as they are and nothing here costs anything.

Rule 1: a `Whole` check that fails answers the whole request with its error code, the handler never running:
in the response's `error_code`, and in every entry of the `Each` array mirrored from the request.
Rule 2: an `Each` check runs per entry: the denied entries are taken out of the request, the handler answers the
rest, and the denied ones are answered with the check's code (per partition where the response is per
partition), as Kafka does. A request asking for "all" (OffsetFetch's null topics, Metadata's) has the entries it
may not DESCRIBE taken out of the answer instead: a principal never learns of a topic it may not describe.
Rule 3: the APIs marked `special` in the table (Metadata, the listing APIs, the config APIs, ...) are enforced by
their function here, from the same table's operations.
Rule 4: the Produce and Fetch fast paths (dispatch Rules 4-6) are declined whenever this is configured: their
requests take the general path, through Rules 1-3.
Rule 5: every denial is logged, one line (principal, host, operation, resource), at most `DENIAL_LOG_PER_S`
lines a second; the lines held back are counted in the next line written. What a listing leaves out (Rule 2's
"all", ListGroups, ListTransactions) is not a denial and is not logged, as in Kafka.
"""

from __future__ import annotations

import logging
import time
from types import CoroutineType
from typing import Any, Callable

from sparklog.broker import acl_table
from sparklog.broker.acl_table import (CLUSTER, CONFIG_CHECKS, CONFIG_OPERATIONS, DESCRIBE, FIND_COORDINATOR_KEYS,
                                       GROUP, GROUP_AUTHORIZATION_FAILED, REPORTED_OPERATIONS, TABLE, TOPIC,
                                       TOPIC_AUTHORIZATION_FAILED, TXN, Each, Rule)
from sparklog.coordination.acl import CLUSTER_NAME, Authorizer, Operation, ResourceType, parse_super_users
from sparklog.protocol import errors
from sparklog.protocol.find_coordinator import BATCHED_VERSION
from sparklog.protocol.offset_fetch import GROUPS_VERSION
from sparklog.protocol.registry import RESPONSES

log = logging.getLogger(__name__)

DENIAL_LOG_PER_S = 10
OPERATION_NOT_ATTEMPTED = errors.OperationNotAttemptedError.errno
# Kafka's authorizer class names, both accepted as the one authorizer sparklog has
AUTHORIZER_CLASS_NAMES = ("kafka.security.authorizer.AclAuthorizer", "kafka.security.auth.SimpleAclAuthorizer")


def check_authorizer_class_name(value: str | None) -> str | None:
    """`authorizer.class.name`'s rule: empty (no authorization) or one of Kafka's names."""
    if not value or value in AUTHORIZER_CLASS_NAMES:
        return None
    return f"{value!r} is not an authorizer sparklog has (one of {', '.join(AUTHORIZER_CLASS_NAMES)}, or empty)"


class Authorization:
    """The decision over a live ACL cache (anything with a `snapshot`), and the denial log (Rule 5)."""

    def __init__(self, cache: Any, authorizer: Authorizer, clock: Callable[[], float] = time.monotonic) -> None:
        self.cache = cache
        self.authorizer = authorizer
        self.clock = clock
        self._second = 0
        self._logged = 0
        self._held_back = 0
        self.denials = 0

    @classmethod
    def from_config(cls, config: Any, cache: Any) -> Authorization:
        return cls(cache, Authorizer(parse_super_users(config.super_users), config.allow_everyone_if_no_acl_found))

    def allows(self, request: Any, operation: Operation, resource: ResourceType, name: str) -> bool:
        host = request.client_host.lstrip("/")
        if self.authorizer.authorize(self.cache.snapshot, request.principal, host, operation, resource, name):
            return True
        self.denials += 1
        self._log_denial(request.principal, host, operation, resource, name)
        return False

    def operations(self, request: Any, resource: ResourceType, name: str) -> int:
        """The `*_authorized_operations` bits of `resource` for the request's principal."""
        return self.authorizer.authorized_operations(self.cache.snapshot, request.principal,
                                                     request.client_host.lstrip("/"), resource, name,
                                                     REPORTED_OPERATIONS[resource])

    def _log_denial(self, principal: str, host: str, operation: Operation, resource: ResourceType,
                    name: str) -> None:
        second = int(self.clock())
        if second != self._second:
            self._second, self._logged = second, 0
        if self._logged >= DENIAL_LOG_PER_S:
            self._held_back += 1
            return
        self._logged += 1
        more = f" ({self._held_back} earlier denials not logged)" if self._held_back else ""
        self._held_back = 0
        log.warning("Principal = %s is Denied Operation = %s from host = %s on resource = %s:%s%s", principal,
                    operation.name, host, resource.name, name, more)


def guarded(handlers: dict) -> dict:
    """The handlers, each behind its API's checks (an API missing from the table is refused: Rule 1)."""
    return {api_key: _guard(api_key, handler) for api_key, handler in handlers.items()}


def _guard(api_key: int, handler: Callable) -> Callable:
    rule = TABLE.get(api_key, Rule((acl_table._CLUSTER[Operation.ALTER],)))

    def checked(request, state):
        return enforce(rule, handler, request, state)
    return checked


def enforce(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    auth, body = state.authorization, request.body
    for check in rule.whole:
        name = check.name(body)
        if name is not None and not auth.allows(request, check.operation, check.resource, name):
            return deny_whole(request, check.code, rule)
    if rule.special is not None:
        return SPECIAL[rule.special](rule, handler, request, state)
    if rule.each is not None:
        return split(rule.each, handler, request, state)
    return handler(request, state)


# ---- building answers


def _struct(cls: Any, field: str) -> Any:
    return next(f.struct_cls for f in cls._fields if f.name == field)


def _has(cls: Any, field: str) -> bool:
    return any(f.name == field for f in cls._fields)


def mirror(each: Each, response_cls: Any, entry: Any, code: int) -> Any:
    """The response entry answering a request entry with `code` (per partition where the API answers so)."""
    element = _struct(response_cls, each.response)
    fields = {each.response_key: entry if each.key is None else getattr(entry, each.key)}
    if each.partitions is None:
        fields[each.error] = code
    else:
        parts, index, response_parts, response_index = each.partitions
        part_cls = _struct(element, response_parts)
        fields[response_parts] = [part_cls(**{response_index: p if index is None else getattr(p, index),
                                              each.error: code}) for p in getattr(entry, parts)]
    return element(**fields)


def deny_whole(request: Any, code: int, rule: Rule) -> Any:
    """Rule 1's answer. A Produce with acks=0 is answered by nothing, as its success would be."""
    if request.api_key == 0 and request.body.acks == 0:
        return None
    cls = RESPONSES[request.api_key]
    response = cls(**({"error_code": code} if _has(cls, "error_code") else {}))
    if rule.each is not None:
        entries = getattr(request.body, rule.each.request) or []
        setattr(response, rule.each.response, [mirror(rule.each, cls, e, code) for e in entries])
    if rule.special in DENY_SPECIAL:
        DENY_SPECIAL[rule.special](request.body, response, code)
    return response


def then(result: Any, fn: Callable[[Any], Any]) -> Any:
    """`fn(response)` of a handler's result, now or when its coroutine resolves; None stays None."""
    if result.__class__ is CoroutineType:
        async def later():
            response = await result
            return None if response is None else fn(response)
        return later()
    return None if result is None else fn(result)


def _name(each: Each, entry: Any) -> str:
    return entry if each.key is None else getattr(entry, each.key)


def split(each: Each, handler: Callable, request: Any, state: Any) -> Any:
    """Rule 2."""
    body, auth = request.body, state.authorization
    if each.skip_replicas and body.replica_id >= 0:
        return handler(request, state)
    entries = getattr(body, each.request)
    if entries is None:
        return then(handler(request, state), lambda r: _hide(each, r, request, auth))
    allowed, denied = [], []
    for entry in entries:
        ok = auth.allows(request, each.operation, each.resource, _name(each, entry))
        (allowed if ok else denied).append(entry)
    if not denied:
        return handler(request, state)
    cls = RESPONSES[request.api_key]
    answers = [mirror(each, cls, e, each.code) for e in denied]
    if not allowed:
        return deny_whole(request, 0, Rule()) if request.api_key == 0 and body.acks == 0 else _answer(
            cls, each, answers)
    setattr(body, each.request, allowed)
    return then(handler(request, state), lambda r: _append(r, each.response, answers))


def _answer(cls: Any, each: Each, answers: list) -> Any:
    response = cls()
    setattr(response, each.response, answers)
    return response


def _append(response: Any, field: str, answers: list) -> Any:
    setattr(response, field, list(getattr(response, field)) + answers)
    return response


def _hide(each: Each, response: Any, request: Any, auth: Authorization) -> Any:
    kept = [e for e in getattr(response, each.response)
            if _quiet_allows(auth, request, DESCRIBE, each.resource, getattr(e, each.response_key))]
    setattr(response, each.response, kept)
    return response


# ---- Rule 3: the special APIs


def _metadata(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    body, auth = request.body, state.authorization
    cls = RESPONSES[request.api_key]
    everything = body.topics is None or (not body.topics and request.api_version == 0)
    denied: list[str] = []
    if not everything:
        known = state.partitions.snapshot.topics
        create = (state.config.auto_create_topics_enable and body.allow_auto_topic_creation
                  and not _quiet_allows(auth, request, Operation.CREATE, CLUSTER, CLUSTER_NAME))
        allowed = []
        for topic in body.topics:  # a topic asked by id (null name) is checked under the name it has
            name = topic.name if topic.name is not None else state.partitions.snapshot.topic_named_by_id(
                topic.topic_id)
            ok = name is None or auth.allows(request, DESCRIBE, TOPIC, name) and (
                name in known or not create or auth.allows(request, Operation.CREATE, TOPIC, name))
            (allowed if ok else denied).append(topic)
        body.topics = allowed
        names = {t.name if t.name is not None else state.partitions.snapshot.topic_named_by_id(t.topic_id)
                 for t in allowed}
    element = _struct(cls, "topics")
    unnamed = None if request.api_version >= 12 else ""  # an unknown id's answer (metadata.unnamed_topic)

    def finish(response):
        if everything:
            response.topics = [t for t in response.topics if _quiet_allows(auth, request, DESCRIBE, TOPIC, t.name)]
        else:
            response.topics = [t for t in response.topics if t.name in names or t.name == unnamed]
            response.topics += [element(name=unnamed if t.name is None else t.name, topic_id=t.topic_id,
                                        error_code=TOPIC_AUTHORIZATION_FAILED) for t in denied]
        if body.include_topic_authorized_operations:
            for topic in response.topics:
                topic.topic_authorized_operations = auth.operations(request, TOPIC, topic.name)
        if body.include_cluster_authorized_operations:
            response.cluster_authorized_operations = auth.operations(request, CLUSTER, CLUSTER_NAME)
        return response
    return then(handler(request, state), finish)


def _quiet_allows(auth: Authorization, request: Any, operation: Operation, resource: ResourceType,
                  name: str) -> bool:
    """A check whose failure is not a denial of its own (another check decides): not logged."""
    return auth.authorizer.authorize(auth.cache.snapshot, request.principal, request.client_host.lstrip("/"),
                                     operation, resource, name)


def _describe_groups(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    auth = state.authorization

    def with_operations(response):
        if request.body.include_authorized_operations:
            for group in response.groups:
                if group.error_code == 0:
                    group.authorized_operations = auth.operations(request, GROUP, group.group_id)
        return response
    return then(split(rule.each, handler, request, state), with_operations)


def _list_groups(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    auth = state.authorization
    if _quiet_allows(auth, request, DESCRIBE, CLUSTER, CLUSTER_NAME):
        return handler(request, state)

    def hide(response):
        response.groups = [g for g in response.groups if _quiet_allows(auth, request, DESCRIBE, GROUP, g.group_id)]
        return response
    return then(handler(request, state), hide)


def _find_coordinator(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    """v0-3: the table's Whole checks alone; v4+ (batched keys): Rule 2 over coordinator_keys."""
    checks = FIND_COORDINATOR_KEYS.get(request.body.key_type)
    if request.api_version < BATCHED_VERSION or checks is None:  # an unknown key type: the handler refuses it
        return handler(request, state)
    return split(Each(DESCRIBE, checks[0], "coordinator_keys", None, "coordinators", "key", checks[1]), handler,
                 request, state)


def _describe_topic_partitions(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    """Named topics: the table's Each check. None named (every topic, KIP-966): the request is narrowed, before
    the handler pages it, to the topics the principal may DESCRIBE from the cursor's on; a cursor naming one it
    may not describe is dropped, the page starting at the next it may (Rule 2's "all", as Kafka filters)."""
    body, auth = request.body, state.authorization
    if body.topics:
        assert rule.each is not None
        return split(rule.each, handler, request, state)
    start = "" if body.cursor is None else body.cursor.topic_name
    allowed = [name for name in sorted(state.partitions.snapshot.topics)
               if name >= start and _quiet_allows(auth, request, DESCRIBE, TOPIC, name)]
    if not allowed:  # an empty list would mean every topic again
        return RESPONSES[request.api_key](throttle_time_ms=0, topics=[], next_cursor=None)
    if body.cursor is not None and body.cursor.topic_name != allowed[0]:
        body.cursor = None
    body.topics = [_struct(type(body), "topics")(name=name) for name in allowed]
    return handler(request, state)


def _offset_fetch(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    """v0-7: the table's Each check; v8+ (batched groups): a group it may not DESCRIBE is answered
    GROUP_AUTHORIZATION_FAILED, and Rule 2 runs over each other group's topics."""
    if request.api_version < GROUPS_VERSION:
        return split(rule.each, handler, request, state)
    body, auth = request.body, state.authorization
    group_cls = _struct(RESPONSES[request.api_key], "groups")
    topic_cls = _struct(group_cls, "topics")
    part_cls = _struct(topic_cls, "partitions")
    allowed, denied, hidden, everything = [], [], {}, set()
    for group in body.groups:
        if not auth.allows(request, DESCRIBE, GROUP, group.group_id):
            denied.append(group)
            continue
        allowed.append(group)
        if group.topics is None:
            everything.add(group.group_id)
            continue
        ok = [auth.allows(request, DESCRIBE, TOPIC, t.name) for t in group.topics]
        hidden[group.group_id] = [t for t, yes in zip(group.topics, ok) if not yes]
        group.topics = [t for t, yes in zip(group.topics, ok) if yes]
    body.groups = allowed

    def finish(response):
        for group in response.groups:
            if group.group_id in everything:
                group.topics = [t for t in group.topics if _quiet_allows(auth, request, DESCRIBE, TOPIC, t.name)]
            elif hidden.get(group.group_id) and group.error_code == 0:
                group.topics = list(group.topics) + [topic_cls(name=t.name, partitions=[
                    part_cls(partition_index=p, committed_offset=-1, error_code=TOPIC_AUTHORIZATION_FAILED)
                    for p in t.partition_indexes]) for t in hidden[group.group_id]]
        response.groups = list(response.groups) + [
            group_cls(group_id=g.group_id, topics=[], error_code=GROUP_AUTHORIZATION_FAILED) for g in denied]
        return response
    return then(handler(request, state), finish)


def _list_transactions(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    auth = state.authorization

    def hide(response):
        response.transaction_states = [t for t in response.transaction_states
                                       if _quiet_allows(auth, request, DESCRIBE, TXN, t.transactional_id)]
        return response
    return then(handler(request, state), hide)


def _create_topics(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    if _quiet_allows(state.authorization, request, Operation.CREATE, CLUSTER, CLUSTER_NAME):
        return handler(request, state)
    return split(rule.each, handler, request, state)


def _describe_cluster(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    auth = state.authorization

    def with_operations(response):
        if request.body.include_cluster_authorized_operations:
            response.cluster_authorized_operations = auth.operations(request, CLUSTER, CLUSTER_NAME)
        return response
    return then(handler(request, state), with_operations)


def _configs(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    auth, body = state.authorization, request.body
    operation = CONFIG_OPERATIONS[request.api_key]
    cls = RESPONSES[request.api_key]
    field = "results" if _has(cls, "results") else "responses"
    element = _struct(cls, field)
    allowed, answers = [], []
    for resource in body.resources:
        kind, name, code = CONFIG_CHECKS.get(resource.resource_type, (CLUSTER, CLUSTER_NAME,
                                                                      acl_table.CLUSTER_AUTHORIZATION_FAILED))
        if auth.allows(request, operation, kind, name or resource.resource_name):
            allowed.append(resource)
        else:
            answers.append(element(error_code=code, resource_type=resource.resource_type,
                                   resource_name=resource.resource_name))
    if not answers:
        return handler(request, state)
    body.resources = allowed
    if not allowed:
        response = cls()
        setattr(response, field, answers)
        return response
    return then(handler(request, state), lambda r: _append(r, field, answers))


def _add_partitions_to_txn(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    body, auth = request.body, state.authorization
    cls = RESPONSES[request.api_key]
    if request.api_version >= 4:
        if auth.allows(request, Operation.CLUSTER_ACTION, CLUSTER, CLUSTER_NAME):
            return handler(request, state)
        return cls(error_code=acl_table.CLUSTER_AUTHORIZATION_FAILED)
    txn = body.v3_and_below_transactional_id
    if not auth.allows(request, Operation.WRITE, TXN, txn):
        return _txn_partitions(cls, body, lambda name: acl_table.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    denied = {t.name for t in body.v3_and_below_topics if not auth.allows(request, Operation.WRITE, TOPIC, t.name)}
    if not denied:
        return handler(request, state)
    return _txn_partitions(cls, body, lambda name: TOPIC_AUTHORIZATION_FAILED if name in denied
                           else OPERATION_NOT_ATTEMPTED)


def _txn_partitions(cls: Any, body: Any, code: Callable[[str], int]) -> Any:
    topic_cls = _struct(cls, "results_by_topic_v3_and_below")
    part_cls = _struct(topic_cls, "results_by_partition")
    return cls(results_by_topic_v3_and_below=[topic_cls(name=t.name, results_by_partition=[
        part_cls(partition_index=p, partition_error_code=code(t.name)) for p in t.partitions])
        for t in body.v3_and_below_topics])


def _deny_markers(body: Any, response: Any, code: int) -> None:
    marker_cls = _struct(type(response), "markers")
    topic_cls = _struct(marker_cls, "topics")
    part_cls = _struct(topic_cls, "partitions")
    response.markers = [marker_cls(producer_id=m.producer_id, topics=[topic_cls(name=t.name, partitions=[
        part_cls(partition_index=p, error_code=code) for p in t.partition_indexes]) for t in m.topics])
        for m in body.markers]


def _deny_add_partitions(body: Any, response: Any, code: int) -> None:
    if body.v3_and_below_topics:
        response.results_by_topic_v3_and_below = _txn_partitions(type(response), body,
                                                                 lambda name: code).results_by_topic_v3_and_below


def _delete_topics(rule: Rule, handler: Callable, request: Any, state: Any) -> Any:
    """DeleteTopics: v0-v5 by Rule 2 over `topic_names`; v6 entries (a name or an id) are checked under the name
    the id has (an id no topic has is left to the handler: UNKNOWN_TOPIC_ID); a denied one named by id is
    answered without its name, as Kafka does, so that a denial does not tell the name."""
    if request.api_version < 6:
        return split(rule.each, handler, request, state)
    body, auth = request.body, state.authorization
    allowed, denied = [], []
    for topic in body.topics:
        name = topic.name if topic.name is not None else state.partitions.snapshot.topic_named_by_id(topic.topic_id)
        (allowed if name is None or auth.allows(request, rule.each.operation, TOPIC, name) else denied).append(topic)
    if not denied:
        return handler(request, state)
    element = _struct(RESPONSES[request.api_key], "responses")
    answers = [element(name=t.name, topic_id=t.topic_id, error_code=TOPIC_AUTHORIZATION_FAILED) for t in denied]
    body.topics = allowed
    return then(handler(request, state), lambda r: _append(r, "responses", answers))


SPECIAL = {"metadata": _metadata, "describe_groups": _describe_groups, "list_groups": _list_groups,
           "describe_topic_partitions": _describe_topic_partitions,
           "find_coordinator": _find_coordinator, "offset_fetch": _offset_fetch,
           "list_transactions": _list_transactions, "create_topics": _create_topics,
           "describe_cluster": _describe_cluster, "configs": _configs,
           "add_partitions_to_txn": _add_partitions_to_txn, "delete_topics": _delete_topics,
           "write_txn_markers": lambda rule, handler, request, state: handler(request, state)}  # Whole checks only
def _deny_acl_writes(body: Any, response: Any, code: int) -> None:
    """CreateAcls and DeleteAcls have no top-level error: each creation or filter is answered with `code`."""
    field, results, requested = (("results", "results", body.creations) if hasattr(body, "creations")
                                 else ("filter_results", "filter_results", body.filters))
    setattr(response, results, [_struct(type(response), field)(error_code=code) for _ in requested])


def _deny_client_quotas(body: Any, response: Any, code: int) -> None:
    """AlterClientQuotas has no top-level error: each entry is answered with `code`, its entity mirrored."""
    entry_cls = _struct(type(response), "entries")
    entity_cls = _struct(entry_cls, "entity")
    response.entries = [entry_cls(error_code=code, entity=[entity_cls(entity_type=e.entity_type,
                                                                       entity_name=e.entity_name)
                                                            for e in entry.entity]) for entry in body.entries]


def _deny_scram_writes(body: Any, response: Any, code: int) -> None:
    """AlterUserScramCredentials has no top-level error: each user named is answered with `code`."""
    result_cls = _struct(type(response), "results")
    users = dict.fromkeys(c.name for c in [*body.deletions, *body.upsertions])
    response.results = [result_cls(user=user, error_code=code) for user in users]


SPECIAL["create_acls"] = SPECIAL["delete_acls"] = SPECIAL["write_txn_markers"]
SPECIAL["alter_client_quotas"] = SPECIAL["alter_user_scram"] = SPECIAL["write_txn_markers"]
DENY_SPECIAL = {"write_txn_markers": _deny_markers, "add_partitions_to_txn": _deny_add_partitions,
                "create_acls": _deny_acl_writes, "delete_acls": _deny_acl_writes,
                "alter_client_quotas": _deny_client_quotas, "alter_user_scram": _deny_scram_writes}
