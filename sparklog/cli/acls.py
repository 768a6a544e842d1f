"""`sparklog acls`: add, remove and list ACLs through the brokers (CreateAcls, DeleteAcls, DescribeAcls), in
the forms of Kafka's `kafka-acls.sh`:

    sparklog acls --bootstrap-server B [--command-config FILE] --add --allow-principal User:alice
                  [--allow-host H] [--deny-principal P [--deny-host H]] [--operation Read ...]
                  --topic T | --group G | --cluster | --transactional-id X [--resource-pattern-type prefixed]
    sparklog acls ... --add --allow-principal User:alice --producer --topic T [--transactional-id X]
                  [--idempotent]
    sparklog acls ... --add --allow-principal User:alice --consumer --topic T --group G
    sparklog acls ... --remove [--allow-principal P ...] [--operation ...] RESOURCES [--force]
    sparklog acls ... --list [RESOURCES] [--principal P] [--resource-pattern-type any|match|literal|prefixed]

Rule 1 (kafka-acls' defaults): no `--operation` means ALL; a principal without a host of its kind means every
host (`*`); `--producer` is WRITE, DESCRIBE and CREATE on each topic, WRITE and DESCRIBE on each transactional
id, and IDEMPOTENT_WRITE on the cluster with `--idempotent` or a transactional id; `--consumer` is READ and
DESCRIBE on each topic and READ on each group (a group is required). `--resource-pattern-type` is LITERAL
unless given; `--add` takes LITERAL or PREFIXED only.
Rule 2: `--remove` without `--force` asks on stdin (y/n) before deleting, as kafka-acls does; a principal not
given removes every principal's ACLs of the resources named. `--list` without a resource lists every ACL.
Rule 3: `--command-config FILE` is a properties file of client settings (librdkafka's names), as for Kafka's
tools; a setting the client does not know is refused in one line (cli.py Rule 3).
"""

from __future__ import annotations

import argparse
import sys

from sparklog.coordination.acl import (CLUSTER_NAME, AccessControlEntry, AclBinding, AclBindingFilter, Operation,
                                       PatternType, Permission, ResourcePattern, ResourceType, parse_member)

DEFAULT_TIMEOUT_MS = 30000


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    acls = subparsers.add_parser("acls", help="add, remove and list ACLs (kafka-acls' forms)")
    acls.add_argument("--bootstrap-server", required=True, help="host:port[,host:port]")
    acls.add_argument("--command-config", metavar="FILE", help="client settings (a .properties file)")
    action = acls.add_mutually_exclusive_group(required=True)
    for name in ("add", "remove", "list"):
        action.add_argument(f"--{name}", action="store_true")
    for name in ("allow-principal", "deny-principal", "allow-host", "deny-host", "operation", "topic", "group",
                 "transactional-id"):
        acls.add_argument(f"--{name}", action="append", default=[])
    acls.add_argument("--principal", help="--list: only this principal's ACLs")
    acls.add_argument("--cluster", action="store_true")
    acls.add_argument("--resource-pattern-type", default="literal", help="literal (default), prefixed, any, match")
    acls.add_argument("--producer", action="store_true")
    acls.add_argument("--consumer", action="store_true")
    acls.add_argument("--idempotent", action="store_true")
    acls.add_argument("--force", action="store_true", help="--remove without asking")
    acls.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_MS, metavar="MS")
    acls.set_defaults(func=run)


def resources(args: argparse.Namespace, pattern: PatternType) -> list[ResourcePattern]:
    found = [ResourcePattern(ResourceType.TOPIC, t, pattern) for t in args.topic]
    found += [ResourcePattern(ResourceType.GROUP, g, pattern) for g in args.group]
    found += [ResourcePattern(ResourceType.TRANSACTIONAL_ID, x, pattern) for x in args.transactional_id]
    if args.cluster:
        found.append(ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL))
    return found


def _operations(args: argparse.Namespace) -> list[Operation]:
    return [parse_member(Operation, op) for op in args.operation] or [Operation.ALL]


def _principals(args: argparse.Namespace) -> list[tuple[str, str, Permission]]:
    """(principal, host, permission) of every principal given, with its kind's hosts (Rule 1)."""
    return [(p, host, permission) for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, Permission.ALLOW), (args.deny_principal, args.deny_host,
                                                                    Permission.DENY))
            for p in principals for host in (hosts or ["*"])]


def _convenience(args: argparse.Namespace, pattern: PatternType) -> list[tuple[ResourcePattern, Operation]]:
    """(resource, operation) pairs of --producer / --consumer (Rule 1)."""
    pairs = []
    topics = [ResourcePattern(ResourceType.TOPIC, t, pattern) for t in args.topic]
    if args.producer:
        pairs += [(t, op) for t in topics for op in (Operation.WRITE, Operation.DESCRIBE, Operation.CREATE)]
        pairs += [(ResourcePattern(ResourceType.TRANSACTIONAL_ID, x, pattern), op) for x in args.transactional_id
                  for op in (Operation.WRITE, Operation.DESCRIBE)]
        if args.idempotent or args.transactional_id:
            pairs.append((ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME), Operation.IDEMPOTENT_WRITE))
    if args.consumer:
        if not args.group:
            raise ValueError("--consumer needs --group")
        pairs += [(t, op) for t in topics for op in (Operation.READ, Operation.DESCRIBE)]
        pairs += [(ResourcePattern(ResourceType.GROUP, g, pattern), Operation.READ) for g in args.group]
    return pairs


def bindings_to_add(args: argparse.Namespace) -> list[AclBinding]:
    pattern = parse_member(PatternType, args.resource_pattern_type)
    if pattern not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise ValueError(f"--add takes --resource-pattern-type literal or prefixed, not {args.resource_pattern_type}")
    principals = _principals(args)
    if not principals:
        raise ValueError("--add needs --allow-principal or --deny-principal")
    if args.producer or args.consumer:
        pairs = _convenience(args, pattern)
    else:
        pairs = [(r, op) for r in resources(args, pattern) for op in _operations(args)]
    if not pairs:
        raise ValueError("--add needs a resource: --topic, --group, --cluster or --transactional-id")
    return [AclBinding(r, AccessControlEntry(p, host, op, permission)) for r, op in pairs
            for p, host, permission in principals]


def filters_to_remove(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern = parse_member(PatternType, args.resource_pattern_type)
    named = resources(args, pattern)
    if not named:
        raise ValueError("--remove needs a resource: --topic, --group, --cluster or --transactional-id")
    who = [(p, h, perm) for p, h, perm in _principals(args)] or [(None, None, Permission.ANY)]
    operations = [parse_member(Operation, op) for op in args.operation] or [Operation.ANY]
    return [AclBindingFilter(r.type, r.name, r.pattern, p, h, op, perm) for r in named for p, h, perm in who
            for op in operations]


def filters_to_list(args: argparse.Namespace) -> list[AclBindingFilter]:
    pattern = parse_member(PatternType, args.resource_pattern_type)
    named = resources(args, pattern)
    if not named:
        return [AclBindingFilter(principal=args.principal)]
    return [AclBindingFilter(r.type, r.name, r.pattern, principal=args.principal) for r in named]


def print_bindings(bindings: list[AclBinding], out=sys.stdout) -> None:
    by_pattern: dict[ResourcePattern, list[AccessControlEntry]] = {}
    for binding in bindings:
        by_pattern.setdefault(binding.pattern, []).append(binding.entry)
    for pattern, entries in sorted(by_pattern.items(), key=lambda item: str(item[0])):
        print(f"Current ACLs for resource `{pattern}`: ", file=out)
        for entry in sorted(set(entries), key=str):
            print(f" \t{entry} ", file=out)
        print(file=out)


def _admin(args: argparse.Namespace):
    from sparklog.broker.config import load_properties
    from sparklog.client.admin import AdminClient

    settings = load_properties(args.command_config) if args.command_config else {}
    settings["request.timeout.ms"] = args.timeout
    return AdminClient(args.bootstrap_server, **settings)


def run(args: argparse.Namespace) -> int:
    if args.add:
        bindings = bindings_to_add(args)
        with _admin(args) as admin:
            admin.create_acls(bindings)
        print(f"Adding ACLs for resources: {', '.join(sorted({str(b.pattern) for b in bindings}))}")
        print_bindings(bindings)
        return 0
    if args.remove:
        filters = filters_to_remove(args)
        if not args.force:
            print("Are you sure you want to remove ACLs matching the filters given? (y/n)", flush=True)
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                print("Nothing removed")
                return 0
        with _admin(args) as admin:
            removed = [b for gone in admin.delete_acls(filters) for b in gone]
        print(f"Removed {len(removed)} ACLs")
        print_bindings(removed)
        return 0
    with _admin(args) as admin:
        found = {b for f in filters_to_list(args) for b in admin.describe_acls(f)}
    print_bindings(sorted(found, key=str))
    return 0
