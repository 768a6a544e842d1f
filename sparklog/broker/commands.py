"""`sparklog broker start` and `sparklog topics create|list|describe|delete`, shaped like Kafka's tools.

The topic commands talk to ZooKeeper (as `kafka-topics.sh --zookeeper` did); `describe` also asks each
partition's leader for its log start and end offsets when that broker is reachable.
"""

from __future__ import annotations

import argparse
import sys

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


def add_parser(subparsers) -> None:
    broker = subparsers.add_parser("broker", help="run a broker")
    broker_sub = broker.add_subparsers(dest="broker_command", metavar="SUBCOMMAND")
    start = broker_sub.add_parser("start", help="start a broker in the foreground (SIGTERM/SIGINT stop it)")
    start.add_argument("--config", help="a Kafka server.properties-style file")
    start.add_argument("--id", type=int, help="broker.id")
    start.add_argument("--port", type=int, help="listener port (0 picks a free one)")
    start.add_argument("--host", help="listener host (default: every interface; advertised as this machine's name)")
    start.add_argument("--advertised-host", help="host name clients should use (advertised.listeners)")
    start.add_argument("--log-dir", help="log.dirs")
    start.add_argument("--zookeeper", help="zookeeper.connect: host:port[,host:port][/chroot]")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="any Kafka-named broker property; repeatable")
    start.set_defaults(func=_start)
    broker.set_defaults(func=lambda args: broker.print_help() or 2)

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
    delete = topics_sub.add_parser("delete", help="delete a topic (brokers delete their local logs)")
    delete.add_argument("name")
    delete.set_defaults(func=_topics_delete)
    for parser in (create, lst, describe, delete):
        parser.add_argument("--zookeeper", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    topics.set_defaults(func=lambda args: topics.print_help() or 2)


# -- broker start ---------------------------------------------------------------------------------------------


def broker_properties(args) -> dict[str, str]:
    """Properties file, then the dedicated options, then --override (last wins)."""
    from sparklog.broker.config import load_properties, parse_overrides

    props = load_properties(args.config) if args.config else {}
    if args.id is not None:
        props["broker.id"] = str(args.id)
    if args.port is not None or args.host is not None:
        port = args.port if args.port is not None else 9092
        props["listeners"] = f"PLAINTEXT://{args.host or ''}:{port}"
    if args.advertised_host:
        port = args.port if args.port is not None else 9092
        props["advertised.listeners"] = f"PLAINTEXT://{args.advertised_host}:{port if port else 0}"
    if args.log_dir:
        props["log.dirs"] = args.log_dir
    if args.zookeeper:
        props["zookeeper.connect"] = args.zookeeper
    props.update(parse_overrides(args.override))
    return props


def _start(args) -> int:
    from sparklog.broker.app import main
    from sparklog.broker.config import BrokerConfig, ConfigError

    try:
        config = BrokerConfig.from_properties(broker_properties(args))
    except (ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return main(config)


# -- topics -----------------------------------------------------------------------------------------------------


def _zk(args):
    from sparklog.coordination.connection import connect

    return connect(args.zookeeper)


def _topics_create(args) -> int:
    from sparklog.broker.config import parse_overrides
    from sparklog.coordination import topics
    from sparklog.coordination.connection import close

    zk = _zk(args)
    try:
        created = topics.create_topic(zk, args.name, args.partitions, args.replication_factor,
                                      config=parse_overrides(args.config))
    except (topics.TopicExists, topics.InvalidTopicName, topics.InvalidPartitions,
            topics.InvalidReplicationFactor, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    finally:
        close(zk)
    print(f"Created topic {created.name} with {len(created.partitions)} partitions.")
    return 0


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


def _topics_describe(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from sparklog.broker.admin import log_offsets
    from sparklog.coordination import brokers, topics
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
    finally:
        close(zk)
    console = Console()
    for topic in found:
        offsets = log_offsets(topic, live)
        config = ", ".join(f"{k}={v}" for k, v in sorted(topic.config.items())) or "-"
        table = Table(title=f"{topic.name}  partitions={len(topic.partitions)}  "
                            f"replication={topic.replication_factor}  config: {config}")
        for column in ("partition", "leader", "replicas", "isr", "log start", "log end"):
            table.add_column(column, justify="right" if column != "replicas" and column != "isr" else "left")
        for p, replicas in sorted(topic.partitions.items()):
            state = topic.states.get(p)
            leader = "-" if state is None else str(state.leader) + ("" if state.leader in live else " (down)")
            start, end = offsets.get(p, ("?", "?"))
            table.add_row(str(p), leader, ",".join(map(str, replicas)),
                          "-" if state is None else ",".join(map(str, state.isr)), str(start), str(end))
        console.print(table)
    return 0
