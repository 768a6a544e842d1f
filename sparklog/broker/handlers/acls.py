"""DescribeAcls, CreateAcls and DeleteAcls: the ACLs in ZooKeeper (coordination/acl_store.py), read and written
through the broker's ACL cache; `handle_x(request, state) -> response`, with the Rules of the handlers package.

Rule 1: without an authorizer (`authorizer.class.name` empty) every one answers SECURITY_DISABLED, as Kafka's
brokers do; ALTER (Create/Delete) or DESCRIBE (Describe) on the cluster is checked before (acl_table.py).
Rule 2: CreateAcls answers each creation on its own: one that cannot be stored (acl.check_binding: ANY or
UNKNOWN codes, a MATCH pattern, a cluster not named kafka-cluster, ...) is INVALID_REQUEST naming the problem,
the others are written. DeleteAcls answers each filter with the bindings it deleted.
Rule 3: after a write the patterns it touched are read again into this broker's cache, so a describe right
after a create on the same broker sees it; other brokers see it through the change notifications.
Rule 4: DescribeAcls answers from the cache, grouped by resource pattern, as Kafka's brokers do.
"""

from __future__ import annotations

from sparklog.broker.handlers.error_codes import INVALID_REQUEST
from sparklog.coordination.acl import (AccessControlEntry, AclBinding, AclBindingFilter, Operation, PatternType,
                                       Permission, ResourcePattern, ResourceType, check_binding)
from sparklog.protocol import errors
from sparklog.protocol.acls import (CreateAclsResponse, DeleteAclsResponse, DescribeAclsResponse)
from sparklog.protocol.api_keys import ApiKey

SECURITY_DISABLED = errors.SecurityDisabledError.errno
_DISABLED = "no authorizer is configured on this broker (authorizer.class.name)"


def _enum(kind, code: int):
    """A wire code as its enum member, UNKNOWN for a code the enum does not have."""
    try:
        return kind(code)
    except ValueError:
        return kind.UNKNOWN


def to_filter(f) -> AclBindingFilter:
    """A Describe/DeleteAcls filter from the wire."""
    return AclBindingFilter(_enum(ResourceType, f.resource_type_filter), f.resource_name_filter,
                            _enum(PatternType, f.pattern_type_filter), f.principal_filter, f.host_filter,
                            _enum(Operation, f.operation), _enum(Permission, f.permission_type))


def filter_problem(acl_filter: AclBindingFilter) -> str | None:
    if PatternType.UNKNOWN in (acl_filter.pattern,) or ResourceType.UNKNOWN == acl_filter.resource_type:
        return "the filter has an unknown resource or pattern type"
    if Operation.UNKNOWN == acl_filter.operation or Permission.UNKNOWN == acl_filter.permission:
        return "the filter has an unknown operation or permission"
    return None


def handle_describe_acls(request, state) -> DescribeAclsResponse:
    if state.authorization is None:
        return DescribeAclsResponse(error_code=SECURITY_DISABLED, error_message=_DISABLED)
    acl_filter = to_filter(request.body)
    problem = filter_problem(acl_filter)
    if problem:
        return DescribeAclsResponse(error_code=INVALID_REQUEST, error_message=problem)
    resource_cls = DescribeAclsResponse.DescribeAclsResource
    acl_cls = resource_cls.AclDescription
    resources = []
    for pattern, entries in sorted(state.authorization.cache.snapshot.entries.items(), key=lambda i: str(i[0])):
        matching = [e for e in entries if acl_filter.matches(AclBinding(pattern, e))]
        if matching:
            resources.append(resource_cls(resource_type=pattern.type, resource_name=pattern.name,
                                          pattern_type=pattern.pattern, acls=[acl_cls(
                                              principal=e.principal, host=e.host, operation=e.operation,
                                              permission_type=e.permission) for e in sorted(matching, key=str)]))
    return DescribeAclsResponse(resources=resources)


def handle_create_acls(request, state):
    result_cls = CreateAclsResponse.AclCreationResult
    creations = request.body.creations
    if state.authorization is None:
        return CreateAclsResponse(results=[result_cls(error_code=SECURITY_DISABLED, error_message=_DISABLED)
                                           for _ in creations])
    bindings = [AclBinding(ResourcePattern(_enum(ResourceType, c.resource_type), c.resource_name,
                                           _enum(PatternType, c.resource_pattern_type)),
                           AccessControlEntry(c.principal, c.host, _enum(Operation, c.operation),
                                              _enum(Permission, c.permission_type))) for c in creations]
    problems = [check_binding(b) for b in bindings]
    valid = [b for b, problem in zip(bindings, problems) if problem is None]
    results = [result_cls(error_code=INVALID_REQUEST if p else 0, error_message=p) for p in problems]
    if not valid:
        return CreateAclsResponse(results=results)
    return _create(state, valid, results)


async def _create(state, bindings: list, results: list) -> CreateAclsResponse:
    cache = state.authorization.cache
    await state.blocking(cache.store.add, bindings)
    await state.blocking(cache.refresh, {b.pattern for b in bindings})
    return CreateAclsResponse(results=results)


def handle_delete_acls(request, state):
    result_cls = DeleteAclsResponse.DeleteAclsFilterResult
    filters = [to_filter(f) for f in request.body.filters]
    if state.authorization is None:
        return DeleteAclsResponse(filter_results=[result_cls(error_code=SECURITY_DISABLED, error_message=_DISABLED)
                                                  for _ in filters])
    problems = [filter_problem(f) for f in filters]
    return _delete(state, filters, problems)


async def _delete(state, filters: list, problems: list) -> DeleteAclsResponse:
    result_cls = DeleteAclsResponse.DeleteAclsFilterResult
    matching_cls = result_cls.DeleteAclsMatchingAcl
    cache = state.authorization.cache
    usable = [f for f, problem in zip(filters, problems) if problem is None]
    removed = iter(await state.blocking(cache.store.remove, usable) if usable else [])
    results = []
    touched = set()
    for problem in problems:
        if problem:
            results.append(result_cls(error_code=INVALID_REQUEST, error_message=problem))
            continue
        gone = next(removed)
        touched |= {b.pattern for b in gone}
        results.append(result_cls(matching_acls=[matching_cls(
            resource_type=b.pattern.type, resource_name=b.pattern.name, pattern_type=b.pattern.pattern,
            principal=b.entry.principal, host=b.entry.host, operation=b.entry.operation,
            permission_type=b.entry.permission) for b in gone]))
    if touched:
        await state.blocking(cache.refresh, touched)
    return DeleteAclsResponse(filter_results=results)


ACL_HANDLERS = {
    ApiKey.DESCRIBE_ACLS: handle_describe_acls,
    ApiKey.CREATE_ACLS: handle_create_acls,
    ApiKey.DELETE_ACLS: handle_delete_acls,
}
