"""`sparklog produce`, `sparklog consume` and `sparklog groups`: the console clients, like Kafka's tools.

    sparklog produce TOPIC [--key-separator :] < lines
    sparklog consume TOPIC [--group G] [--from-beginning] [--max-messages N]
    sparklog groups list | describe G | reset-offsets G --to earliest|latest|OFFSET [--topic T]

Servers come from `--bootstrap-server host:port[,...]`, else from the ZooKeeper broker registry
(`--zookeeper`, default 127.0.0.1:2181). `--property key=value` passes any client setting by its Kafka name.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    produce = subparsers.add_parser("produce", help="send lines from stdin as records")
    _connection_args(produce)
    produce.add_argument("topic")
    produce.add_argument("--key-separator", help="split each line into key SEP value at the first SEP")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.set_defaults(func=run_produce)

    consume = subparsers.add_parser("consume", help="print records of a topic")
    _connection_args(consume)
    consume.add_argument("topic")
    consume.add_argument("--group", help="consume as a member of this ZooKeeper consumer group")
    consume.add_argument("--from-beginning", action="store_true",
                         help="start at the smallest offset (new groups, or without --group)")
    consume.add_argument("--max-messages", type=int, help="exit after this many records")
    consume.add_argument("--partition", type=int, action="append", help="only these partitions (no --group)")
    consume.add_argument("--print-key", action="store_true", help="print KEY<tab>VALUE")
    consume.add_argument("--timeout-ms", type=int, default=-1, help="exit after this long without a record")
    consume.set_defaults(func=run_consume)

    groups = subparsers.add_parser("groups", help="list, describe and reset ZooKeeper consumer groups")
    groups.add_argument("--zookeeper", default=DEFAULT_ZOOKEEPER, help="host:port[/chroot] (default %(default)s)")
    groups.add_argument("--bootstrap-server", help="brokers for log end offsets (default: from ZooKeeper)")
    commands = groups.add_subparsers(dest="groups_command", metavar="SUBCOMMAND")
    commands.add_parser("list", help="every group with committed offsets or members").set_defaults(func=run_groups_list)
    describe = commands.add_parser("describe", help="per partition: owner, committed offset, log end, lag")
    describe.add_argument("group")
    describe.set_defaults(func=run_groups_describe)
    reset = commands.add_parser("reset-offsets", help="set a group's committed offsets (group must be inactive)")
    reset.add_argument("group")
    reset.add_argument("--to", required=True, help="earliest, latest or an offset")
    reset.add_argument("--topic", action="append", help="only these topics (default: every topic it committed)")
    reset.set_defaults(func=run_groups_reset)
    for parser in (commands.choices.values()):  # --zookeeper also after the subcommand, as for `topics`
        parser.add_argument("--zookeeper", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        parser.add_argument("--bootstrap-server", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    groups.set_defaults(func=lambda args: (groups.print_help(), 2)[1])


def _connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", help="host:port[,host:port] (default: from ZooKeeper)")
    parser.add_argument("--zookeeper", default=DEFAULT_ZOOKEEPER, help="host:port[/chroot] (default %(default)s)")
    parser.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                        help="a client setting by its Kafka name, e.g. compression.type=lz4")


def _properties(args: argparse.Namespace) -> dict[str, str]:
    from sparklog.client.config import parse_key_values

    try:
        return parse_key_values(args.property)
    except ValueError as exc:
        raise SystemExit(f"--property: {exc}") from None


def _servers(args: argparse.Namespace) -> dict:
    return {"bootstrap_servers": args.bootstrap_server, "zookeeper": None if args.bootstrap_server else args.zookeeper}


# -- produce / consume --------------------------------------------------------------------------------------


def run_produce(args: argparse.Namespace) -> int:
    from sparklog.client.producer import Producer

    separator = args.key_separator.encode() if args.key_separator else None
    failures = []
    with Producer(**_servers(args), **_properties(args)) as producer:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if separator is not None and separator in line:
                key, line = line.split(separator, 1)
            future = producer.send(args.topic, line, key=key, partition=args.partition)
            future.add_errback(failures.append)
        producer.flush()
    for error in failures[:5]:
        print(f"error: {error}", file=sys.stderr)
    return 1 if failures else 0


def run_consume(args: argparse.Namespace) -> int:
    settings = _properties(args)
    settings.setdefault("consumer.timeout.ms", args.timeout_ms)
    reset = "earliest" if args.from_beginning else "latest"
    out = sys.stdout.buffer
    count = 0
    consumer = _group_consumer(args, settings, reset) if args.group else _plain_consumer(args, settings, reset)
    try:
        for record in consumer:
            if args.print_key:
                out.write((record.key or b"null") + b"\t")
            out.write((record.value if record.value is not None else b"null") + b"\n")
            count += 1
            if args.max_messages is not None and count >= args.max_messages:
                break
        out.flush()
        if args.group:
            consumer.commit()
    except BrokenPipeError:
        pass
    finally:
        consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0


def _group_consumer(args, settings: dict, reset: str):
    from sparklog.client.group import GroupConsumer

    if args.bootstrap_server:
        settings["bootstrap.servers"] = args.bootstrap_server
    return GroupConsumer([args.topic], args.group, args.zookeeper, auto_offset_reset=reset, **settings)


def _plain_consumer(args, settings: dict, reset: str):
    from sparklog.client.consumer import Consumer

    settings["auto.offset.reset"] = reset
    consumer = Consumer(**_servers(args), **settings)
    partitions = args.partition or consumer.partitions_for_topic(args.topic)
    consumer.assign([(args.topic, p) for p in partitions])
    return consumer


# -- groups --------------------------------------------------------------------------------------------------


def run_groups_list(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from sparklog.client import group_registry as registry
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.offsets import list_groups

    zk = connect(args.zookeeper)
    try:
        table = Table("GROUP", "MEMBERS", "SUBSCRIBED TOPICS")
        for group in list_groups(zk):
            members = registry.list_consumers(zk, group)
            topics = sorted({t for sub in members.values() for t in sub})
            table.add_row(group, str(len(members)), ",".join(topics) or "-")
    finally:
        close(zk)
    Console().print(table)
    return 0


def describe_group(zk, group: str, bootstrap: str | None, zookeeper: str) -> list[dict]:
    """One row per partition the group committed or owns: topic, partition, owner, committed, end, lag."""
    from sparklog.client import group_registry as registry
    from sparklog.coordination.offsets import fetch_offsets

    committed = {tp: o.offset for tp, o in fetch_offsets(zk, group).items()}
    owners = registry.list_owners(zk, group)
    partitions = sorted(set(committed) | set(owners))
    ends = _end_offsets(partitions, bootstrap, zookeeper)
    rows = []
    for tp in partitions:
        offset = committed.get(tp)
        offset = None if offset is None or offset < 0 else offset
        end = ends.get(tp)
        rows.append({"topic": tp[0], "partition": tp[1], "owner": owners.get(tp), "committed": offset,
                     "log_end": end, "lag": None if end is None or offset is None else max(0, end - offset)})
    return rows


def _end_offsets(partitions, bootstrap, zookeeper) -> dict:
    if not partitions:
        return {}
    from sparklog.client.consumer import Consumer

    try:
        with Consumer(bootstrap, None if bootstrap else zookeeper) as consumer:
            return consumer.end_offsets(partitions, timeout=10)
    except Exception as exc:  # no broker up: show what ZooKeeper knows
        print(f"warning: log end offsets unavailable: {exc}", file=sys.stderr)
        return {}


def run_groups_describe(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from sparklog.coordination.connection import close, connect

    zk = connect(args.zookeeper)
    try:
        rows = describe_group(zk, args.group, args.bootstrap_server, args.zookeeper)
    finally:
        close(zk)
    if not rows:
        print(f"group {args.group!r} has no committed offsets and no owners", file=sys.stderr)
        return 1
    table = Table("TOPIC", "PARTITION", "OWNER", "COMMITTED OFFSET", "LOG END OFFSET", "LAG",
                  title=f"consumer group {args.group}")
    for row in rows:
        table.add_row(row["topic"], str(row["partition"]), row["owner"] or "-",
                      *("-" if row[k] is None else str(row[k]) for k in ("committed", "log_end", "lag")))
    Console(width=200).print(table)
    return 0


def run_groups_reset(args: argparse.Namespace) -> int:
    from sparklog.client import group_registry as registry
    from sparklog.client.consumer import Consumer
    from sparklog.coordination.connection import close, connect
    from sparklog.coordination.offsets import commit_offsets, fetch_offsets
    from sparklog.coordination.topics import get_topic

    named = args.to in ("earliest", "latest", "smallest", "largest")
    if not named and not args.to.isdigit():
        print(f"error: --to is earliest, latest or an offset (>= 0), not {args.to!r}", file=sys.stderr)
        return 2
    zk = connect(args.zookeeper)
    try:
        if registry.list_consumers(zk, args.group):
            print(f"group {args.group!r} has active members; stop them first", file=sys.stderr)
            return 1
        if args.topic:
            partitions = [(t, p) for t in args.topic for p in sorted(get_topic(zk, t).partitions)]
        else:
            partitions = sorted(fetch_offsets(zk, args.group))
        if not partitions:
            print(f"group {args.group!r} has no committed offsets; name --topic", file=sys.stderr)
            return 1
        if named:
            with Consumer(args.bootstrap_server, None if args.bootstrap_server else args.zookeeper) as consumer:
                lookup = consumer.beginning_offsets if args.to in ("earliest", "smallest") else consumer.end_offsets
                offsets = lookup(partitions, timeout=10)
        else:
            offsets = {tp: int(args.to) for tp in partitions}
        refused = commit_offsets(zk, args.group, offsets)  # refuses partitions a member claimed meanwhile
    finally:
        close(zk)
    if refused:
        print(f"error: group {args.group!r} became active; not reset: "
              + ", ".join(f"{t}-{p} (owned by {owner})" for (t, p), owner in sorted(refused.items())), file=sys.stderr)
        return 1
    for (topic, partition), offset in sorted(offsets.items()):
        print(f"{topic}\t{partition}\t{offset}")
    return 0
