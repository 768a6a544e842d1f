"""`sparklog broker start`, shaped like Kafka's `kafka-server-start.sh` (`sparklog topics` is topics.py)."""

from __future__ import annotations

import sys

from sparklog.cli.zookeeper import port_number

DEFAULT_ZOOKEEPER = "127.0.0.1:2181"


def add_parser(subparsers) -> None:
    broker = subparsers.add_parser("broker", help="run a broker")
    broker_sub = broker.add_subparsers(dest="broker_command", metavar="SUBCOMMAND")
    start = broker_sub.add_parser("start", help="start a broker in the foreground (SIGTERM/SIGINT stop it)")
    start.add_argument("--config", help="a Kafka server.properties-style file")
    start.add_argument("--id", type=int, help="broker.id")
    start.add_argument("--port", type=port_number, help="listener port (0 picks a free one)")
    start.add_argument("--host", help="listener host (default: every interface, advertised as this machine's "
                       "canonical host name, as Kafka does: the name its address resolves back to, which is "
                       "localhost where the machine's name resolves to a loopback address; clients on other "
                       "machines need --advertised-host then)")
    start.add_argument("--advertised-host", help="host name clients should use (advertised.listeners)")
    start.add_argument("--log-dir", help="log.dirs")
    start.add_argument("--zookeeper", help="zookeeper.connect: host:port[,host:port][/chroot]")
    start.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                       help="any Kafka-named broker property; repeatable")
    start.set_defaults(func=_start)
    broker.set_defaults(func=lambda args: broker.print_help() or 2)



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
