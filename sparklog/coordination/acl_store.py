"""ACLs in ZooKeeper, in Kafka's layout (AclAuthorizer's ZkAclStore), and the cache each broker decides from.

    /kafka-acl/<ResourceType>/<name>                      LITERAL patterns ({"version":1,"acls":[...]})
    /kafka-acl-extended/prefixed/<ResourceType>/<name>     PREFIXED patterns (same JSON)
    /kafka-acl-changes/acl_changes_NNNNNNNNNN              a LITERAL pattern changed: "<ResourceType>:<name>"
    /kafka-acl-extended-changes/acl_changes_NNNNNNNNNN     another pattern changed: {"version":1,
                                                           "resourceType":"TOPIC","name":..,"patternType":"PREFIXED"}

with `<ResourceType>` Kafka's path name (Topic, Group, Cluster, TransactionalId, DelegationToken, User) and each
ACL `{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}`.

Rule 1: a pattern's znode is changed by compare-and-set on its version (a lost race reads again and retries), so
writers on several brokers never lose each other's ACLs; a pattern left with no ACL loses its znode. Each change
is followed by a sequential change notification naming the pattern.
Rule 2: `AclCache` watches both change directories before it reads every pattern, so no change falls between the
read and the watch; each new notification re-reads its one pattern and publishes a new snapshot (acl.py Rule 3).
Notifications older than `CHANGE_EXPIRATION_S` are deleted by the caches that see them (Kafka's 15 minutes).
Rule 3: a znode or notification that does not parse is logged once and skipped (another writer's bug must not
stop a broker from deciding); a pattern whose znode does not parse holds no ACLs.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError
from kazoo.recipe.watchers import ChildrenWatch

from sparklog.coordination.acl import (TYPE_NAMES, AccessControlEntry, AclBinding, AclBindingFilter, AclSnapshot,
                                       Operation, PatternType, Permission, ResourcePattern, ResourceType, camel,
                                       parse_member)
from sparklog.coordination.connection import retrying
from sparklog.coordination.watch import Watch

log = logging.getLogger(__name__)

LITERAL_ROOT = "/kafka-acl"
EXTENDED_ROOT = "/kafka-acl-extended"
LITERAL_CHANGES = "/kafka-acl-changes"
EXTENDED_CHANGES = "/kafka-acl-extended-changes"
CHANGE_PREFIX = "acl_changes_"
CHANGE_EXPIRATION_S = 15 * 60
_TYPES_BY_PATH_NAME = {name: t for t, name in TYPE_NAMES.items()}


def pattern_root(pattern_type: PatternType) -> str:
    return LITERAL_ROOT if pattern_type is PatternType.LITERAL else f"{EXTENDED_ROOT}/{pattern_type.name.lower()}"


def pattern_path(pattern: ResourcePattern) -> str:
    if "/" in pattern.name or pattern.name in ("", ".", ".."):
        raise ValueError(f"resource name {pattern.name!r} cannot be a znode name")
    return f"{pattern_root(pattern.pattern)}/{TYPE_NAMES[pattern.type]}/{pattern.name}"


def encode_entries(entries: Iterable[AccessControlEntry]) -> bytes:
    acls = [{"principal": e.principal, "permissionType": camel(e.permission), "operation": camel(e.operation),
             "host": e.host} for e in sorted(entries, key=_entry_order)]
    return json.dumps({"version": 1, "acls": acls}, separators=(",", ":")).encode()


def _entry_order(entry: AccessControlEntry) -> tuple:
    return entry.principal, entry.host, int(entry.operation), int(entry.permission)


def decode_entries(data: bytes) -> frozenset[AccessControlEntry]:
    """ValueError (or KeyError/TypeError) when `data` is not Kafka's ACL JSON."""
    doc = json.loads(data)
    return frozenset(AccessControlEntry(a["principal"], a["host"], parse_member(Operation, a["operation"]),
                                        parse_member(Permission, a["permissionType"])) for a in doc["acls"])


def encode_change(pattern: ResourcePattern) -> tuple[str, bytes]:
    """(the change directory, the notification's bytes) of a change of `pattern`."""
    if pattern.pattern is PatternType.LITERAL:
        return LITERAL_CHANGES, f"{TYPE_NAMES[pattern.type]}:{pattern.name}".encode()
    event = {"version": 1, "resourceType": pattern.type.name, "name": pattern.name,
             "patternType": pattern.pattern.name}
    return EXTENDED_CHANGES, json.dumps(event, separators=(",", ":")).encode()


def decode_change(directory: str, data: bytes) -> ResourcePattern:
    if directory == LITERAL_CHANGES:
        type_name, _, name = data.decode().partition(":")
        return ResourcePattern(parse_member(ResourceType, type_name), name, PatternType.LITERAL)
    event = json.loads(data)
    return ResourcePattern(parse_member(ResourceType, event["resourceType"]), event["name"],
                           parse_member(PatternType, event["patternType"]))


class AclStore:
    """Reads and writes ACLs (Rule 1). Blocking: brokers call it on their executor."""

    def __init__(self, zk: KazooClient) -> None:
        self.zk = zk

    def read(self, pattern: ResourcePattern) -> frozenset[AccessControlEntry]:
        try:
            data, _ = retrying(self.zk, self.zk.get, pattern_path(pattern))
        except NoNodeError:
            return frozenset()
        return _parsed(pattern, data)

    def load(self) -> AclSnapshot:
        """Every stored pattern and its ACLs."""
        found = {}
        for pattern_type in (PatternType.LITERAL, PatternType.PREFIXED):
            for resource_type in TYPE_NAMES:
                for name in self._children(f"{pattern_root(pattern_type)}/{TYPE_NAMES[resource_type]}"):
                    pattern = ResourcePattern(resource_type, name, pattern_type)
                    found[pattern] = self.read(pattern)
        return AclSnapshot(found)

    def add(self, bindings: Iterable[AclBinding]) -> None:
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for binding in bindings:
            by_pattern.setdefault(binding.pattern, set()).add(binding.entry)
        for pattern, entries in by_pattern.items():
            self._update(pattern, lambda old, new=entries: old | new)

    def remove(self, filters: Iterable[AclBindingFilter]) -> list[list[AclBinding]]:
        """Delete what each filter matches; per filter, the bindings it deleted."""
        filters = list(filters)
        removed: list[list[AclBinding]] = [[] for _ in filters]
        for pattern, entries in self.load().entries.items():
            chosen = [i for i, f in enumerate(filters) if f.matches_pattern(pattern)]
            if not chosen:
                continue
            gone = self._update(pattern, lambda old: frozenset(
                e for e in old if not any(filters[i].matches_entry(e) for i in chosen)))
            for i in chosen:
                removed[i] += [AclBinding(pattern, e) for e in gone if filters[i].matches_entry(e)]
        return removed

    def _update(self, pattern: ResourcePattern, change: Callable) -> frozenset[AccessControlEntry]:
        """Apply `change(old entries) -> new entries` by compare-and-set; returns the entries it took away."""
        path = pattern_path(pattern)
        while True:
            try:
                data, stat = retrying(self.zk, self.zk.get, path)
                old, version = _parsed(pattern, data), stat.version
            except NoNodeError:
                old, version = frozenset(), None
            new = frozenset(change(old))
            if new == old:
                return frozenset()
            try:
                self._write(path, new, version)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # another writer got there first: read again (Rule 1)
            self._notify(pattern)
            return old - new

    def _write(self, path: str, entries: frozenset, version: int | None) -> None:
        if version is None:
            retrying(self.zk, self.zk.create, path, encode_entries(entries), makepath=True)
        elif entries:
            retrying(self.zk, self.zk.set, path, encode_entries(entries), version=version)
        else:
            retrying(self.zk, self.zk.delete, path, version=version)

    def _notify(self, pattern: ResourcePattern) -> None:
        directory, data = encode_change(pattern)
        retrying(self.zk, self.zk.create, f"{directory}/{CHANGE_PREFIX}", data, sequence=True, makepath=True)

    def _children(self, path: str) -> list[str]:
        try:
            return retrying(self.zk, self.zk.get_children, path)
        except NoNodeError:
            return []


def _parsed(pattern: ResourcePattern, data: bytes) -> frozenset[AccessControlEntry]:
    try:
        return decode_entries(data)
    except (ValueError, KeyError, TypeError) as exc:
        log.error("ACLs of %s do not parse (%s); the pattern holds no ACL", pattern, exc)
        return frozenset()


class AclCache:
    """A broker's current ACLs (`snapshot`), kept by the change notifications (Rule 2)."""

    def __init__(self, zk: KazooClient) -> None:
        self.store = AclStore(zk)
        self.zk = zk
        self.snapshot = AclSnapshot()
        self.handle = Watch()
        self._lock = threading.Lock()
        self._seen: dict[str, dict[str, float]] = {LITERAL_CHANGES: {}, EXTENDED_CHANGES: {}}
        self._primed: set[str] = set()

    def start(self) -> AclCache:
        for directory in (LITERAL_CHANGES, EXTENDED_CHANGES):
            retrying(self.zk, self.zk.ensure_path, directory)
            ChildrenWatch(self.zk, directory, self._watcher(directory))
        snapshot = self.store.load()
        with self._lock:
            self.snapshot = snapshot
        return self

    def stop(self) -> None:
        self.handle.stop()

    def refresh(self, patterns) -> None:
        """Read `patterns` again now (after this broker wrote them: handlers/acls.py Rule 3)."""
        for pattern in patterns:
            entries = self.store.read(pattern)
            with self._lock:
                self.snapshot = self.snapshot.with_entries(pattern, entries)

    def _watcher(self, directory: str) -> Callable[[list[str]], bool]:
        def on_children(children: list[str]) -> bool:
            if self.handle.stopped:
                return False
            self._on_changes(directory, children)
            return True
        return on_children

    def _on_changes(self, directory: str, children: list[str]) -> None:
        seen = self._seen[directory]
        if directory not in self._primed:  # present before the first read: that read covers them
            self._primed.add(directory)
            seen.update(dict.fromkeys(children, time.time()))
            return
        for child in sorted(c for c in children if c not in seen):
            seen[child] = self._apply(directory, child)
        self._expire(directory, set(children))

    def _apply(self, directory: str, child: str) -> float:
        try:
            data, stat = retrying(self.zk, self.zk.get, f"{directory}/{child}")
            pattern = decode_change(directory, data)
        except NoNodeError:
            return time.time()
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
            log.error("ACL change %s/%s does not parse (%s); skipped", directory, child, exc)
            return time.time()
        entries = self.store.read(pattern)
        with self._lock:
            self.snapshot = self.snapshot.with_entries(pattern, entries)
        return stat.ctime / 1000

    def _expire(self, directory: str, present: set[str]) -> None:
        seen = self._seen[directory]
        horizon = time.time() - CHANGE_EXPIRATION_S
        for child in [c for c, created in seen.items() if c not in present or created < horizon]:
            del seen[child]
            if child in present:
                try:
                    self.zk.delete(f"{directory}/{child}")
                except NoNodeError:
                    pass
