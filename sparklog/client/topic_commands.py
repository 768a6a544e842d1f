"""`sparklog topics create|list|describe|alter|delete`, shaped like Kafka's `kafka-topics.sh` (and, for
`alter --config`, `kafka-configs.sh --alter --add-config/--delete-config`).

The topic commands talk to ZooKeeper (as `kafka-topics.sh --zookeeper` did); `describe` also asks each
partition's leader for its log start and end offsets when that broker is reachable. Topic configs are
checked against the storage's `LogConfig` before anything is written: a bad or unknown one is refused with
one line naming it; `alter` writes the new overrides in one set, which the brokers apply to open logs.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


def add_parser(subparsers) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    topics.add_argument("--zookeeper", default=DEFAULT_ZOOKEEPER, help="host:port[/chroot] (default %(default)s)")
    topics_sub = topics.add_subparsers(dest="topics_command", metavar="SUBCOMMAND")
    create = topics_sub.add_parser("create", help="create a topic, partitions round-robin over live brokers")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1)
    create.add_argument("--replication-factor", type=int, default=1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                        help="topic-level override (retention.ms, segment.bytes, ...); repeatable")
    create.set_defaults(func=_topics_create)
    lst = topics_sub.add_parser("list", help="list topics")
    lst.set_defaults(func=_topics_list)
    describe = topics_sub.add_parser("describe", help="partitions, leaders, replicas, ISR, log offsets")
    describe.add_argument("name", nargs="?")
    describe.set_defaults(func=_topics_describe)
    alter = topics_sub.add_parser("alter", help="add partitions, or set and delete config overrides, live")
    alter.add_argument("name")
    alter.add_argument("--partitions", type=int, help="the new (larger) number of partitions")
    alter.add_argument("--config", action="append", default=[], metavar="KEY=VALUE",
                       help="set a topic-level override; repeatable")
    alter.add_argument("--delete-config", action="append", default=[], metavar="KEY",
                       help="remove an override (back to the broker default); repeatable")
    alter.set_defaults(func=_topics_alter)
    delete = topics_sub.add_parser("delete", help="delete a topic (brokers delete their local logs)")
    delete.add_argument("name")
    delete.set_defaults(func=_topics_delete)
    for parser in (create, lst, describe, alter, delete):
        parser.add_argument("--zookeeper", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    topics.set_defaults(func=lambda args: topics.print_help() or 2)


# -- topics -----------------------------------------------------------------------------------------------------


def _zk(args):
    from sparklog.coordination.connection import connect

    return connect(args.zookeeper)


def _topics_create(args) -> int:
    from sparklog.client.config import parse_key_values
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    try:
        config = checked_overrides(parse_key_values(args.config))
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    zk = _zk(args)
    try:
        created = topics.create_topic(zk, args.name, args.partitions, args.replication_factor, config=config)
    except _topic_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Created topic {created.name} with {len(created.partitions)} partitions.")
    return 0


def _topic_errors() -> tuple[type[Exception], ...]:
    """What a topic command reports as one `error:` line (bad input or state, never a bug)."""
    from sparklog.coordination import topics

    return (topics.TopicExists, topics.UnknownTopic, topics.InvalidTopicName, topics.InvalidPartitions,
            topics.InvalidReplicationFactor, ValueError)


def checked_overrides(overrides: dict[str, str]) -> dict[str, str]:
    """`overrides` if the storage accepts them as topic configs; else ValueError naming the bad one."""
    from sparklog.storage.config import LogConfig

    LogConfig.from_dict(overrides)
    return overrides


def _topics_alter(args) -> int:
    from sparklog.client.config import parse_key_values
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    if args.partitions is None and not args.config and not args.delete_config:
        print("error: nothing to alter: give --partitions, --config or --delete-config", file=sys.stderr)
        return 2
    zk = _zk(args)
    try:
        done = []
        found = topics.get_topic(zk, args.name)
        if args.partitions is not None and args.partitions <= len(found.partitions):  # before writing anything
            raise topics.InvalidPartitions(f"topic {args.name!r} has {len(found.partitions)} partitions; "
                                           f"--partitions must be larger, not {args.partitions}")
        if args.config or args.delete_config:
            wanted = _altered_config(found.config, parse_key_values(args.config), args.delete_config)
            topics.set_topic_config(zk, args.name, wanted)
            done.append("config " + (", ".join(f"{k}={v}" for k, v in sorted(wanted.items())) or "(no overrides)"))
        if args.partitions is not None:
            topics.add_partitions(zk, args.name, args.partitions)
            done.append(f"partitions {len(found.partitions)} -> {args.partitions}")
    except _topic_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Altered topic {args.name}: {'; '.join(done)}.")
    return 0


def _altered_config(current: dict[str, str], settings: dict[str, str], deleted: list[str]) -> dict[str, str]:
    missing = sorted(set(deleted) - set(current))
    if missing:
        raise ValueError(f"cannot delete {', '.join(missing)}: not set on the topic "
                         f"(its overrides: {', '.join(sorted(current)) or 'none'})")
    wanted = {k: v for k, v in current.items() if k not in deleted}
    wanted.update(settings)
    return checked_overrides(wanted)


def _topics_list(args) -> int:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        for name in topics.list_topics(zk):
            print(name)
    finally:
        close(zk)
    return 0


def _topics_delete(args) -> int:
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        topics.delete_topic(zk, args.name)
    except (topics.UnknownTopic, topics.InvalidTopicName) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Deleted topic {args.name}.")
    return 0


def _fenced(by_broker: dict) -> str:
    """Damaged offset ranges the brokers fenced (bit rot), e.g. "1: 500-510, 900-901", or "-"."""
    return "; ".join(f"{b}: " + ", ".join(f"{s}-{e - 1}" for s, e in r) for b, r in sorted(by_broker.items())) or "-"


def _topics_describe(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from sparklog.client.admin import AdminClient
    from sparklog.client.errors import UNREACHABLE
    from sparklog.coordination import brokers, log_faults, topics
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        names = [args.name] if args.name else topics.list_topics(zk)
        try:
            found = [topics.get_topic(zk, name) for name in names]
        except (topics.UnknownTopic, topics.InvalidTopicName) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        live = brokers.live_brokers(zk)
        faults = log_faults.read_all(zk).by_partition
    finally:
        close(zk)
    console = Console()
    admin = AdminClient(bootstrap_servers=[(b.host, b.port) for b in live.values()]) if live else None
    for topic in found:
        offsets = {}
        if admin is not None:
            try:
                offsets = admin.log_offsets(topic.name, admin.describe([topic.name]).get(topic.name, {}))
            except UNREACHABLE as exc:  # what ZooKeeper knows is still worth showing; say why offsets are "?"
                print(f"warning: log offsets unavailable: {exc}", file=sys.stderr)
                admin.close()
                admin = None
        config = ", ".join(f"{k}={v}" for k, v in sorted(topic.config.items())) or "-"
        table = Table(title=f"{topic.name}  partitions={len(topic.partitions)}  "
                            f"replication={topic.replication_factor}  config: {config}")
        for column in ("partition", "leader", "replicas", "isr", "log start", "log end", "fenced (broker: offsets)"):
            table.add_column(column, justify="right" if column != "replicas" and column != "isr" else "left")
        for p, replicas in sorted(topic.partitions.items()):
            state = topic.states.get(p)
            leader = "-" if state is None else str(state.leader) + ("" if state.leader in live else " (down)")
            start, end = offsets.get(p, ("?", "?"))
            table.add_row(str(p), leader, ",".join(map(str, replicas)),
                          "-" if state is None else ",".join(map(str, state.isr)), str(start), str(end),
                          _fenced(faults.get((topic.name, p), {})))
        console.print(table)
    if admin is not None:
        admin.close()
    return 0
