"""`sparklog topics --bootstrap-server HOST:PORT ...`: the topic commands through the brokers' Admin API, as
Kafka 3's `kafka-topics.sh --bootstrap-server` works (CreateTopics, Metadata, CreatePartitions, DeleteTopics,
DescribeConfigs, IncrementalAlterConfigs, and ListOffsets at each leader for `describe`'s offsets).

Rule 1: the same command reads the same with `--zookeeper`; what only ZooKeeper knows (the brokers' fenced
ranges and cleaner reports in `describe`; `elect-leaders` and `reassign`, which write ZooKeeper requests) is
left out of `describe` and refused in one line for the others.
Rule 2: a broker's per-topic error is raised as its Kafka error (cli Rule 3: one line).
"""

from __future__ import annotations

import argparse

from sparklog.cli.columns import print_columns
from sparklog.cli.topic_rules import checked_overrides, parse_replica_assignment, partition_status

# Kafka's DescribeConfigs config_source of a topic's own override (DYNAMIC_TOPIC_CONFIG)
TOPIC_OVERRIDE = 1
ADMIN_COLUMNS = ("partition", "leader", "replicas", "isr", "status", "log start", "log end")


def run(args: argparse.Namespace, timeout_s: float) -> int:
    """Rule 1: the subcommand in `args.topics_command`, through the Admin API."""
    from sparklog.client.admin import AdminClient

    command = {"create": _create, "list": _list, "describe": _describe, "alter": _alter,
               "delete": _delete}.get(args.topics_command)
    if command is None:
        raise ValueError(f"topics {args.topics_command} writes a request in ZooKeeper: give --zookeeper "
                         "HOST:PORT[/chroot] (the brokers' zookeeper.connect) instead of --bootstrap-server")
    with AdminClient(bootstrap_servers=args.bootstrap_server) as admin:
        return command(admin, args, timeout_s)


def _create(admin, args, timeout_s) -> int:
    from sparklog.client.config import parse_key_values

    config = checked_overrides(parse_key_values(args.config))
    assignment = parse_replica_assignment(args.replica_assignment) if args.replica_assignment else None
    admin.create_topic(args.name, args.partitions, args.replication_factor, config=config, assignment=assignment)
    print(f"Created topic {args.name}.")
    return 0


def _list(admin, args, *_) -> int:
    for name in sorted(t.name for t in admin.metadata(None).topics if not t.error_code):
        print(name)
    return 0


def _delete(admin, args, *_) -> int:
    admin.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0


def _alter(admin, args, timeout_s) -> int:
    from sparklog.client.config import parse_key_values

    if args.partitions is None and not args.config and not args.delete_config:
        raise ValueError("nothing to alter: give --partitions, --config or --delete-config")
    if args.replica_assignment:
        raise ValueError("--replica-assignment with --bootstrap-server: give --zookeeper to place new partitions")
    done = []
    if args.config or args.delete_config:
        settings = checked_overrides(parse_key_values(args.config))
        admin.alter_configs(args.name, settings, tuple(args.delete_config))
        done.append("config")
    if args.partitions is not None:
        admin.create_partitions(args.name, args.partitions)
        done.append(f"partitions -> {args.partitions}")
    print(f"Altered topic {args.name}: {'; '.join(done)}.")
    return 0


def _describe(admin, args, timeout_s) -> int:
    response = admin.metadata([args.name] if args.name else None)
    topics = [t for t in response.topics if not t.error_code]
    missing = [t.name for t in response.topics if t.error_code]
    if args.name and missing:
        raise ValueError(f"topic {args.name!r} does not exist")
    live = {b.node_id for b in response.brokers}
    leaders = {(t.name, p.partition_index): p.leader_id for t in topics for p in t.partitions if p.leader_id in live}
    offsets, silent = admin.leader_offsets(leaders, timeout_s) if leaders else ({}, set())
    shown = 0
    for topic in sorted(topics, key=lambda t: t.name):
        rows = []
        for p in sorted(topic.partitions, key=lambda p: p.partition_index):
            state = argparse.Namespace(leader=p.leader_id, isr=list(p.isr_nodes))
            status = partition_status(list(p.replica_nodes), state, live, silent)
            if (args.under_replicated_partitions and status != "under-replicated") or (
                    args.unavailable_partitions and status not in ("offline", "unreachable")):
                continue
            start, end = offsets.get((topic.name, p.partition_index), ("?", "?"))
            leader = "none" if p.leader_id < 0 else f"{p.leader_id}" + (" (unreachable)" if p.leader_id in silent else "")
            rows.append((p.partition_index, leader, ",".join(map(str, p.replica_nodes)),
                         ",".join(map(str, p.isr_nodes)), status, start, end))
        if not rows and (args.under_replicated_partitions or args.unavailable_partitions):
            continue
        overrides = {k: v for k, (v, source) in admin.describe_configs(topic.name).items() if source == TOPIC_OVERRIDE}
        config = ", ".join(f"{k}={v}" for k, v in sorted(overrides.items())) or "-"
        replication = max((len(p.replica_nodes) for p in topic.partitions), default=0)
        print(("\n" if shown else "") + f"{topic.name}  partitions={len(topic.partitions)}  "
              f"replication={replication}  config: {config}")
        print_columns(ADMIN_COLUMNS, rows)
        shown += 1
    return 0
