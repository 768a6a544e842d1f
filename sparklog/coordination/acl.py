"""Kafka's ACL model and the authorizer's decision (AclAuthorizer's rules), sans-IO: no ZooKeeper, no sockets.

The model is Kafka's (`org.apache.kafka.common.acl` / `resource`), with its wire codes: a `ResourcePattern` is a
resource type, a name and a pattern type (LITERAL: that name, or every name when it is `*`; PREFIXED: every name
starting with it); an `AccessControlEntry` is a principal (`User:alice`, `User:*` for everyone), a host (an IP,
or `*`), an operation and ALLOW or DENY. An `AclBinding` is the two together; an `AclBindingFilter` selects
bindings (DescribeAcls, DeleteAcls), its ANY and MATCH values matching more than one.

Rule 1 (the decision, `Authorizer.authorize`): a principal named in `super.users` is allowed everything. Else the
ACLs that apply to a resource are those of the LITERAL pattern of its name, of the LITERAL pattern `*` of its
type, and of every PREFIXED pattern of its type its name starts with. No ACL applies at all: allowed only when
`allow.everyone.if.no.acl.found` is true. Else a DENY entry that matches (principal: the same or `User:*`; host:
the same or `*`; operation: the same or ALL) denies, whatever ALLOW entries say (DENY beats ALLOW); else an
ALLOW entry that matches allows, where an ALLOW of an operation also allows the operations it implies
(`IMPLIED_BY`); else denied.
Rule 2: DESCRIBE is implied by READ, WRITE, DELETE and ALTER; DESCRIBE_CONFIGS by ALTER_CONFIGS; every
operation by ALL. A DENY is never widened by implication (a DENY of READ does not deny DESCRIBE), as in Kafka.
Rule 3: the decision reads one immutable `AclSnapshot` (pattern -> entries); a new set of ACLs is a new
snapshot (`with_entries`), so a decision never sees half an update.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Iterable, Mapping

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD = "*"  # a LITERAL name matching every resource of its type; a host matching every host
WILDCARD_PRINCIPAL = "User:*"


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Rule 2: operation -> the operations whose ALLOW also allows it (itself and ALL included)
IMPLIED_BY: Mapping[Operation, frozenset[Operation]] = MappingProxyType({
    op: frozenset({op, Operation.ALL} | (
        {Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER} if op is Operation.DESCRIBE else
        {Operation.ALTER_CONFIGS} if op is Operation.DESCRIBE_CONFIGS else set()))
    for op in Operation})
CONCRETE_TYPES = tuple(t for t in ResourceType if t > ResourceType.ANY)
CONCRETE_OPERATIONS = tuple(op for op in Operation if op > Operation.ANY)
# Kafka's names in ZooKeeper paths and the ACL JSON (SecurityUtils.resourceTypeName, AclEntry's camel case)
TYPE_NAMES = MappingProxyType({ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group",
                               ResourceType.CLUSTER: "Cluster", ResourceType.TRANSACTIONAL_ID: "TransactionalId",
                               ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User"})


def camel(member: enum.Enum) -> str:
    """CLUSTER_ACTION -> ClusterAction: the ACL JSON's spelling of an operation or a permission."""
    return "".join(part.capitalize() for part in member.name.split("_"))


def parse_member(kind: type[enum.Enum], text: str) -> enum.Enum:
    """An enum member from its name in any case and with or without underscores (Read, READ, ClusterAction,
    cluster_action, Cluster-Action); ValueError naming the allowed values otherwise."""
    wanted = text.replace("_", "").replace("-", "").lower()
    for member in kind:
        if member.name.replace("_", "").lower() == wanted:
            return member
    raise ValueError(f"{text!r} is not a {kind.__name__} ({', '.join(m.name for m in kind)})")


@dataclass(frozen=True)
class ResourcePattern:
    type: ResourceType
    name: str
    pattern: PatternType = PatternType.LITERAL

    def __str__(self) -> str:
        return f"ResourcePattern(resourceType={self.type.name}, name={self.name}, patternType={self.pattern.name})"


@dataclass(frozen=True)
class AccessControlEntry:
    principal: str
    host: str
    operation: Operation
    permission: Permission

    def __str__(self) -> str:
        return (f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
                f"permissionType={self.permission.name})")


@dataclass(frozen=True)
class AclBinding:
    pattern: ResourcePattern
    entry: AccessControlEntry


def check_binding(binding: AclBinding) -> str | None:
    """Why a binding cannot be stored (CreateAcls answers INVALID_REQUEST with it), or None."""
    pattern, entry = binding.pattern, binding.entry
    if pattern.type not in CONCRETE_TYPES:
        return f"resource type {pattern.type.name} cannot be stored"
    if pattern.pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"pattern type {pattern.pattern.name} cannot be stored"
    if not pattern.name or "/" in pattern.name:
        return f"resource name {pattern.name!r} must be non-empty and free of '/'"
    if pattern.type is ResourceType.CLUSTER and pattern.name != CLUSTER_NAME:
        return f"the cluster resource is named {CLUSTER_NAME!r}, not {pattern.name!r}"
    if entry.operation not in CONCRETE_OPERATIONS or entry.permission not in (Permission.ALLOW, Permission.DENY):
        return f"operation {entry.operation.name} / permission {entry.permission.name} cannot be stored"
    if ":" not in entry.principal or not entry.host:
        return f"principal {entry.principal!r} must be TYPE:NAME and the host non-empty"
    return None


@dataclass(frozen=True)
class AclBindingFilter:
    """None for a name, principal or host matches any."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: Permission = Permission.ANY

    def matches(self, binding: AclBinding) -> bool:
        return self.matches_pattern(binding.pattern) and self.matches_entry(binding.entry)

    def matches_pattern(self, pattern: ResourcePattern) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type != pattern.type:
            return False
        if self.pattern is PatternType.MATCH:
            return self.name is None or _applies(pattern, self.name)
        if self.pattern is not PatternType.ANY and self.pattern != pattern.pattern:
            return False
        return self.name is None or self.name == pattern.name

    def matches_entry(self, entry: AccessControlEntry) -> bool:
        return ((self.principal is None or self.principal == entry.principal)
                and (self.host is None or self.host == entry.host)
                and (self.operation is Operation.ANY or self.operation == entry.operation)
                and (self.permission is Permission.ANY or self.permission == entry.permission))


def _applies(pattern: ResourcePattern, name: str) -> bool:
    """Does `pattern` (of the right type) cover the resource `name` (Rule 1)?"""
    if pattern.pattern is PatternType.LITERAL:
        return pattern.name == name or pattern.name == WILDCARD
    return pattern.pattern is PatternType.PREFIXED and name.startswith(pattern.name)


class AclSnapshot:
    """An immutable set of ACLs, indexed for the decision (Rule 3)."""

    __slots__ = ("entries", "_literal", "_prefixed")

    def __init__(self, entries: Mapping[ResourcePattern, frozenset[AccessControlEntry]] | None = None) -> None:
        self.entries = MappingProxyType({p: frozenset(e) for p, e in (entries or {}).items() if e})
        self._literal: dict[tuple[ResourceType, str], frozenset[AccessControlEntry]] = {}
        self._prefixed: dict[ResourceType, list[tuple[str, frozenset[AccessControlEntry]]]] = {}
        for pattern, found in self.entries.items():
            if pattern.pattern is PatternType.LITERAL:
                self._literal[(pattern.type, pattern.name)] = found
            else:
                self._prefixed.setdefault(pattern.type, []).append((pattern.name, found))

    def with_entries(self, pattern: ResourcePattern, entries: Iterable[AccessControlEntry]) -> AclSnapshot:
        """A new snapshot where `pattern` has exactly `entries` (none: the pattern is gone)."""
        return AclSnapshot({**self.entries, pattern: frozenset(entries)})

    def bindings(self) -> list[AclBinding]:
        return [AclBinding(p, e) for p, found in self.entries.items() for e in found]

    def applying(self, resource_type: ResourceType, name: str) -> list[frozenset[AccessControlEntry]]:
        """The entry sets of every pattern that covers the resource (Rule 1)."""
        found = [self._literal.get((resource_type, name)), self._literal.get((resource_type, WILDCARD))]
        sets = [s for s in found if s]
        sets += [s for prefix, s in self._prefixed.get(resource_type, ()) if name.startswith(prefix)]
        return sets


def parse_super_users(text: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return frozenset(p.strip() for p in (text or "").split(";") if p.strip())


@dataclass(frozen=True)
class Authorizer:
    """Rule 1 over a snapshot. `host` is the client's IP as written in ACLs (no leading '/')."""

    super_users: frozenset[str] = frozenset()
    allow_everyone_if_no_acl_found: bool = False

    def authorize(self, acls: AclSnapshot, principal: str, host: str, operation: Operation,
                  resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        sets = acls.applying(resource_type, name)
        if not sets:
            return self.allow_everyone_if_no_acl_found
        allowing = IMPLIED_BY[operation]
        allowed = False
        for entries in sets:
            for entry in entries:
                if not _matches_who(entry, principal, host):
                    continue
                if entry.permission is Permission.DENY:
                    if entry.operation is operation or entry.operation is Operation.ALL:
                        return False
                elif entry.operation in allowing:
                    allowed = True
        return allowed

    def authorized_operations(self, acls: AclSnapshot, principal: str, host: str, resource_type: ResourceType,
                              name: str, operations: Iterable[Operation]) -> int:
        """The bit field of Kafka's `*_authorized_operations`: bit `op` set for each allowed operation."""
        bits = 0
        for op in operations:
            if self.authorize(acls, principal, host, op, resource_type, name):
                bits |= 1 << op
        return bits


def _matches_who(entry: AccessControlEntry, principal: str, host: str) -> bool:
    return ((entry.principal == principal or entry.principal == WILDCARD_PRINCIPAL)
            and (entry.host == host or entry.host == WILDCARD))
